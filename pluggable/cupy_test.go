package pluggable

import (
	"testing"
)

// The memory history of the CuPy workload of scripts/torch-bench.py, as the
// C ABI wrote it on an H100 (log=): arrays of 1, 4, 16, 3 and 9 M floats in
// turn, each step a normal draw, an elementwise expression, an rfft (whose
// plan CuPy caches with a work area of the array's size), a matmul and
// reductions; 5 warm-up steps, then the 20 timed steps, allocations 61 to
// 280 (11 a step once every plan is cached).

// TestCupyChurn pins where the default pool's device calls on the CuPy
// workload come from, and what split_giant (mr.PoolOptions.SplitGiantAtMark)
// makes of them. The default pool grows and gives back about three chunks
// a step, as the H100 counted (59 cuMemAlloc and 57 cuMemFree in the 20
// timed steps, 1.0999 of peak live): each step's arrays are of one scale,
// the largest step's chunks are giant ones, which smaller requests may not
// split, and the release before growth that keeps reserved bytes under
// their high-water mark gives back one scale's idle chunks to grow
// another's. With split_giant a request of a size seen before takes a free
// block of a giant chunk instead, and the pool reserves the same peak.
func TestCupyChurn(t *testing.T) {
	evs := readTorch(t, "testdata/cupy-cycle-h100.csv.gz")
	const steps, peakLive = 20, 440423479
	for _, c := range []struct {
		conf           string
		growths, frees uint64 // in the timed steps
		giantSplits    bool
		peakReserved   uint64
	}{
		{"pool", 59, 57, false, 484442112},
		{"pool,split_giant", 12, 14, true, 484442112},
	} {
		t.Run(c.conf, func(t *testing.T) {
			r := replayTorch(t, evs, c.conf, 61, 280)
			ps := r.steadyPool
			t.Logf("peak reserved / peak live %.4f; timed steps: %d+%d device calls, pool %d growths, %d releases, %d big splits",
				float64(r.st.PeakReserved)/float64(r.st.PeakLive), r.steadyGrowths, r.steadyFrees, ps.Growths, ps.Releases, ps.BigSplits)
			if r.st.PeakLive != peakLive {
				t.Fatalf("peak live %d; the history has %d", r.st.PeakLive, peakLive)
			}
			if r.steadyGrowths != c.growths || r.steadyFrees != c.frees {
				t.Errorf("%d+%d device calls in the timed steps, want %d+%d", r.steadyGrowths, r.steadyFrees, c.growths, c.frees)
			}
			if r.steadyGrowths != ps.Growths || r.steadyFrees != ps.Releases {
				t.Errorf("device calls %d+%d, the pool's growths and releases %d+%d: every device call of a timed step is one of the pool's",
					r.steadyGrowths, r.steadyFrees, ps.Growths, ps.Releases)
			}
			if r.st.PeakReserved != c.peakReserved {
				t.Errorf("peak reserved %d, want %d", r.st.PeakReserved, c.peakReserved)
			}
			if (ps.GiantSplits > 0) != c.giantSplits {
				t.Errorf("%d giant splits at the mark", ps.GiantSplits)
			}
		})
	}
}
