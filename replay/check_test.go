package replay

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// checkTrace: peak live 4,000,000 bytes on two streams.
const checkTrace = `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000001,allocate,0x7f0000000000,1000000,0x0
1,10:00:00.000002,allocate,0x7f0000100000,3000000,0x7f
1,10:00:00.000003,free,0x7f0000000000,1000000,0x7f
1,10:00:00.000004,allocate,0x7f0000000000,500000,0x0
`

func TestCheck(t *testing.T) {
	const live = 4_000_000
	for _, tc := range []struct {
		name     string
		capacity uint64
		budget   Budget
		wantErr  error
		wantOver []string
	}{
		{"within", 0, Budget{PeakReserved: live, Fragmentation: 1, FailuresSet: true}, nil, nil},
		{"reserved", 0, Budget{PeakReserved: live - 1}, ErrOverBudget,
			[]string{"peak reserved 3.8 MiB (4000000 bytes) > 3.8 MiB (3999999 bytes)"}},
		{"fragmentation and reserved", 0, Budget{PeakReserved: 1 << 20, Fragmentation: 0.5}, ErrOverBudget,
			[]string{"peak reserved 3.8 MiB (4000000 bytes) > 1.0 MiB (1048576 bytes)", "fragmentation 1.0000 > 0.5000"}},
		// On a 2 MiB device the 3,000,000-byte block is refused.
		{"failures", 2 << 20, Budget{FailuresSet: true}, ErrOverBudget, []string{"1 allocations refused > 0"}},
		{"failures allowed", 2 << 20, Budget{Failures: 1, FailuresSet: true}, nil, nil},
		{"nothing", 0, Budget{}, ErrBudget, nil},
		{"negative fragmentation", 0, Budget{PeakReserved: 1, Fragmentation: -1}, ErrBudget, nil},
		{"NaN fragmentation", 0, Budget{PeakReserved: 1, Fragmentation: math.NaN()}, ErrBudget, nil},
		{"negative failures", 0, Budget{Failures: -1, FailuresSet: true}, ErrBudget, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := sim.New(sim.Config{Capacity: tc.capacity}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			tr := trace.NewCSVReader(strings.NewReader(checkTrace), "check.csv")
			r, err := Check(context.Background(), tr, dev, mr.NewDirect(dev), tc.budget, Options{Resource: "direct"})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if errors.Is(tc.wantErr, ErrBudget) {
				if r != nil {
					t.Errorf("a bad budget replayed: %+v", r)
				}
				return
			}
			if r == nil || r.Events != 4 || r.PeakLiveBytes != live {
				t.Fatalf("result %+v", r)
			}
			var over *OverBudgetError
			if errors.As(err, &over) != (tc.wantErr != nil) {
				t.Fatalf("error %v is not an *OverBudgetError", err)
			}
			if over == nil {
				return
			}
			if over.Result != r || over.Budget != tc.budget || strings.Join(over.Over, "|") != strings.Join(tc.wantOver, "|") {
				t.Errorf("over %q, want %q", over.Over, tc.wantOver)
			}
			want := "replay: check.csv on direct: over budget: " + strings.Join(tc.wantOver, "; ") + " (peak live 3.8 MiB (4000000 bytes))"
			if err.Error() != want {
				t.Errorf("message %q\nwant    %q", err, want)
			}
		})
	}
}

// A trace that does not parse is Run's error, not a budget's.
func TestCheckBadTrace(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	tr := trace.NewCSVReader(strings.NewReader(trace.Header+"\n1,10:00:00.000001,allocate,0x10,five,0x0\n"), "bad.csv")
	r, err := Check(context.Background(), tr, dev, mr.NewDirect(dev), Budget{PeakReserved: 1}, Options{})
	if !errors.Is(err, trace.ErrSize) || errors.Is(err, ErrOverBudget) || r != nil {
		t.Errorf("%+v, %v; want trace.ErrSize", r, err)
	}
}
