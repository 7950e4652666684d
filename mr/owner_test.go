package mr_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// newOwnedPool returns a pool over direct memory on the test device, and a
// stream of that device.
func newOwnedPool(t *testing.T) (*mr.Pool, gpu.Stream) {
	t.Helper()
	dev := testdev.Device(t)
	p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Synchronize()
		s.Destroy()
		p.Close()
	})
	return p, s
}

// TestPoolOwners checks the pool's side of the owner contract (owner.go):
// a free naming another owner, or a plain Deallocate of owned memory, is
// refused as an unknown pointer and changes nothing, on the fast slot's
// path (a repeated pair) and on the locked one, on the pool's first stream
// (which its entry points find without a call) and on a later one.
func TestPoolOwners(t *testing.T) {
	for _, later := range []bool{false, true} {
		name := "first stream"
		if later {
			name = "later stream"
		}
		t.Run(name, func(t *testing.T) { testPoolOwners(t, later) })
	}
}

func testPoolOwners(t *testing.T, later bool) {
	pool, s := newOwnedPool(t)
	if later {
		// The pool's first stream is s; the test runs on another.
		p, err := pool.Allocate(4096, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := pool.Deallocate(p, 4096, s); err != nil {
			t.Fatal(err)
		}
		if s, err = pool.Device().NewStream(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Synchronize()
			s.Destroy()
		})
	}
	o1, o2 := mr.NewOwner(), mr.NewOwner()
	if !pool.OwnersChecked() {
		t.Fatal("pool does not check owners")
	}
	plain, err := pool.Allocate(4096, s)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 { // round 1 and 2 are served by the fast slot
		p, err := pool.AllocateOwned(1000, s, o1)
		if err != nil {
			t.Fatal(err)
		}
		before := pool.Usage()
		bad := []struct {
			name string
			err  error
			want error
		}{
			{"another owner", pool.DeallocateOwned(p, 1000, s, o2), mr.ErrUnknownPointer},
			{"plain free of owned memory", pool.Deallocate(p, 1000, s), mr.ErrUnknownPointer},
			{"owned free of plain memory", pool.DeallocateOwned(plain, 4096, s, o1), mr.ErrUnknownPointer},
			{"wrong size", pool.DeallocateOwned(p, 999, s, o1), mr.ErrSizeMismatch},
			{"inside", pool.DeallocateOwned(p+256, 1000, s, o1), mr.ErrUnknownPointer},
		}
		for _, b := range bad {
			if !errors.Is(b.err, b.want) {
				t.Errorf("round %d, %s: got %v, want %v", round, b.name, b.err, b.want)
			}
		}
		if got := pool.Usage(); got != before {
			t.Errorf("round %d: bad frees changed the usage: %+v, was %+v", round, got, before)
		}
		if err := pool.DeallocateOwned(p, 1000, s, o1); err != nil {
			t.Fatalf("round %d: owner's free: %v", round, err)
		}
		if err := pool.DeallocateOwned(p, 1000, s, o1); !errors.Is(err, mr.ErrDoubleFree) {
			t.Errorf("round %d: double free: got %v, want ErrDoubleFree", round, err)
		}
	}
	// The fast slot holds o1's block: another owner's request of the same
	// size gets memory it can free, and o1 cannot free it.
	q, err := pool.AllocateOwned(1000, s, o2)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.DeallocateOwned(q, 1000, s, o1); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Errorf("o1 freed o2's block: %v", err)
	}
	if err := pool.DeallocateOwned(q, 1000, s, o2); err != nil {
		t.Fatal(err)
	}
	if err := pool.Deallocate(plain, 4096, s); err != nil {
		t.Fatal(err)
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("used %d after every free", u.Used)
	}
}

// ownedCases are the adaptors that keep no pointer table over an
// OwnedResource, with their observable state (Logging's is its log).
func ownedCases() []adaptorCase {
	var out []adaptorCase
	for _, ac := range adaptorCases() {
		switch ac.name {
		case "stats":
			out = append(out, adaptorCase{"stats",
				func(t testing.TB, up mr.Resource) mr.Resource { return mr.NewStats(up, mr.StatsOptions{}) },
				func(a mr.Resource) string { return fmt.Sprint(a.(*mr.Stats).Snapshot()) }})
		case "limit", "retry", "logging":
			out = append(out, ac)
		}
	}
	return out
}

// TestAdaptorsOverOwnedBadInput is TestAdaptorsBadInput for the adaptors
// over a pool, where the pool, not a table of theirs, refuses bad frees:
// every one is refused with its exact error and changes neither the
// adaptor's state nor the pool's usage, and memory of the pool handed out
// around the adaptor, or through another adaptor over the same pool, is an
// unknown pointer to it.
func TestAdaptorsOverOwnedBadInput(t *testing.T) {
	cases := ownedCases()
	stack := adaptorCase{"stack",
		func(t testing.TB, up mr.Resource) mr.Resource {
			r := up
			for _, ac := range cases {
				r = ac.wrap(t, r)
			}
			return r
		},
		func(a mr.Resource) string { return fmt.Sprint(a.(*mr.Retry).Counts()) }}
	for _, ac := range append(cases, stack) {
		t.Run(ac.name, func(t *testing.T) {
			pool, s := newOwnedPool(t)
			a := ac.wrap(t, pool)
			if o, ok := a.(mr.OwnedResource); !ok || !o.OwnersChecked() {
				t.Fatalf("%T over a pool does not check owners", a)
			}
			other := ac.wrap(t, pool)
			p, err := a.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			around, err := pool.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			others, err := other.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			before, usage := ac.state(a), pool.Usage()
			bad := []struct {
				name string
				op   func() error
				want error
			}{
				{"unknown pointer", func() error { return a.Deallocate(p+1<<30, 1000, s) }, mr.ErrUnknownPointer},
				{"the pool's own allocation", func() error { return a.Deallocate(around, 1000, s) }, mr.ErrUnknownPointer},
				{"another adaptor's allocation", func() error { return a.Deallocate(others, 1000, s) }, mr.ErrUnknownPointer},
				{"inside allocation", func() error { return a.Deallocate(p+256, 1000, s) }, mr.ErrUnknownPointer},
				{"wrong size", func() error { return a.Deallocate(p, 999, s) }, mr.ErrSizeMismatch},
				{"negative size", func() error { return a.Deallocate(p, -1, s) }, mr.ErrInvalidSize},
				{"nil stream", func() error { return a.Deallocate(p, 1000, nil) }, gpu.ErrInvalidHandle},
				{"null with size", func() error { return a.Deallocate(0, 8, s) }, mr.ErrSizeMismatch},
				{"allocate negative", func() error { _, err := a.Allocate(-1, s); return err }, mr.ErrInvalidSize},
				{"allocate nil stream", func() error { _, err := a.Allocate(8, nil); return err }, gpu.ErrInvalidHandle},
			}
			for _, b := range bad {
				if err := b.op(); !errors.Is(err, b.want) {
					t.Errorf("%s: got %v, want %v", b.name, err, b.want)
				}
				if got := ac.state(a); got != before {
					t.Errorf("%s changed the adaptor's state:\n%s\nwas\n%s", b.name, got, before)
				}
				if got := pool.Usage(); got != usage {
					t.Errorf("%s changed the pool: %+v, was %+v", b.name, got, usage)
				}
			}
			if err := a.Deallocate(p, 1000, s); err != nil {
				t.Fatal(err)
			}
			after := ac.state(a)
			if err := a.Deallocate(p, 1000, s); !errors.Is(err, mr.ErrDoubleFree) {
				t.Errorf("double free: got %v, want ErrDoubleFree", err)
			}
			if ac.state(a) != after {
				t.Errorf("double free changed the state")
			}
			if err := other.Deallocate(others, 1000, s); err != nil {
				t.Errorf("the other adaptor's free: %v", err)
			}
			if err := pool.Deallocate(around, 1000, s); err != nil {
				t.Errorf("the pool's own free: %v", err)
			}
		})
	}
}

// TestStatsOverPoolExact checks Stats' table-free counters over a pool:
// exact current values, totals and peaks when operations on several
// streams do not overlap (a free on another stream than the allocation's
// included), and exact current values and totals after many goroutines
// on several streams ran at once.
func TestStatsOverPoolExact(t *testing.T) {
	pool, s := newOwnedPool(t)
	dev := pool.Device()
	streams := []gpu.Stream{s}
	for range 3 {
		x, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Synchronize(); x.Destroy() })
		streams = append(streams, x)
	}
	st := mr.NewStats(pool, mr.StatsOptions{})
	alloc := func(n int, s gpu.Stream) gpu.DevicePtr {
		t.Helper()
		p, err := st.Allocate(n, s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	free := func(p gpu.DevicePtr, n int, s gpu.Stream) {
		t.Helper()
		if err := st.Deallocate(p, n, s); err != nil {
			t.Fatal(err)
		}
	}
	want := func(step string, cur, peak, total, count, peakCount, totalCount uint64) {
		t.Helper()
		got := st.Snapshot()
		w := mr.StatsSnapshot{Bytes: mr.Counter{Current: cur, Peak: peak, Total: total},
			Allocations: mr.Counter{Current: count, Peak: peakCount, Total: totalCount}}
		if got != w {
			t.Errorf("%s: %+v, want %+v", step, got, w)
		}
	}
	a, b, c, d := streams[0], streams[1], streams[2], streams[3]
	p := alloc(1<<20, a)
	free(p, 1<<20, b) // freed on another stream
	q := alloc(512<<10, c)
	r := alloc(256<<10, a)
	want("after a cross-stream free", 768<<10, 1<<20, 1<<20+768<<10, 2, 2, 3)
	for range 100 { // a repeated pair on d
		free(alloc(4096, d), 4096, d)
	}
	u := alloc(512<<10, b)
	want("new peak", 1280<<10, 1280<<10, 1<<20+1280<<10+100*4096, 3, 3, 104)
	free(q, 512<<10, c)
	free(r, 256<<10, a)
	free(u, 512<<10, b)
	want("all freed", 0, 1280<<10, 1<<20+1280<<10+100*4096, 0, 3, 104)

	// Concurrent: two goroutines per stream, sizes that differ.
	const goroutines, iters = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := streams[g%len(streams)]
			var live []gpu.DevicePtr
			var sizes []int
			for i := range iters {
				n := 256 * (1 + (g+i)%7)
				p, err := st.Allocate(n, s)
				if err != nil {
					t.Error(err)
					return
				}
				live, sizes = append(live, p), append(sizes, n)
				if i%3 == 2 {
					for j := range live {
						if err := st.Deallocate(live[j], sizes[j], streams[(g+j)%len(streams)]); err != nil {
							t.Error(err)
						}
					}
					live, sizes = live[:0], sizes[:0]
				}
			}
		}()
	}
	wg.Wait()
	var total uint64
	for g := range goroutines {
		for i := range iters {
			total += uint64(256 * (1 + (g+i)%7))
		}
	}
	got := st.Snapshot()
	if got.Bytes.Current != 0 || got.Allocations.Current != 0 {
		t.Errorf("current after the concurrent run: %+v", got)
	}
	if got.Bytes.Total != 1<<20+1280<<10+100*4096+total || got.Allocations.Total != 104+goroutines*iters {
		t.Errorf("totals after the concurrent run: %+v", got)
	}
	if got.Bytes.Peak < 1280<<10 {
		t.Errorf("peak fell: %+v", got)
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool used %d", u.Used)
	}
}
