package sanitize

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// model is the reference for index: a plain list of disjoint regions.
type model []*region

func (m model) floor(p gpu.DevicePtr) *region {
	var best *region
	for _, r := range m {
		if r.base <= p && (best == nil || r.base > best.base) {
			best = r
		}
	}
	return best
}

func (m model) overlapping(p gpu.DevicePtr, n int) []*region {
	var out []*region
	if n <= 0 {
		return nil
	}
	for _, r := range m {
		if r.base < p+gpu.DevicePtr(n) && p < r.base+gpu.DevicePtr(r.size) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *region) int { return int(a.base) - int(b.base) })
	return out
}

// FuzzIndex runs random sequences of inserts, removals and queries
// against the index and the model.
func FuzzIndex(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Add(uint64(7), uint16(1000))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var x index
		var m model
		for range int(steps) {
			switch rng.IntN(4) {
			case 0, 1: // insert a region in a free gap
				base := gpu.DevicePtr(rng.IntN(1<<12)) * 16
				size := 1 + rng.IntN(64)
				if len(m.overlapping(base, size)) > 0 {
					continue
				}
				r := &region{base: base, size: size}
				x.insert(r)
				m = append(m, r)
			case 2: // remove one
				if len(m) == 0 {
					continue
				}
				i := rng.IntN(len(m))
				x.remove(m[i])
				m = slices.Delete(m, i, i+1)
			case 3: // query
				p := gpu.DevicePtr(rng.IntN(1 << 16))
				n := rng.IntN(200)
				if got, want := x.floor(p), m.floor(p); got != want {
					t.Fatalf("floor(%d) = %v, want %v", p, got, want)
				}
				got := x.overlapping(p, n, nil)
				want := m.overlapping(p, n)
				if !slices.Equal(got, want) {
					t.Fatalf("overlapping(%d, %d) = %d regions, want %d", p, n, len(got), len(want))
				}
				c := x.containing(p)
				var wc *region
				if o := m.overlapping(p, 1); len(o) == 1 {
					wc = o[0]
				}
				if c != wc {
					t.Fatalf("containing(%d) = %v, want %v", p, c, wc)
				}
			}
			if x.n != len(m) {
				t.Fatalf("index holds %d, model %d", x.n, len(m))
			}
		}
	})
}
