package replay

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
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

// A Pool's counters come with its replay (Result.Pool): every allocation
// the trace made is one the pool served, each freed (the replay frees
// what the trace left live), some from the quick cache, and the frees of
// the trace's frees on another stream than the allocation's counted as
// cross-stream. A resource that is not a Pool has none.
func TestPoolStatsInResult(t *testing.T) {
	replayOn := func(t *testing.T, file string, res func(gpu.Device) mr.Resource) *Result {
		t.Helper()
		dev, err := sim.New(sim.Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		f, err := trace.Open(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r, err := Run(context.Background(), f, dev, res(dev), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range sharedTraces {
		t.Run(tc.file, func(t *testing.T) {
			var pool *mr.Pool
			r := replayOn(t, tc.file, func(d gpu.Device) mr.Resource {
				p, err := mr.NewPool(mr.NewDirect(d), mr.PoolOptions{})
				if err != nil {
					t.Fatal(err)
				}
				pool = p
				return p
			})
			defer pool.Close()
			ps := r.Pool
			if ps == nil {
				t.Fatal("no pool counters in the result of a Pool's replay")
			}
			if want := uint64(tc.allocs); ps.Allocations != want || ps.Frees != want {
				t.Errorf("pool served %d allocations and %d frees, want %d each", ps.Allocations, ps.Frees, want)
			}
			if ps.QuickHits == 0 || ps.QuickHits > ps.Allocations {
				t.Errorf("quick hits %d of %d allocations", ps.QuickHits, ps.Allocations)
			}
			if want := crossStreamFrees(t, tc.file); ps.CrossStreamFrees != want {
				t.Errorf("%d cross-stream frees, the trace has %d", ps.CrossStreamFrees, want)
			}
			if ps.Growths == 0 || ps.Releases == 0 {
				t.Errorf("growths %d, releases %d: the replay grew the pool and released it at the end", ps.Growths, ps.Releases)
			}
			if got := *ps; got != pool.Stats() {
				t.Errorf("result's counters %+v, the pool's own %+v", got, pool.Stats())
			}
		})
	}
	r := replayOn(t, sharedTraces[0].file, func(d gpu.Device) mr.Resource { return mr.NewDirect(d) })
	if r.Pool != nil {
		t.Errorf("a resource that is not a pool has pool counters: %+v", *r.Pool)
	}
}

// crossStreamFrees counts the frees of file on another stream than their
// block's allocation.
func crossStreamFrees(t *testing.T, file string) uint64 {
	t.Helper()
	f, err := trace.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	on := map[uint64]uint64{}
	var n uint64
	for {
		ev, err := f.Next()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Op {
		case trace.Alloc:
			on[ev.Ptr] = ev.Stream
		case trace.Free:
			if s, ok := on[ev.Ptr]; ok && s != ev.Stream {
				n++
			}
			delete(on, ev.Ptr)
		}
	}
}
