package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

// TestAdaptorsConformance runs the resource conformance suite on every
// adaptor wrapped around a pool over direct device memory (the pool caches,
// so the suite's final Release goes through the adaptor to it), and on all
// the adaptors stacked over a pool over the async resource.
func TestAdaptorsConformance(t *testing.T) {
	dev := testdev.Device(t)
	// Seven runs of the suite: fewer goroutines and iterations than a
	// resource's own run, to keep the package fast under -race.
	opts := mrtest.Options{DetectsDoubleFree: true, Foreign: testdev.Foreign(t), Goroutines: 4, Iterations: 60}
	if testing.Short() {
		opts.Goroutines, opts.Iterations = 2, 20
	}
	for _, ac := range adaptorCases() {
		t.Run(ac.name, func(t *testing.T) {
			mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
				p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
				if err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(func() { p.Close() })
				return ac.wrap(tb, p)
			}, dev, opts)
		})
	}
	t.Run("stack-over-pool-over-async", func(t *testing.T) {
		mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
			a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				tb.Fatal(err)
			}
			p, err := mr.NewPool(a, mr.PoolOptions{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				p.Close()
				a.Close()
			})
			var r mr.Resource = p
			for _, ac := range adaptorCases() {
				r = ac.wrap(tb, r)
			}
			return r
		}, dev, opts)
	})
}
