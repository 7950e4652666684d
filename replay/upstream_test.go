package replay

import (
	"context"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// Over a timed Async upstream (what `streamalloc replay` builds by
// default), each suballocator reserves exactly what it reserves over
// Direct (simPeakReserved): its decisions do not depend on the upstream.
// The time spent in the upstream is reported apart, own and upstream add
// up to the total, the timer saw every growth, and the driver pool behind
// the suballocator reserved at least what the suballocator did.
func TestUpstreamTimerOnSim(t *testing.T) {
	tc := sharedTraces[0]
	build := map[string]func(up mr.Resource) (mr.Resource, error){
		"pool":    func(up mr.Resource) (mr.Resource, error) { return mr.NewPool(up, mr.PoolOptions{}) },
		"arena":   func(up mr.Resource) (mr.Resource, error) { return mr.NewArena(up, mr.ArenaOptions{}) },
		"binning": func(up mr.Resource) (mr.Resource, error) { return mr.NewBinning(up, mr.BinningOptions{}) },
	}
	for name, newRes := range build {
		t.Run(name, func(t *testing.T) {
			dev, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				t.Fatal(err)
			}
			defer async.Close()
			timer := NewUpstreamTimer("async", async)
			res, err := newRes(timer)
			if err != nil {
				t.Fatal(err)
			}
			if c := mr.Chain(timer); len(c) != 2 || c[1] != async {
				t.Errorf("chain through the timer: %v", c)
			}
			f, err := trace.Open(tc.file, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := Run(context.Background(), f, dev, res, Options{Resource: name, Upstream: timer})
			if err != nil {
				t.Fatal(err)
			}
			if want := simPeakReserved[tc.file][name]; r.PeakReservedBytes != want {
				t.Errorf("peak reserved %d over async, %d over direct", r.PeakReservedBytes, want)
			}
			_, calls := timer.Elapsed()
			if r.Upstream != "async" || r.UpstreamCalls < 1 || r.UpstreamCalls > calls || r.UpstreamNsPerEvent <= 0 ||
				r.OwnNsPerEvent <= 0 || math.Abs(r.OwnNsPerEvent+r.UpstreamNsPerEvent-r.NsPerEvent) > 1e-6 {
				t.Errorf("upstream %q, %d calls of %d, %.0f upstream + %.0f own = %.0f ns/event",
					r.Upstream, r.UpstreamCalls, calls, r.UpstreamNsPerEvent, r.OwnNsPerEvent, r.NsPerEvent)
			}
			if r.PeakUpstreamReservedBytes < r.PeakReservedBytes {
				t.Errorf("driver pool peaked at %d, below the suballocator's %d", r.PeakUpstreamReservedBytes, r.PeakReservedBytes)
			}
			t.Logf("%s over async: %.0f ns/event, own %.0f, upstream %.0f (%d calls)", name, r.NsPerEvent, r.OwnNsPerEvent, r.UpstreamNsPerEvent, r.UpstreamCalls)
		})
	}
}

// Without a timer the resource's time is all its own.
func TestNoUpstreamTimer(t *testing.T) {
	dev := &fakeDevice{}
	r, err := Run(context.Background(), trace.NewCSVReader(&genTrace{n: 1000}, "gen"), dev, &bumpResource{dev: dev}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Upstream != "" || r.UpstreamCalls != 0 || r.UpstreamNsPerEvent != 0 || r.OwnNsPerEvent != r.NsPerEvent || r.PeakUpstreamReservedBytes != 0 {
		t.Errorf("%+v", r)
	}
}
