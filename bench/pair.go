// Pair: the latency of one allocation and its free, the fast path of
// every caching resource.

package bench

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Pair benchmarks one Allocate(size, s) and its Deallocate per op. One
// untimed pair first lets a caching resource grow, so the timed pairs
// measure its steady state.
func Pair(b *testing.B, r mr.Resource, s gpu.Stream, size int) {
	b.Helper()
	pair(b, r, s, size) // warm-up
	b.ReportAllocs()
	for b.Loop() {
		pair(b, r, s, size)
	}
}

func pair(b *testing.B, r mr.Resource, s gpu.Stream, size int) {
	p, err := r.Allocate(size, s)
	if err != nil {
		fatalf(b, "pair: allocate %d bytes: %w", size, err)
	}
	if err := r.Deallocate(p, size, s); err != nil {
		fatalf(b, "pair: free %d bytes: %w", size, err)
	}
}
