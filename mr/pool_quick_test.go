package mr

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// quickPool is a pool over a fake upstream that may hold at most maxSize
// bytes, with one stream.
func quickPool(t *testing.T, opts PoolOptions) (*Pool, *pfUpstream, *pfStream) {
	t.Helper()
	up := newPFUpstream(1 << 40)
	p, err := NewPool(up, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, up, newPFStream(up.d)
}

func mustAlloc(t *testing.T, p *Pool, n int, s gpu.Stream) gpu.DevicePtr {
	t.Helper()
	q, err := p.Allocate(n, s)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", n, err)
	}
	return q
}

func mustFree(t *testing.T, p *Pool, q gpu.DevicePtr, n int, s gpu.Stream) {
	t.Helper()
	if err := p.Deallocate(q, n, s); err != nil {
		t.Fatalf("Deallocate(%#x, %d): %v", q, n, err)
	}
}

func mustCheck(t *testing.T, p *Pool) {
	t.Helper()
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// A block freed on its home is cached whole and handed back to the next
// request it serves, without touching the tlsf; a request it cannot serve
// flushes the cache, so that the tlsf holds all the free memory.
func TestPoolQuickReuse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size, req int // first request, then the next one
		hit       bool
	}{
		{"same size", 4096, 4096, true},
		{"same rounded size", 4000, 4096, true},
		{"smaller small", 8192, 4096, false},
		{"larger small", 4096, 8192, false},
		{"mid same", 1 << 20, 1 << 20, true},
		{"mid smaller", 1 << 20, 1<<20 - 4096, false},
		{"big within slack", 16 << 20, 16<<20 - 1<<20, true},
		{"big beyond slack", 16 << 20, 8 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, s := quickPool(t, PoolOptions{})
			q := mustAlloc(t, p, tc.size, s)
			mustFree(t, p, q, tc.size, s)
			st := p.streams.lookup(s.ID())
			settleFast(st)
			if st.nquick != 1 {
				t.Fatalf("after a free on the home, %d blocks cached, want 1", st.nquick)
			}
			n, bytes := freeCount(st)
			r := mustAlloc(t, p, tc.req, s)
			if st.nquick != 0 {
				t.Errorf("%d blocks cached after the request, want 0", st.nquick)
			}
			freeN, freeBytes := freeCount(st)
			if tc.hit {
				if r != q || freeN != n || freeBytes != bytes {
					t.Errorf("request of %d after freeing %d: got %#x (want %#x), free blocks %d of %d bytes (want %d of %d): not served by the cache",
						tc.req, tc.size, r, q, freeN, freeBytes, n, bytes)
				}
			} else if want := int(p.Usage().Reserved) - alignUp(tc.req); freeBytes != want {
				t.Errorf("request of %d after freeing %d: the tlsf holds %d free bytes, want %d: the cache was not flushed",
					tc.req, tc.size, freeBytes, want)
			}
			mustCheck(t, p)
			mustFree(t, p, r, tc.req, s)
			mustCheck(t, p)
		})
	}
}

// The cache keeps at most poolQuick blocks; older ones are coalesced into
// the tlsf, newest are reused first.
func TestPoolQuickEviction(t *testing.T) {
	p, _, s := quickPool(t, PoolOptions{})
	const n = 4096
	var ps []gpu.DevicePtr
	for range poolQuick + 3 {
		ps = append(ps, mustAlloc(t, p, n, s))
	}
	for _, q := range ps {
		mustFree(t, p, q, n, s)
	}
	mustCheck(t, p)
	st := p.streams.lookup(s.ID())
	if st.nquick != poolQuick {
		t.Fatalf("%d cached, want %d", st.nquick, poolQuick)
	}
	// The three oldest frees coalesced with the rest of the chunk.
	if n, _ := st.small.count(); n != 2 {
		t.Errorf("%d free small blocks, want 2 (before and after the cached run)", n)
	}
	if q := mustAlloc(t, p, n, s); q != ps[len(ps)-1] {
		t.Errorf("reuse gave %#x, want the last freed %#x", q, ps[len(ps)-1])
	}
	mustCheck(t, p)
}

// Cached blocks never make the pool grow, fail, or keep memory: a request
// the cache cannot serve flushes it first, Release gives back a chunk whose
// blocks are only cached, a steal takes such a chunk from another stream.
func TestPoolQuickFlushes(t *testing.T) {
	t.Run("coalesce before growing", func(t *testing.T) {
		// One small chunk is all the pool may hold.
		p, up, s := quickPool(t, PoolOptions{MaxSize: poolSmallChunk})
		const n = 4096
		var ps []gpu.DevicePtr
		for range poolSmallChunk / n {
			ps = append(ps, mustAlloc(t, p, n, s))
		}
		for _, q := range ps {
			mustFree(t, p, q, n, s)
		}
		// The chunk is free but for poolQuick cached 4 KiB blocks; a
		// 256 KiB request is served from it once they coalesce.
		const big = poolSmallMax
		for range poolSmallChunk / big {
			mustAlloc(t, p, big, s)
		}
		if up.allocs != 1 {
			t.Errorf("%d upstream allocations, want 1", up.allocs)
		}
		mustCheck(t, p)
	})
	t.Run("release", func(t *testing.T) {
		p, up, s := quickPool(t, PoolOptions{})
		q := mustAlloc(t, p, 4096, s)
		mustFree(t, p, q, 4096, s)
		if err := p.Release(); err != nil {
			t.Fatal(err)
		}
		if u := p.Usage(); u.Reserved != 0 || up.held != 0 {
			t.Errorf("after Release: reserved %d, upstream holds %d", u.Reserved, up.held)
		}
		if err := p.Deallocate(q, 4096, s); !errors.Is(err, ErrUnknownPointer) {
			t.Errorf("free after release: %v, want %v", err, ErrUnknownPointer)
		}
		mustCheck(t, p)
	})
	t.Run("steal", func(t *testing.T) {
		// S1 fills small chunk A, moves on to chunk B, then frees all of
		// A, the last frees cached. S2 takes A, which is not S1's
		// working chunk, instead of growing.
		p, up, s1 := quickPool(t, PoolOptions{})
		s2 := newPFStream(up.d)
		const n = 4096
		var a []gpu.DevicePtr
		for range poolSmallChunk / n {
			a = append(a, mustAlloc(t, p, n, s1))
		}
		mustAlloc(t, p, n, s1) // chunk B
		for _, q := range a {
			mustFree(t, p, q, n, s1)
		}
		r := mustAlloc(t, p, n, s2)
		inA := r >= a[0] && r < a[0]+poolSmallChunk
		if up.allocs != 2 || !inA {
			t.Errorf("S2 got %#x after %d growths; want one in S1's idle chunk at %#x, and 2 growths", r, up.allocs, a[0])
		}
		mustCheck(t, p)
	})
	t.Run("threshold", func(t *testing.T) {
		// The last free of a chunk goes through the tlsf, so the
		// threshold sees the chunk idle and releases it.
		p, up, s := quickPool(t, PoolOptions{ReleaseThreshold: 1})
		a := mustAlloc(t, p, 4096, s)
		b := mustAlloc(t, p, 8192, s)
		mustFree(t, p, a, 4096, s)
		if up.frees != 0 {
			t.Fatalf("a chunk with a live block released")
		}
		mustFree(t, p, b, 8192, s)
		if up.frees != 1 || up.held != 0 {
			t.Errorf("after the last free: %d upstream frees, %d held; want 1, 0", up.frees, up.held)
		}
		mustCheck(t, p)
	})
}

// A cached block is not live: freeing it again is a double free, on its
// home and on another stream, and changes nothing.
func TestPoolQuickDoubleFree(t *testing.T) {
	p, up, s1 := quickPool(t, PoolOptions{})
	s2 := newPFStream(up.d)
	q := mustAlloc(t, p, 4096, s1)
	mustFree(t, p, q, 4096, s1)
	for _, s := range []*pfStream{s1, s2} {
		if err := p.Deallocate(q, 4096, s); !errors.Is(err, ErrDoubleFree) {
			t.Errorf("second free on stream %d: %v, want %v", s.ID(), err, ErrDoubleFree)
		}
		mustCheck(t, p)
	}
	if r := mustAlloc(t, p, 4096, s1); r != q {
		t.Errorf("reuse after the double frees gave %#x, want %#x", r, q)
	}
}

// settleFast files the block of st's fast slot, if any, in the quick
// cache (pool_fast.go), as every holder of st's mutex does first, so that
// a test can look at the quick cache itself.
func settleFast(st *poolStream) {
	st.lock()
	st.mu.Unlock()
}

// count returns the number of blocks filed in t and their total size,
// walking its lists.
func (t *tlsf) count() (n, bytes int) {
	for _, lv := range t.lv {
		row := lv.row
		if row == nil {
			continue
		}
		for _, b := range row {
			for ; b != nil; b = b.lnext {
				n++
				bytes += b.size
			}
		}
	}
	return n, bytes
}

// freeCount is count over the stream's small and large free blocks.
func freeCount(st *poolStream) (n, bytes int) {
	n, bytes = st.small.count()
	ln, lb := st.large.count()
	return n + ln, bytes + lb
}
