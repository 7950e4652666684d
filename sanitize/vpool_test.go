package sanitize_test

import (
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// TestPoolOverVirtualClean runs a random three-stream workload of tracked
// buffers, small ones and ones of up to 6 MiB, over a Pool on a Virtual
// that waits for decommits, built on an instrumented device: the pool's
// reuse of memory across streams (cross-stream frees, small blocks
// borrowed from other streams' chunks, granules decommitted on one stream
// and committed on another, and with SmallAtPeak small requests placed in
// the free room of growable chunks at the high-water mark) must give no
// report, and the data must check out. Each case asserts that its
// workload reached the paths it is there for.
func TestPoolOverVirtualClean(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mr.PoolOptions
		seed uint64
	}{
		{"default", mr.PoolOptions{}, 9},
		{"SmallAtPeak", mr.PoolOptions{SmallAtPeak: true}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reps []*sanitize.Report
			z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reps = append(reps, r) }})
			dev := z.Device(testdev.Device(t))
			v, err := mr.NewVirtual(dev, mr.VirtualOptions{WaitForDecommits: true})
			must(t, err)
			pool, err := mr.NewPool(v, tc.opts)
			must(t, err)
			res := z.Resource(pool)
			streams := make([]gpu.Stream, 3)
			for i := range streams {
				streams[i], err = dev.NewStream()
				must(t, err)
			}
			w := workload{steps: 600, allocBelow: 5, checkBelow: 6, size: func(rng *rand.Rand) int {
				n := 64 << rng.IntN(8) // words: 256 B to 32 KiB
				if rng.IntN(3) == 0 {
					n = (256 << 10) * (1 + rng.IntN(6)) // 1 to 6 MiB
				}
				return n
			}}
			failOnReports(t, reps, w.run(t, dev, res, streams, rand.New(rand.NewPCG(tc.seed, 7))))
			st := pool.Stats()
			if st.CrossStreamFrees == 0 || st.BorrowedSmall == 0 || st.Decommits == 0 || (tc.opts.SmallAtPeak && st.SmallAtPeak == 0) {
				t.Fatalf("the workload missed a path: %d cross-stream frees, %d borrowed, %d decommits, %d small at a peak",
					st.CrossStreamFrees, st.BorrowedSmall, st.Decommits, st.SmallAtPeak)
			}
			must(t, pool.Close())
			must(t, v.Close())
			for _, s := range streams {
				must(t, s.Destroy())
			}
		})
	}
}
