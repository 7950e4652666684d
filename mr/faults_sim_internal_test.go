package mr

// Fault injection on the simulator for the pool's paths (the async
// resource's are in adaptors_sim_test.go): a Stats adaptor over a Pool over
// the async resource, with failures injected into each driver call the
// pool's paths make (growth, event creation, event record, stream wait,
// chunk free, query, synchronize). After every step, failed or not, the
// pool's invariants hold and the Stats adaptor, the pool, the async
// resource and its pending-free accounting agree with a model: nothing
// lost, nothing counted twice. A failed step is retried and must succeed.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// poolFaultStack is the stack under test and its model.
type poolFaultStack struct {
	t     *testing.T
	dev   *sim.Device
	async *Async
	pool  *Pool
	stats *Stats
	live  map[gpu.DevicePtr]int // model: allocations handed out
	freed uint64                // model: bytes of chunks freed to async, not yet reaped
}

func (st *poolFaultStack) check(when string) {
	st.t.Helper()
	var bytes uint64
	for _, n := range st.live {
		bytes += uint64(n)
	}
	if err := st.pool.checkInvariants(); err != nil {
		st.t.Fatalf("%s: pool: %v", when, err)
	}
	var used int64
	for _, ps := range st.pool.streams.all() {
		ps.mu.Lock()
		used += ps.used
		ps.mu.Unlock()
	}
	pf := st.async.Pending()
	if err := pf.Check(); err != nil {
		st.t.Fatalf("%s: %v", when, err)
	}
	asyncLive, pending, _, _ := pf.Counts()
	_, asyncBytes := st.async.Live()
	snap := st.stats.Snapshot()
	u := st.pool.Usage()
	switch {
	case snap.Bytes.Current != bytes || snap.Allocations.Current != uint64(len(st.live)):
		st.t.Fatalf("%s: stats %+v, model %d bytes in %d", when, snap, bytes, len(st.live))
	case used != int64(bytes):
		st.t.Fatalf("%s: pool streams use %d bytes, model %d", when, used, bytes)
	case u.Reserved != asyncBytes || asyncLive != asyncBytes:
		st.t.Fatalf("%s: pool reserves %d, async holds %d (pending accounting says %d live)",
			when, u.Reserved, asyncBytes, asyncLive)
	case pending != st.freed:
		st.t.Fatalf("%s: %d bytes pending in async, model %d", when, pending, st.freed)
	}
}

// probe calls op once directly and reports whether an injected failure of
// it was still waiting (the scenario never made the call).
func probe(t *testing.T, d *sim.Device, a *Async, op sim.Op) bool {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	e, err := d.NewEvent(false)
	if op == sim.OpEventCreate {
		return err != nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	switch op {
	case sim.OpEventRecord:
		return e.Record(s) != nil
	case sim.OpStreamWaitEvent:
		if err := e.Record(s); err != nil {
			t.Fatal(err)
		}
		return s.WaitEvent(e) != nil
	case sim.OpStreamQuery:
		return s.Query() != nil
	case sim.OpStreamSynchronize:
		return s.Synchronize() != nil
	case sim.OpMallocFromPoolAsync:
		p, err := a.Allocate(256, s)
		if err != nil {
			return true
		}
		a.Deallocate(p, 256, s)
		return false
	case sim.OpFreeAsync:
		p, err := a.Allocate(256, s)
		if err != nil {
			t.Fatal(err)
		}
		if a.Deallocate(p, 256, s) != nil {
			a.Deallocate(p, 256, s)
			return true
		}
		return false
	}
	t.Fatalf("no probe for %v", op)
	return false
}

func TestPoolFaultAccounting(t *testing.T) {
	injected := gpu.ErrLaunchFailed
	// n is how many calls fail in a row. One failed absorb is recovered
	// inside the allocation (the fast path's absorb fails, the slow
	// path's succeeds); two make the allocation fail.
	ops := []struct {
		op  sim.Op
		n   int
		err error
	}{
		{sim.OpMallocFromPoolAsync, 1, injected},
		{sim.OpMallocFromPoolAsync, 1, gpu.ErrOutOfMemory},
		{sim.OpEventCreate, 1, injected},
		{sim.OpEventCreate, 2, injected},
		{sim.OpEventRecord, 1, injected},
		{sim.OpEventRecord, 2, injected},
		{sim.OpStreamWaitEvent, 1, injected},
		{sim.OpStreamWaitEvent, 2, injected},
		{sim.OpFreeAsync, 1, injected},
		{sim.OpStreamQuery, 1, injected},
		{sim.OpStreamSynchronize, 1, injected},
	}
	for _, fo := range ops {
		t.Run(fmt.Sprintf("%v/%dx%v", fo.op, fo.n, fo.err), func(t *testing.T) {
			d, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			dev := d.(*sim.Device)
			a, err := NewAsync(dev, AsyncOptions{OwnPool: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			// One chunk at most: a request that the chunk's free blocks
			// cannot serve must absorb the blocks freed on s2, and a
			// failure there cannot be papered over by a growth.
			p, err := NewPool(a, PoolOptions{ChunkSize: 4 << 20, MaxSize: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			st := &poolFaultStack{t: t, dev: dev, async: a, pool: p,
				stats: NewStats(p, StatsOptions{PerStream: true}), live: map[gpu.DevicePtr]int{}}
			s1, err := dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Destroy()
			s2, err := dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Destroy()

			dev.FailNext(fo.op, fo.n, fo.err)
			// Failed steps, failed allocations, and those of them that
			// reported out of memory.
			var failures, allocFailures, oomFailures uint64
			run := func(name string, step func() error) {
				t.Helper()
				if err := step(); err != nil {
					if !errors.Is(err, fo.err) {
						t.Fatalf("%s: %v, want the injected %v", name, err, fo.err)
					}
					t.Logf("%s failed: %v", name, err)
					failures++
					if strings.HasPrefix(name, "allocate") {
						allocFailures++
						if errors.Is(err, ErrOutOfMemory) {
							oomFailures++
						}
					}
					st.check(name + " (failed)")
					if err := step(); err != nil {
						t.Fatalf("%s retried: %v", name, err)
					}
				}
				st.check(name)
			}
			alloc := func(ptr *gpu.DevicePtr, size int, s gpu.Stream) func() error {
				return func() error {
					x, err := st.stats.Allocate(size, s)
					if err == nil {
						*ptr = x
						st.live[x] = size
					}
					return err
				}
			}
			free := func(ptr *gpu.DevicePtr, size int, s gpu.Stream) func() error {
				return func() error {
					err := st.stats.Deallocate(*ptr, size, s)
					if err == nil {
						delete(st.live, *ptr)
					}
					return err
				}
			}
			release := func() error {
				before := p.Usage().Reserved
				err := p.Release()
				st.freed += before - p.Usage().Reserved
				return err
			}
			reap := func(wait bool) func() error {
				return func() error {
					n, err := a.Reap(wait)
					st.freed -= n
					return err
				}
			}
			var w, x, y, z gpu.DevicePtr
			// w stays live in the chunk, so that the chunk cannot be
			// released to make room: a request the chunk's free blocks
			// cannot serve must absorb the blocks freed on s2.
			run("allocate w on s1 (growth)", alloc(&w, 512<<10, s1))
			run("allocate x on s1", alloc(&x, 1<<20, s1))
			run("allocate y on s1", alloc(&y, 3<<19, s1))
			run("free x on s2 (cross-stream)", free(&x, 1<<20, s2))
			run("free y on s2 (cross-stream)", free(&y, 3<<19, s2))
			run("allocate z on s1 (absorbs s2's frees)", alloc(&z, 5<<19, s1))
			run("free z on s2 (cross-stream)", free(&z, 5<<19, s2))
			run("free w on s1", free(&w, 512<<10, s1))
			run("release (waits on s2, chunk freed to async)", release)
			if err := dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			run("query reap", reap(false))
			run("allocate x on s2 (growth)", alloc(&x, 1<<20, s2))
			run("free x on s2", free(&x, 1<<20, s2))
			run("release again", release)
			run("waiting reap", reap(true))

			if failures > 1 || (fo.n > 1 && failures == 0) {
				t.Fatalf("%d steps failed, %d calls were made to fail", failures, fo.n)
			}
			if len(st.live) != 0 || st.freed != 0 || a.Pending().Outstanding() != 0 || p.Usage().Reserved != 0 {
				t.Fatalf("left %d live, %d freed unreaped, outstanding %d, pool reserves %d",
					len(st.live), st.freed, a.Pending().Outstanding(), p.Usage().Reserved)
			}
			snap := st.stats.Snapshot()
			if snap.Allocations.Total != 5 || snap.Failures != allocFailures || snap.OutOfMemory != oomFailures {
				t.Fatalf("stats %+v, want 5 allocations, %d failures, %d out of memory",
					snap, allocFailures, oomFailures)
			}
			if probe(t, dev, a, fo.op) {
				t.Fatalf("the scenario never called %v", fo.op)
			}
		})
	}
}

// failuresOf is the allocations a Stats adaptor above the pool sees fail:
// each failed step that is an allocation. In this scenario only growth,
// event and wait failures surface in allocations.
func failuresOf(failures int, op sim.Op) int {
	switch op {
	case sim.OpFreeAsync, sim.OpStreamQuery, sim.OpStreamSynchronize:
		return 0
	}
	return failures
}
