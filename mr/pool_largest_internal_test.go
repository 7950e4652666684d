package mr

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// The largest free block an out-of-memory error names is the one the
// layout finds by visiting every block, through allocations and frees on
// several streams, frees on other streams than the allocation's, the
// fast slot's pairs, and Release forgetting streams.
func TestPoolLargestFreeIndex(t *testing.T) {
	dev, err := sim.New(sim.Config{Capacity: 96 << 20}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(NewDirect(dev), PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ss := make([]gpu.Stream, 6)
	for i := range ss {
		if ss[i], err = dev.NewStream(); err != nil {
			t.Fatal(err)
		}
	}
	type held struct {
		ptr  gpu.DevicePtr
		size int
	}
	var live []held
	rng := rand.New(rand.NewPCG(7, 21))
	refusals := 0
	for step := range 4000 {
		s := ss[rng.IntN(len(ss))]
		switch r := rng.IntN(100); {
		case r < 2:
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		case r < 45 && len(live) > 0:
			i := rng.IntN(len(live))
			if err := p.Deallocate(live[i].ptr, live[i].size, s); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			size := 1 << (10 + rng.IntN(14)) // 1 KiB to 8 MiB
			size += rng.IntN(size)
			q, err := p.Allocate(size, s)
			if err == nil {
				live = append(live, held{q, size})
				continue
			}
			var oom *OutOfMemoryError
			if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("step %d: %v", step, err)
			}
			refusals++
			if want := p.Layout().LargestFree; oom.LargestFree != want {
				t.Fatalf("step %d: largest free %d, the layout's %d", step, oom.LargestFree, want)
			}
		}
	}
	if refusals < 50 {
		t.Errorf("only %d refusals: the check hardly ran", refusals)
	}
	t.Logf("%d refusals checked", refusals)
}

// tlsf.largest is the size of the largest filed block, whatever the
// classes of the others.
func TestTLSFLargest(t *testing.T) {
	var x tlsf
	if got := x.largest(); got != 0 {
		t.Errorf("empty: %d", got)
	}
	var blocks []*poolBlock
	for _, size := range []int{512, 33 << 20, 8192, 34<<20 + 512, 1 << 20, 33<<20 + 1024} {
		b := &poolBlock{size: size}
		x.insert(b)
		blocks = append(blocks, b)
	}
	for _, c := range []struct {
		remove int
		want   int
	}{{-1, 34<<20 + 512}, {3, 33<<20 + 1024}, {5, 33 << 20}, {1, 1 << 20}, {4, 8192}, {2, 512}, {0, 0}} {
		if c.remove >= 0 {
			x.remove(blocks[c.remove])
		}
		if got := x.largest(); got != c.want {
			t.Errorf("after removing block %d: largest %d, want %d", c.remove, got, c.want)
		}
	}
}
