package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

// TestResourcesConformance runs the conformance suite against direct,
// managed, async (default and own pool), fixedsize, binning and arena, on
// the device STREAMALLOC_DEVICE selects (the simulator by default).
func TestResourcesConformance(t *testing.T) {
	dev := testdev.Device(t)
	for _, tc := range []struct {
		name string
		make mrtest.Factory
		opts mrtest.Options
	}{
		{"direct", func(tb testing.TB, dev gpu.Device) mr.Resource { return mr.NewDirect(dev) }, mrtest.Options{RefusesCapture: true}},
		{"managed", func(tb testing.TB, dev gpu.Device) mr.Resource { return mr.NewManaged(dev) }, mrtest.Options{RefusesCapture: true}},
		{"async", func(tb testing.TB, dev gpu.Device) mr.Resource {
			r, err := mr.NewAsync(dev, mr.AsyncOptions{})
			if err != nil {
				tb.Fatal(err)
			}
			return r
		}, mrtest.Options{}},
		{"async-own-pool", func(tb testing.TB, dev gpu.Device) mr.Resource {
			r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 62})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				if err := r.Close(); err != nil {
					tb.Error(err)
				}
			})
			return r
		}, mrtest.Options{}},
		{"fixedsize", func(tb testing.TB, dev gpu.Device) mr.Resource {
			r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 1 << 20, BlocksPerChunk: 4})
			if err != nil {
				tb.Fatal(err)
			}
			return r
		}, mrtest.Options{MaxSize: 1 << 20, OOMSize: 1<<20 + 1}},
		{"binning", func(tb testing.TB, dev gpu.Device) mr.Resource {
			up, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { up.Close() })
			r, err := mr.NewBinning(up, mr.BinningOptions{BlocksPerChunk: 8})
			if err != nil {
				tb.Fatal(err)
			}
			return r
		}, mrtest.Options{}},
		{"binning-over-pool", func(tb testing.TB, dev gpu.Device) mr.Resource {
			up, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
			if err != nil {
				tb.Fatal(err)
			}
			r, err := mr.NewBinning(up, mr.BinningOptions{MaxSize: 64 << 10})
			if err != nil {
				tb.Fatal(err)
			}
			// Release the pool too once the binning resource is done.
			return struct {
				mr.Resource
				mr.UsageReporter
				mr.Releaser
			}{r, r, releaseBoth{r, up}}
		}, mrtest.Options{}},
		{"arena", func(tb testing.TB, dev gpu.Device) mr.Resource {
			r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{})
			if err != nil {
				tb.Fatal(err)
			}
			return r
		}, mrtest.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DetectsDoubleFree = true
			tc.opts.Foreign = testdev.Foreign(t)
			mrtest.Run(t, tc.make, dev, tc.opts)
		})
	}
}

// releaseBoth releases a resource, then its upstream.
type releaseBoth struct{ r, up mr.Releaser }

func (b releaseBoth) Release() error {
	if err := b.r.Release(); err != nil {
		return err
	}
	return b.up.Release()
}
