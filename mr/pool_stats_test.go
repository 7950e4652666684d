package mr

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// The counters follow one pool through a pair, a quick-cache hit, a chunk
// freed on another stream and absorbed with one wait, a steal and a
// release. One small chunk is all the pool may hold.
func TestPoolStats(t *testing.T) {
	p, up, s1 := quickPool(t, PoolOptions{MaxSize: poolSmallChunk})
	s2, s3 := newPFStream(up.d), newPFStream(up.d)
	const n = 4096
	const c = poolSmallChunk / n // blocks in the chunk
	check := func(when string, want PoolStats) {
		t.Helper()
		if got := p.Stats(); got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", when, got, want)
		}
	}
	check("new", PoolStats{})

	q := mustAlloc(t, p, n, s1)
	mustFree(t, p, q, n, s1)
	q = mustAlloc(t, p, n, s1) // the block just freed, from the quick cache
	check("two pairs", PoolStats{Allocations: 2, QuickHits: 1, Frees: 1, Growths: 1, Chunks: 1})
	mustFree(t, p, q, n, s1)
	// Refused frees count nothing.
	for _, s := range []*pfStream{s1, s2} {
		if err := p.Deallocate(q, n, s); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("double free on stream %d: %v", s.ID(), err)
		}
	}
	check("pairs and refused frees", PoolStats{Allocations: 2, QuickHits: 1, Frees: 2, Growths: 1, Chunks: 1})

	// Fill the chunk on s1 (the first block from the cache), free it all
	// on s2, fill it again on s1: one wait covers all c blocks.
	fill := func(s gpu.Stream) []gpu.DevicePtr {
		var ps []gpu.DevicePtr
		for range c {
			ps = append(ps, mustAlloc(t, p, n, s))
		}
		return ps
	}
	for _, q := range fill(s1) {
		mustFree(t, p, q, n, s2)
	}
	ps := fill(s1)
	check("refilled after cross-stream frees", PoolStats{Allocations: 2 + 2*c, QuickHits: 2, Frees: 2 + c,
		CrossStreamFrees: c, Waits: 1, Growths: 1, Chunks: 1})

	// Freed on s1, the chunk is idle; s3, refused a growth by MaxSize,
	// steals it, with one wait on s1.
	for _, q := range ps {
		mustFree(t, p, q, n, s1)
	}
	q = mustAlloc(t, p, n, s3)
	check("stolen", PoolStats{Allocations: 3 + 2*c, QuickHits: 2, Frees: 2 + 2*c,
		CrossStreamFrees: c, Waits: 2, Steals: 1, Growths: 1, Chunks: 1})

	// Freed on its home and released: no wait, the pool holds nothing.
	mustFree(t, p, q, n, s3)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	check("released", PoolStats{Allocations: 3 + 2*c, QuickHits: 2, Frees: 3 + 2*c,
		CrossStreamFrees: c, Waits: 2, Steals: 1, Growths: 1, Releases: 1})
	if up.allocs != 1 || up.frees != 1 || up.d.waits != 2 {
		t.Errorf("upstream %d allocations, %d frees, device %d waits; want 1, 1, 2", up.allocs, up.frees, up.d.waits)
	}
	mustCheck(t, p)
}
