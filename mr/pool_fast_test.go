package mr

import (
	"errors"
	"sync"
	"testing"
	"unsafe"
)

// fastArmed reports whether st's fast slot holds a block, and whether it
// is live.
func fastArmed(st *poolStream) (armed, live bool) {
	v := st.fstate.Load()
	return v != fastEmpty, v&fastTag == fastLive
}

// A repeated pair is served by the fast slot after the first, and counts,
// used bytes and peaks come out as they do through the mutex.
func TestPoolFastPair(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	const n, pairs = 4000, 1000 // more than fastGenMax: the counter folds
	first := mustAlloc(t, p, n, s)
	mustFree(t, p, first, n, s)
	st := p.streams.lookup(s.ID())
	if armed, _ := fastArmed(st); !armed {
		t.Fatal("the slot is empty after a pair")
	}
	for i := range pairs {
		q := mustAlloc(t, p, n, s)
		if q != first {
			t.Fatalf("pair %d got %#x, want the same block %#x", i, q, first)
		}
		if i == pairs/2 {
			if _, live := fastArmed(st); !live {
				t.Fatal("the slot's block is not live while handed out")
			}
			if u := p.Usage(); u.Used != n || u.PeakUsed != n {
				t.Fatalf("Usage while a fast block is live: %+v, want used and peak %d", u, n)
			}
		}
		mustFree(t, p, q, n, s)
	}
	s1 := p.Stats()
	if s1.Allocations != pairs+1 || s1.Frees != pairs+1 || s1.QuickHits != pairs {
		t.Errorf("Stats after %d pairs: %+v", pairs+1, s1)
	}
	if u := p.Usage(); u.Used != 0 || u.PeakUsed != n {
		t.Errorf("Usage after the pairs: %+v", u)
	}
	mustCheck(t, p)
}

// Bad frees of the slot's block get the errors they get without the slot,
// and change nothing.
func TestPoolFastBadFrees(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	other := newPFStream(p.dev.(*pfDevice))
	const n = 8192
	q := mustAlloc(t, p, n, s)
	mustFree(t, p, q, n, s)
	q = mustAlloc(t, p, n, s) // from the slot
	for _, tc := range []struct {
		name string
		free func() error
		want error
	}{
		{"wrong size", func() error { return p.Deallocate(q, n-1, s) }, ErrSizeMismatch},
		{"inside the block", func() error { return p.Deallocate(q+Alignment, n, s) }, ErrUnknownPointer},
		{"free", func() error { return p.Deallocate(q, n, s) }, nil},
		{"double free", func() error { return p.Deallocate(q, n, s) }, ErrDoubleFree},
		{"double free on another stream", func() error { return p.Deallocate(q, n, other) }, ErrDoubleFree},
	} {
		err := tc.free()
		if (tc.want == nil) != (err == nil) || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		mustCheck(t, p)
	}
	if s := p.Stats(); s.Allocations != 2 || s.Frees != 2 {
		t.Errorf("Stats after the bad frees: %+v", s)
	}
}

// A block handed out by the fast slot and freed on another stream becomes
// pending, as any block freed there.
func TestPoolFastForeignFree(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	other := newPFStream(p.dev.(*pfDevice))
	const n = 1 << 20 // fastMaxReq
	q := mustAlloc(t, p, n, s)
	mustFree(t, p, q, n, s)
	q = mustAlloc(t, p, n, s)
	if _, live := fastArmed(p.streams.lookup(s.ID())); !live {
		t.Fatal("not served by the fast slot")
	}
	mustFree(t, p, q, n, other)
	if st := p.Stats(); st.CrossStreamFrees != 1 || st.Frees != 2 {
		t.Errorf("Stats after a cross-stream free: %+v", st)
	}
	mustCheck(t, p)
}

// No slot where a free must decide to give memory back, nor for requests
// above fastMaxReq.
func TestPoolFastNotArmed(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts PoolOptions
		size int
	}{
		{"release threshold", PoolOptions{ReleaseThreshold: 1}, 4096},
		{"above the quantum", PoolOptions{}, fastMaxReq + Alignment},
	} {
		p, _, s := quickPool(t, tc.opts)
		q := mustAlloc(t, p, tc.size, s)
		mustFree(t, p, q, tc.size, s)
		if armed, _ := fastArmed(p.streams.lookup(s.ID())); armed {
			t.Errorf("%s: the slot is armed", tc.name)
		}
		mustCheck(t, p)
	}
}

// Goroutines that share one stream race for its slot while others read
// the pool's counters and release it: every pair is counted once and the
// invariants hold after (go test -race checks the accesses).
func TestPoolFastRace(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	const goroutines, pairs, n = 4, 2000, 4096
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range pairs {
				q, err := p.Allocate(n, s)
				if err != nil {
					t.Error(err)
					return
				}
				if err := p.Deallocate(q, n, s); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if u := p.Usage(); u.Used > goroutines*n {
				t.Errorf("Used %d with at most %d goroutines holding %d bytes", u.Used, goroutines, n)
			}
			p.Stats()
			if err := p.Release(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	if st := p.Stats(); st.Allocations != goroutines*pairs || st.Frees != goroutines*pairs {
		t.Errorf("Stats after %d pairs: %+v", goroutines*pairs, st)
	}
	if u := p.Usage(); u.Used != 0 || u.PeakUsed > goroutines*n {
		t.Errorf("Usage after the pairs: %+v", u)
	}
	mustCheck(t, p)
}

// TestPoolHotLines: what every request on a known stream reads of the
// pool (closed, the stream table's index) lies on one cache line, and
// what it reads and writes of its stream's state on four, each group on
// one line (poolStream's layout), as allocated on the running runtime.
func TestPoolHotLines(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	mustFree(t, p, mustAlloc(t, p, 4096, s), 4096, s)
	st := p.streams.first(s.ID())
	if st == nil {
		t.Fatal("the stream's state is not the table's first")
	}
	line := func(ptr unsafe.Pointer, size uintptr) [2]uintptr {
		a := uintptr(ptr)
		return [2]uintptr{a / 64, (a + size - 1) / 64}
	}
	oneLine := func(what string, fields ...[2]uintptr) {
		t.Helper()
		for _, f := range fields {
			if f[0] != f[1] || f[0] != fields[0][0] {
				t.Errorf("%s: not on one cache line: %v", what, fields)
				return
			}
		}
	}
	oneLine("the pool's closed and stream index",
		line(unsafe.Pointer(&p.closed), unsafe.Sizeof(p.closed)),
		line(unsafe.Pointer(&p.streams.cur), unsafe.Sizeof(p.streams.cur)))
	oneLine("the stream's flags, fast slot and cache count",
		line(unsafe.Pointer(&st.gated), unsafe.Sizeof(st.gated)),
		line(unsafe.Pointer(&st.dirty), unsafe.Sizeof(st.dirty)),
		line(unsafe.Pointer(&st.parked), unsafe.Sizeof(st.parked)),
		line(unsafe.Pointer(&st.lfStale), unsafe.Sizeof(st.lfStale)),
		line(unsafe.Pointer(&st.packHoles), unsafe.Sizeof(st.packHoles)),
		line(unsafe.Pointer(&st.fowner), unsafe.Sizeof(st.fowner)),
		line(unsafe.Pointer(&st.fstate), unsafe.Sizeof(st.fstate)),
		line(unsafe.Pointer(&st.fptr), unsafe.Sizeof(st.fptr)),
		line(unsafe.Pointer(&st.pool), unsafe.Sizeof(st.pool)),
		line(unsafe.Pointer(&st.nquick), unsafe.Sizeof(st.nquick)))
	oneLine("the stream's counters",
		line(unsafe.Pointer(&st.last), unsafe.Sizeof(st.last)),
		line(unsafe.Pointer(&st.used), unsafe.Sizeof(st.used)),
		line(unsafe.Pointer(&st.unflushed), unsafe.Sizeof(st.unflushed)),
		line(unsafe.Pointer(&st.freedPos), unsafe.Sizeof(st.freedPos)),
		line(unsafe.Pointer(&st.stats), unsafe.Sizeof(st.stats)))
	oneLine("the stream's quick cache", line(unsafe.Pointer(&st.quick), unsafe.Sizeof(st.quick)))
	oneLine("the stream's live map and spare descriptors",
		line(unsafe.Pointer(&st.live), unsafe.Sizeof(st.live)),
		line(unsafe.Pointer(&st.spare), unsafe.Sizeof(st.spare)))
	oneLine("the stream's lifetimes and working chunks",
		line(unsafe.Pointer(&st.life), unsafe.Sizeof(st.life)),
		line(unsafe.Pointer(&st.working), unsafe.Sizeof(st.working)))
}

// TestTlsfLevelLines: each first level of a stream's tlsf indexes, its
// bitmap and its row of heads, lies on one cache line, so that a search
// of a class reads one line of the index (pool_tlsf.go).
func TestTlsfLevelLines(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	mustFree(t, p, mustAlloc(t, p, 4096, s), 4096, s)
	st := p.streams.first(s.ID())
	if st == nil {
		t.Fatal("the stream's state is not the table's first")
	}
	for name, x := range map[string]*tlsf{"small": &st.small, "large": &st.large, "largeShort": &st.largeShort} {
		for fl := range x.lv {
			a := uintptr(unsafe.Pointer(&x.lv[fl]))
			if a/64 != (a+unsafe.Sizeof(x.lv[fl])-1)/64 {
				t.Errorf("%s: level %d at %#x spans two cache lines", name, fl, a)
			}
		}
	}
}
