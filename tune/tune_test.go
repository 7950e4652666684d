package tune_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/tune"
)

var heldTraces = []string{
	"../replay/testdata/torch-pipeline-2stream-b.csv.gz",
	"../replay/testdata/torch-serve-varlen-b.csv.gz",
	"../replay/testdata/torch-train-gpt-b.csv.gz",
}

func load(t testing.TB, paths ...string) []*tune.Trace {
	t.Helper()
	var out []*tune.Trace
	for _, p := range paths {
		f, err := trace.Open(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := tune.Load(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tr)
	}
	return out
}

func newSim() (gpu.Device, error) { return sim.New(sim.Config{}).Device(0) }

// On the held traces, the pick of each resource's grid reserves no more
// than that resource's defaults, and the overall pick no more than any
// default; binning, whose default bins are far from these workloads,
// improves strictly. Every outcome is what a replay of its own reports.
func TestTuneHeldTraces(t *testing.T) {
	paths := heldTraces
	if raceEnabled {
		paths = heldTraces[1:2] // the serving trace alone
	}
	traces := load(t, paths...)
	grid, err := tune.Grid(tune.Resources)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	outs, err := tune.Run(context.Background(), traces, grid, tune.Options{NewDevice: newSim,
		Progress: func(done, total int) {
			if total != len(grid)*len(traces) || done < 1 || done > total {
				t.Errorf("progress %d/%d", done, total)
			}
			calls.Add(1)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != int64(len(grid)*len(traces)) {
		t.Errorf("%d progress calls, want %d", n, len(grid)*len(traces))
	}
	if len(outs) != len(grid) {
		t.Fatalf("%d outcomes for %d settings", len(outs), len(grid))
	}
	best, err := tune.LeastReserved(outs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Setting != grid[i] {
			t.Fatalf("outcome %d is %v, want %v (the order of the settings)", i, o.Setting, grid[i])
		}
		if o.Err != "" || len(o.Traces) != len(traces) {
			t.Fatalf("%v: %q, %d traces", o.Setting, o.Err, len(o.Traces))
		}
	}
	for _, name := range tune.Resources {
		var def tune.Outcome
		var mine []tune.Outcome
		for _, o := range outs {
			if o.Setting.Resource == name {
				mine = append(mine, o)
				if o.Setting == (tune.Setting{Resource: name}) {
					def = o
				}
			}
		}
		pick, err := tune.LeastReserved(mine, 0)
		if err != nil {
			t.Fatal(err)
		}
		if pick.ReservedBytes > def.ReservedBytes || best.ReservedBytes > def.ReservedBytes {
			t.Errorf("%s: pick %v reserves %d, overall %v %d, more than the defaults' %d",
				name, pick.Setting, pick.ReservedBytes, best.Setting, best.ReservedBytes, def.ReservedBytes)
		}
		if name == "binning" && pick.ReservedBytes >= def.ReservedBytes*9/10 {
			t.Errorf("binning: pick %v reserves %d, want under 90%% of the defaults' %d", pick.Setting, pick.ReservedBytes, def.ReservedBytes)
		}
		t.Logf("%-8s default %5d MiB, pick %5d MiB: %v", name, def.ReservedBytes>>20, pick.ReservedBytes>>20, pick.Setting)
	}
	// The winner, replayed on its own, reserves what the run said.
	for i, tr := range traces {
		dev, _ := newSim()
		res, closeRes, err := best.Setting.Build(dev)
		if err != nil {
			t.Fatal(err)
		}
		r, err := replay.Run(context.Background(), tr.Reader(), dev, res, replay.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := closeRes(); err != nil {
			t.Fatal(err)
		}
		if r.PeakReservedBytes != best.Traces[i].PeakReservedBytes {
			t.Errorf("%s: %v reserves %d alone, %d in the run", tr.Name, best.Setting, r.PeakReservedBytes, best.Traces[i].PeakReservedBytes)
		}
	}
}

// A resource's default setting builds what the registry builds for
// `streamalloc replay`: the same figures on a trace.
func TestDefaultsAreTheRegistrys(t *testing.T) {
	tr := load(t, heldTraces[1])[0]
	for _, s := range tune.Defaults(tune.Resources) {
		outs, err := tune.Run(context.Background(), []*tune.Trace{tr}, []tune.Setting{s}, tune.Options{NewDevice: newSim, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		dev, _ := newSim()
		res, closeRes, err := registry.New(s.Resource, dev, registry.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := replay.Run(context.Background(), tr.Reader(), dev, res, replay.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := closeRes(); err != nil {
			t.Fatal(err)
		}
		if got := outs[0].Traces[0].PeakReservedBytes; got != r.PeakReservedBytes {
			t.Errorf("%v: %d, registry's %s: %d", s, got, s.Resource, r.PeakReservedBytes)
		}
	}
}

func TestSelect(t *testing.T) {
	o := func(name string, reserved uint64, frag, ns float64, failures int64, err string) tune.Outcome {
		return tune.Outcome{Setting: tune.Setting{Resource: name}, ReservedBytes: reserved, MaxFragmentation: frag,
			NsPerEvent: ns, Failures: failures, Err: err}
	}
	outs := []tune.Outcome{
		o("a", 100, 1.5, 300, 0, ""),
		o("b", 80, 1.2, 900, 0, ""),
		o("c", 50, 1.0, 100, 1, ""),    // refused an allocation
		o("d", 40, 1.0, 50, 0, "boom"), // a replay failed
		o("e", 80, 1.2, 700, 0, ""),    // ties b on memory, faster: b comes first
		o("f", 120, 1.1, 300, 0, ""),   // ties a on time, reserves more
		o("g", 100, 1.5, 300, 0, ""),   // a's twin: a comes first
		o("h", 200, 2.0, 90, 0, ""),
	}
	for _, tc := range []struct {
		name    string
		least   bool
		bound   float64
		want    string
		wantErr error
	}{
		{"least, no bound", true, 0, "b", nil},
		{"least, ns bound", true, 500, "a", nil},
		{"least, ns bound inclusive", true, 700, "e", nil},
		{"least, bound too tight", true, 10, "", tune.ErrNoSetting},
		{"fastest, no bound", false, 0, "h", nil},
		{"fastest, frag bound", false, 1.5, "a", nil},
		{"fastest, frag bound tighter", false, 1.2, "f", nil},
		{"fastest, only ineligible ones under the bound", false, 1.0, "", tune.ErrNoSetting},
		{"fastest, frag bound too tight", false, 1.05, "", tune.ErrNoSetting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tune.Fastest
			if tc.least {
				sel = tune.LeastReserved
			}
			got, err := sel(outs, tc.bound)
			if !errors.Is(err, tc.wantErr) || got.Setting.Resource != tc.want {
				t.Errorf("got %q, %v; want %q, %v", got.Setting.Resource, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := tune.LeastReserved(nil, 0); !errors.Is(err, tune.ErrNoSetting) {
		t.Errorf("no outcomes: %v, want %v", err, tune.ErrNoSetting)
	}
}

func TestRunErrors(t *testing.T) {
	tr := load(t, heldTraces[0])
	ok := []tune.Setting{{Resource: "pool"}}
	if _, err := tune.Run(context.Background(), nil, ok, tune.Options{NewDevice: newSim}); !errors.Is(err, tune.ErrNoTrace) {
		t.Errorf("no traces: %v, want %v", err, tune.ErrNoTrace)
	}
	if _, err := tune.Run(context.Background(), tr, nil, tune.Options{NewDevice: newSim}); !errors.Is(err, tune.ErrNoTrace) {
		t.Errorf("no settings: %v, want %v", err, tune.ErrNoTrace)
	}
	if _, err := tune.Run(context.Background(), tr, ok, tune.Options{}); err == nil {
		t.Error("no NewDevice: no error")
	}
	if _, err := tune.Grid([]string{"pool", "direct"}); !errors.Is(err, tune.ErrResource) {
		t.Errorf("Grid(direct): %v, want %v", err, tune.ErrResource)
	}
	// A setting that cannot be built, and a device that cannot be made,
	// make their outcomes ineligible, not the run.
	devErr := errors.New("no device")
	bad := []tune.Setting{{Resource: "pool"}, {Resource: "nonesuch"}, {Resource: "arena", Arena: tune.ArenaSetting{SuperblockSize: 4 << 30}}}
	outs, err := tune.Run(context.Background(), tr, bad, tune.Options{NewDevice: newSim})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0].Err != "" || outs[1].Err == "" || outs[2].Err == "" {
		t.Errorf("errors %q %q %q: want only the last two", outs[0].Err, outs[1].Err, outs[2].Err)
	}
	if best, err := tune.LeastReserved(outs, 0); err != nil || best.Setting != bad[0] {
		t.Errorf("pick %v, %v: want the only eligible one", best.Setting, err)
	}
	outs, err = tune.Run(context.Background(), tr, ok, tune.Options{NewDevice: func() (gpu.Device, error) { return nil, devErr }})
	if err != nil || len(outs) != 1 || outs[0].Err == "" {
		t.Errorf("device error: %v, %+v", err, outs)
	}
	if _, err := tune.LeastReserved(outs, 0); !errors.Is(err, tune.ErrNoSetting) {
		t.Errorf("only failed outcomes: %v, want %v", err, tune.ErrNoSetting)
	}
	// Cancellation stops the run with ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tune.Run(ctx, tr, ok, tune.Options{NewDevice: newSim}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want %v", err, context.Canceled)
	}
}

func TestGridHoldsDefaultsOnce(t *testing.T) {
	grid, err := tune.Grid(tune.Resources)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range grid {
		if slices.Contains(grid[:i], s) {
			t.Errorf("%v twice", s)
		}
	}
	for _, d := range tune.Defaults(tune.Resources) {
		i := slices.Index(grid, d)
		if i < 0 || (i > 0 && grid[i-1].Resource == d.Resource) {
			t.Errorf("%v: at %d, want first of its resource", d, i)
		}
	}
}
