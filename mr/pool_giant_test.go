package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolSplitGiantAtMark runs a loop whose steps alternate between two
// scales (three 64 MiB arrays, then three 16 MiB ones), as the CuPy
// workload does with five. By default the pool gives back a 64 MiB chunk
// to grow each scale's chunks under its high-water mark, every cycle; with
// SplitGiantAtMark, once the 16 MiB size has been seen, it is cut from the
// idle 64 MiB chunks instead, and the steady cycles make no device call,
// for the same peak reserved.
func TestPoolSplitGiantAtMark(t *testing.T) {
	const mib = 1 << 20
	type result struct {
		firstCycleGiant uint64 // giant splits in the first cycle
		steadyGrowths   uint64 // growths and releases of cycles 3-6
		steadyReleases  uint64
		giantSplits     uint64
		peakReserved    uint64
	}
	run := func(opts mr.PoolOptions) result {
		dev := poolSimDevice(t)
		s := poolStream(t, dev)
		p := newPool(t, mr.NewDirect(dev), opts)
		defer p.Release()
		step := func(size, n int) {
			ptrs := make([]gpu.DevicePtr, n)
			for i := range ptrs {
				ptr, err := p.Allocate(size, s)
				if err != nil {
					t.Fatal(err)
				}
				ptrs[i] = ptr
			}
			for _, ptr := range ptrs {
				if err := p.Deallocate(ptr, size, s); err != nil {
					t.Fatal(err)
				}
			}
		}
		var r result
		var before mr.PoolStats
		for cycle := 1; cycle <= 6; cycle++ {
			if cycle == 3 {
				before = p.Stats()
			}
			step(64*mib, 3)
			step(16*mib, 3)
			if cycle == 1 {
				r.firstCycleGiant = p.Stats().GiantSplits
			}
		}
		st := p.Stats()
		r.steadyGrowths, r.steadyReleases = st.Growths-before.Growths, st.Releases-before.Releases
		r.giantSplits = st.GiantSplits
		r.peakReserved = p.Usage().PeakReserved
		return r
	}
	def := run(mr.PoolOptions{SplitBig: true})
	giant := run(mr.PoolOptions{SplitBig: true, SplitGiantAtMark: true})
	t.Logf("default %+v; SplitGiantAtMark %+v", def, giant)
	if def.steadyGrowths == 0 || def.steadyReleases == 0 || def.giantSplits != 0 {
		t.Errorf("default: %d growths, %d releases in cycles 3-6, %d giant splits; want the churn this test is about and no giant split",
			def.steadyGrowths, def.steadyReleases, def.giantSplits)
	}
	if giant.steadyGrowths != 0 || giant.steadyReleases != 0 {
		t.Errorf("SplitGiantAtMark: %d growths, %d releases in cycles 3-6, want none", giant.steadyGrowths, giant.steadyReleases)
	}
	if giant.firstCycleGiant != 0 || giant.giantSplits == 0 {
		t.Errorf("SplitGiantAtMark: %d giant splits in the first cycle (a size not seen before must grow), %d in all", giant.firstCycleGiant, giant.giantSplits)
	}
	if want := uint64(192 * mib); def.peakReserved != want || giant.peakReserved != want {
		t.Errorf("peak reserved %d by default, %d with SplitGiantAtMark; want %d for both", def.peakReserved, giant.peakReserved, want)
	}
}

func TestPoolSplitGiantAtMarkNeedsSplitBig(t *testing.T) {
	dev := poolSimDevice(t)
	_, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{SplitGiantAtMark: true})
	if !errors.Is(err, gpu.ErrInvalidValue) {
		t.Fatalf("NewPool with SplitGiantAtMark and no SplitBig: %v, want ErrInvalidValue", err)
	}
}
