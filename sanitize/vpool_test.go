package sanitize_test

import (
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
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
			k, err := kernels.Load(dev)
			must(t, err)
			streams := make([]gpu.Stream, 3)
			for i := range streams {
				streams[i], err = dev.NewStream()
				must(t, err)
			}
			errs, err := buf.NewVector[uint32](res, 1, streams[0])
			must(t, err)
			must(t, errs.Memset(0))
			type live struct {
				v    *buf.Vector[uint32]
				seed uint32
			}
			var bufs []live
			rng := rand.New(rand.NewPCG(tc.seed, 7))
			pick := func() gpu.Stream { return streams[rng.IntN(len(streams))] }
			for i := range 600 {
				switch op := rng.IntN(10); {
				case op < 5 || len(bufs) == 0: // allocate and fill
					n := 64 << rng.IntN(8) // words: 256 B to 32 KiB
					if rng.IntN(3) == 0 {
						n = (256 << 10) * (1 + rng.IntN(6)) // 1 to 6 MiB
					}
					s := pick()
					v, err := buf.NewVector[uint32](res, n, s)
					must(t, err)
					seed := uint32(i) << 16
					fs := pick()
					must(t, v.Use(fs, buf.Write, func() error { return k.Fill(fs, v.Ptr(), v.Len(), seed) }))
					bufs = append(bufs, live{v, seed})
				case op < 6: // check on some stream
					b := bufs[rng.IntN(len(bufs))]
					s := pick()
					must(t, buf.UseAll(s, []buf.Operand{{Buf: b.v.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
						func() error { return k.Check(s, b.v.Ptr(), b.v.Len(), b.seed, errs.Ptr()) }))
				default: // free on some stream
					j := rng.IntN(len(bufs))
					must(t, bufs[j].v.CloseOn(pick()))
					bufs = append(bufs[:j], bufs[j+1:]...)
				}
			}
			for _, b := range bufs {
				must(t, b.v.CloseOn(pick()))
			}
			out := make([]uint32, 1)
			must(t, errs.CopyToHost(out))
			must(t, dev.Synchronize())
			must(t, errs.Close())
			must(t, dev.Synchronize())
			for i, r := range reps {
				if i < 3 {
					t.Errorf("report: %s", r.Detail())
				}
			}
			if len(reps) > 0 {
				t.Fatalf("%d reports on correct code", len(reps))
			}
			if out[0] != 0 {
				t.Fatalf("%d words corrupted", out[0])
			}
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
