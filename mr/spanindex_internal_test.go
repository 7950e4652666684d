package mr

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// The span index answers every lookup as a sorted list of its spans would,
// through adds in random order and batched removals; 100,000 adds cost
// O(log n) copies each (a copy-on-write slice took quadratic time) and
// leave at most about log2(n) runs to search.
func TestSpanIndex(t *testing.T) {
	const n = 100_000
	const size = 1 << 12
	var x spanIndex[int]
	r := rand.New(rand.NewPCG(1, 2))
	order := r.Perm(n)
	start := time.Now()
	for _, i := range order {
		x.add(gpu.DevicePtr((i+1)*2*size), size, i) // a gap after each span
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d adds took %v", n, d)
	}
	if runs := len(x.cur.Load().runs); runs > 20 {
		t.Errorf("%d runs after %d adds", runs, n)
	}
	check := func(removed func(int) bool) {
		t.Helper()
		for range 20000 {
			i := r.IntN(n)
			base := gpu.DevicePtr((i + 1) * 2 * size)
			off := gpu.DevicePtr(r.IntN(size))
			v, b, ok := x.find(base + off)
			if want := !removed(i); ok != want || (ok && (v != i || b != base)) {
				t.Fatalf("find(span %d + %d) = %d, %#x, %v; want present %v", i, off, v, uint64(b), ok, want)
			}
			if _, _, ok := x.find(base + size + off); ok {
				t.Fatalf("find in the gap after span %d found a span", i)
			}
		}
	}
	check(func(int) bool { return false })
	gone := make(map[gpu.DevicePtr]bool)
	for i := 0; i < n; i += 3 {
		gone[gpu.DevicePtr((i+1)*2*size)] = true
	}
	x.remove(gone)
	check(func(i int) bool { return i%3 == 0 })
	if x.len() != n-len(gone) || len(x.all()) != x.len() {
		t.Errorf("len %d, all %d, want %d", x.len(), len(x.all()), n-len(gone))
	}
	all := x.all()
	for i := 1; i < len(all); i++ {
		if all[i-1].base >= all[i].base {
			t.Fatalf("all is not sorted at %d", i)
		}
	}
	i := 0
	x.visit(func(e *span[int]) {
		if i >= len(all) || e.base != all[i].base || e.v != all[i].v {
			t.Fatalf("visit's span %d differs from all's", i)
		}
		i++
	})
	if i != len(all) {
		t.Errorf("visit saw %d spans of %d", i, len(all))
	}
}
