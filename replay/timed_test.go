package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// crossTrace: stream 0x1 allocates 20 MiB, is busy for 60 ms and frees
// it; 0.1 ms later stream 0x2 asks for 20 MiB. Untimed, the free is
// complete at once and the driver pool hands the block to 0x2 (one 32 MiB
// growth). Timed, 0x1 is still running the 60 ms of work enqueued before
// the free, so the pool grows a second time. Each stream's gap becomes a
// kernel: 60 ms on 0x1, 0.1 ms on 0x2.
const crossTrace = `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000000,allocate,0x7f0000000000,20971520,0x1
1,10:00:00.060000,free,0x7f0000000000,20971520,0x1
1,10:00:00.060100,allocate,0x7f0002000000,20971520,0x2
1,10:00:00.060200,free,0x7f0002000000,20971520,0x2
`

func TestTimedReplay(t *testing.T) {
	for _, tc := range []struct {
		timed        bool
		scale        float64
		wantReserved uint64
		wantKernels  int64
		minWall      time.Duration
	}{
		{false, 0, 32 << 20, 0, 0},
		{true, 0, 64 << 20, 2, 60 * time.Millisecond},
		{true, 0.5, 64 << 20, 2, 30 * time.Millisecond},
	} {
		dev, err := sim.New(sim.Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
		if err != nil {
			t.Fatal(err)
		}
		tr := trace.NewCSVReader(strings.NewReader(crossTrace), "cross.csv")
		r, err := Run(context.Background(), tr, dev, res, Options{Timed: tc.timed, TimeScale: tc.scale, TimedMinKernel: 20 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		scale := tc.scale
		if scale == 0 {
			scale = 1
		}
		wantWork := time.Duration(0)
		if tc.timed {
			wantWork = time.Duration(60.1e6 * scale) // each stream's gap: 60 ms on 0x1, 0.1 ms on 0x2
		}
		if r.PeakReservedBytes != tc.wantReserved || r.Timed != tc.timed || r.TimedKernels != tc.wantKernels ||
			r.TimedWork != wantWork || r.Wall < tc.minWall || r.Events != 4 {
			t.Errorf("timed %v scale %v: reserved %d (want %d), kernels %d, work %v (want %v), wall %v (at least %v)",
				tc.timed, tc.scale, r.PeakReservedBytes, tc.wantReserved, r.TimedKernels, r.TimedWork, wantWork, r.Wall, tc.minWall)
		}
		t.Logf("timed %v scale %v: reserved %d, wall %v, behind %v", tc.timed, tc.scale, r.PeakReservedBytes, r.Wall, r.TimedBehind)
		if err := res.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Gaps shorter than TimedMinKernel add up to the next one on the same stream;
// the other stream's events do not shorten a stream's gap.
func TestTimedShortGaps(t *testing.T) {
	var b strings.Builder
	b.WriteString(trace.Header + "\n")
	// Stream 0x1 every 5 µs for 100 events (495 µs of gaps: 24 kernels
	// of 20 µs and 15 µs carried), stream 0x2 once in between.
	for i := range 100 {
		op, ptr := "allocate", 0x1000+i/2*0x1000
		if i%2 == 1 {
			op = "free"
		}
		fmt.Fprintf(&b, "1,10:00:00.%06d,%s,%#x,256,0x1\n", i*5, op, ptr)
		if i == 50 {
			fmt.Fprintf(&b, "1,10:00:00.%06d,allocate,0x99000,256,0x2\n", i*5+1)
		}
	}
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), trace.NewCSVReader(strings.NewReader(b.String()), "short.csv"), dev,
		mr.NewDirect(dev), Options{Timed: true, TimedMinKernel: 20 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.TimedKernels != 24 || r.TimedWork != 480*time.Microsecond {
		t.Errorf("%d kernels, %v of work; want 24, 480µs", r.TimedKernels, r.TimedWork)
	}
}

func TestTimedBadScale(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, scale := range []float64{-1, -0.001} {
		tr := trace.NewCSVReader(strings.NewReader(crossTrace), "cross.csv")
		r, err := Run(context.Background(), tr, dev, mr.NewDirect(dev), Options{Timed: true, TimeScale: scale})
		if !errors.Is(err, ErrTimeScale) || r != nil {
			t.Errorf("scale %v: %v, %v; want ErrTimeScale", scale, r, err)
		}
	}
	tr := trace.NewCSVReader(strings.NewReader(crossTrace), "cross.csv")
	r, err := Run(context.Background(), tr, dev, mr.NewDirect(dev), Options{Timed: true, TimedMinKernel: -time.Microsecond})
	if !errors.Is(err, ErrTimeScale) || r != nil {
		t.Errorf("shortest kernel -1µs: %v, %v; want ErrTimeScale", r, err)
	}
}

// A timed replay stops at ctx's cancellation while it waits for the
// trace's time, and cleans up.
func TestTimedCancel(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	// Ten seconds between the two events.
	const slow = trace.Header + "\n1,10:00:00.000000,allocate,0x1000,256,0x1\n1,10:00:10.000000,free,0x1000,256,0x1\n"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := mr.NewDirect(dev)
	start := time.Now()
	_, err = Run(ctx, trace.NewCSVReader(strings.NewReader(slow), "slow.csv"), dev, res, Options{Timed: true})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("after %v: %v; want DeadlineExceeded", time.Since(start), err)
	}
	if u := res.Usage(); u.Used != 0 {
		t.Errorf("%d bytes still used", u.Used)
	}
}
