package sanitize_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// TestResourcesClean runs a random multi-stream workload of tracked
// buffers over each of streamalloc's resources, built on an instrumented
// device so that their own event orderings are seen. Correct resources
// and correct (tracked) code must give no report at all, and the data
// must check out: this is the sanitizer's false-positive test, and a
// check of the resources' reuse ordering.
func TestResourcesClean(t *testing.T) {
	type mk func(dev gpu.Device) (mr.Resource, func() error, error)
	async := func(dev gpu.Device) (*mr.Async, error) {
		return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	}
	over := func(wrap func(up mr.Resource) (mr.Resource, error)) mk {
		return func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := async(dev)
			if err != nil {
				return nil, nil, err
			}
			r, err := wrap(a)
			if err != nil {
				return nil, nil, err
			}
			return r, func() error {
				if c, ok := r.(interface{ Close() error }); ok {
					if err := c.Close(); err != nil {
						return err
					}
				}
				return a.Close()
			}, nil
		}
	}
	resources := []struct {
		name string
		// driverReuse: the sanitizer wraps the driver's pool itself,
		// which orders cross-stream reuse internally.
		driverReuse bool
		mk          mk
	}{
		{"async", true, func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := async(dev)
			if err != nil {
				return nil, nil, err
			}
			return a, a.Close, nil
		}},
		{"direct", false, func(dev gpu.Device) (mr.Resource, func() error, error) {
			return mr.NewDirect(dev), func() error { return nil }, nil
		}},
		{"pool", false, over(func(up mr.Resource) (mr.Resource, error) {
			return mr.NewPool(up, mr.PoolOptions{})
		})},
		{"fixedsize", false, over(func(up mr.Resource) (mr.Resource, error) {
			return mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: 64 << 10, BlocksPerChunk: 8})
		})},
		{"binning", false, over(func(up mr.Resource) (mr.Resource, error) {
			return mr.NewBinning(up, mr.BinningOptions{MinSize: 256, MaxSize: 64 << 10, BlocksPerChunk: 8})
		})},
		{"arena", false, over(func(up mr.Resource) (mr.Resource, error) {
			return mr.NewArena(up, mr.ArenaOptions{SuperblockSize: 1 << 20})
		})},
	}
	steps := 300
	if testing.Short() {
		steps = 100
	}
	for _, rc := range resources {
		t.Run(rc.name, func(t *testing.T) {
			var reps []*sanitize.Report
			z := sanitize.New(sanitize.Options{
				OnReport:            func(r *sanitize.Report) { reps = append(reps, r) },
				UpstreamOrdersReuse: rc.driverReuse,
			})
			dev := z.Device(testdev.Device(t))
			up, closeUp, err := rc.mk(dev)
			must(t, err)
			res := z.Resource(up)
			streams := make([]gpu.Stream, 4)
			for i := range streams {
				streams[i], err = dev.NewStream()
				must(t, err)
			}
			w := workload{steps: steps, allocBelow: 4, checkBelow: 7, size: func(rng *rand.Rand) int { return 64 << rng.IntN(8) }}
			failOnReports(t, reps, w.run(t, dev, res, streams, rand.New(rand.NewPCG(uint64(len(rc.name)), 2))))
			// Resources give cached memory back on the streams they
			// saw, so those outlive them.
			must(t, closeUp())
			must(t, dev.Synchronize())
			for _, s := range streams {
				must(t, s.Destroy())
			}
		})
	}
}

// TestConcurrentClean: goroutines on their own streams share a sanitized
// pool and pass buffers to each other; tracked code gives no report, and
// the sanitizer's own state is race-free.
func TestConcurrentClean(t *testing.T) {
	var mu sync.Mutex
	var reps []*sanitize.Report
	z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) {
		mu.Lock()
		reps = append(reps, r)
		mu.Unlock()
	}})
	dev := z.Device(testdev.Device(t))
	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	must(t, err)
	pool, err := mr.NewPool(a, mr.PoolOptions{})
	must(t, err)
	res := z.Resource(pool)
	k, err := kernels.Load(dev)
	must(t, err)
	const workers = 4
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	handoff := make(chan *buf.Vector[uint32], workers)
	var wg sync.WaitGroup
	streams := make([]gpu.Stream, workers)
	for w := range workers {
		streams[w], err = dev.NewStream()
		must(t, err)
	}
	for w := range workers {
		s := streams[w]
		wg.Go(func() {
			for i := range rounds {
				v, err := buf.NewVector[uint32](res, 256<<(i%4), s)
				if err != nil {
					t.Error(err)
					return
				}
				if err := v.Use(s, buf.Write, func() error { return k.Fill(s, v.Ptr(), v.Len(), uint32(i)) }); err != nil {
					t.Error(err)
					return
				}
				// Pass it on; close one received from another worker.
				select {
				case handoff <- v:
				default:
					if err := v.CloseOn(s); err != nil {
						t.Error(err)
					}
				}
				select {
				case u := <-handoff:
					if err := u.Use(s, buf.Read, func() error { return nil }); err != nil {
						t.Error(err)
					}
					if err := u.CloseOn(s); err != nil {
						t.Error(err)
					}
				default:
				}
			}
		})
	}
	wg.Wait()
	close(handoff)
	for u := range handoff {
		must(t, u.Close())
	}
	must(t, dev.Synchronize())
	must(t, pool.Close())
	must(t, a.Close())
	for _, s := range streams {
		must(t, s.Destroy())
	}
	if len(reps) > 0 {
		t.Fatalf("%d reports on correct concurrent code; first: %s", len(reps), reps[0].Detail())
	}
}
