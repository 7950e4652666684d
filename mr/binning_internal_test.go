package mr

import (
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestBinningSearch compares the bin search with a linear scan for random
// sets of bins, power-of-two and not.
func TestBinningSearch(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	up := NewDirect(dev)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		opts := BinningOptions{MinSize: 1 << rng.IntN(12), MaxSize: 1 << rng.IntN(22)}
		for range rng.IntN(5) {
			opts.Bins = append(opts.Bins, Bin{Size: 1 + rng.IntN(3<<20), Resource: up})
		}
		r, err := NewBinning(up, opts)
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			n := 1 + rng.IntN(8<<20)
			var want *binEntry
			for i := range r.bins {
				if r.bins[i].size >= n {
					want = &r.bins[i]
					break
				}
			}
			if got := r.bin(n); got != want {
				t.Fatalf("bins %v: bin(%d) = %v, want %v", r.BinSizes(), n, got, want)
			}
		}
	}
}
