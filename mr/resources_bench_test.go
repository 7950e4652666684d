package mr_test

// Benchmarks of every resource, in shapes that compare side by side:
//
//	BenchmarkPair/resource=R/size=S        one Allocate+Deallocate on one stream
//	BenchmarkStreams/resource=R/goroutines=N  N goroutines, each on its own
//	                                        stream, doing 4 KiB pairs; reports
//	                                        the total pairs/s
//	BenchmarkRandom/resource=R             RMM-style random allocations: up
//	                                        to 512 live blocks of 1 KiB to 4 MiB,
//	                                        random allocate or free per op
//
// benchResources lists the resources, the pool included, so every
// resource appears under the same benchmark names; add variants there
// rather than defining these benchmarks again.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

type benchResource struct {
	name string
	// make builds the resource over dev; maxBlock is the largest request
	// the benchmark will make of it.
	make func(b *testing.B, dev gpu.Device, maxBlock int) mr.Resource
}

func benchAsyncUpstream(b *testing.B, dev gpu.Device) *mr.Async {
	up, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 62})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { up.Close() })
	return up
}

func benchResources() []benchResource {
	return []benchResource{
		{"direct", func(b *testing.B, dev gpu.Device, _ int) mr.Resource { return mr.NewDirect(dev) }},
		{"managed", func(b *testing.B, dev gpu.Device, _ int) mr.Resource { return mr.NewManaged(dev) }},
		{"async", func(b *testing.B, dev gpu.Device, _ int) mr.Resource { return benchAsyncUpstream(b, dev) }},
		{"pool", func(b *testing.B, dev gpu.Device, _ int) mr.Resource {
			return resMust(mr.NewPool(benchAsyncUpstream(b, dev), mr.PoolOptions{}))
		}},
		{"fixedsize", func(b *testing.B, dev gpu.Device, maxBlock int) mr.Resource {
			return resMust(mr.NewFixedSize(benchAsyncUpstream(b, dev), mr.FixedSizeOptions{BlockSize: maxBlock, BlocksPerChunk: 16}))
		}},
		{"binning", func(b *testing.B, dev gpu.Device, _ int) mr.Resource {
			return resMust(mr.NewBinning(benchAsyncUpstream(b, dev), mr.BinningOptions{}))
		}},
		{"arena", func(b *testing.B, dev gpu.Device, _ int) mr.Resource {
			return resMust(mr.NewArena(benchAsyncUpstream(b, dev), mr.ArenaOptions{}))
		}},
	}
}

// benchDevice is the device benchmarks run on.
func benchDevice(b *testing.B) gpu.Device {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		b.Fatal(err)
	}
	return dev
}

func benchStream(b *testing.B, dev gpu.Device) gpu.Stream {
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func BenchmarkPair(b *testing.B) {
	sizes := []int{256, 4 << 10, 64 << 10, 1 << 20}
	for _, br := range benchResources() {
		for _, size := range sizes {
			b.Run(fmt.Sprintf("resource=%s/size=%s", br.name, sizeName(size)), func(b *testing.B) {
				dev := benchDevice(b)
				s := benchStream(b, dev)
				r := br.make(b, dev, sizes[len(sizes)-1])
				// Warm up: the first pair may grow the resource.
				p, err := r.Allocate(size, s)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Deallocate(p, size, s); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					p, err := r.Allocate(size, s)
					if err != nil {
						b.Fatal(err)
					}
					if err := r.Deallocate(p, size, s); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkStreams(b *testing.B) {
	const size = 4 << 10
	const perRound = 256 // pairs per goroutine per b.Loop iteration
	for _, br := range benchResources() {
		for _, g := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("resource=%s/goroutines=%d", br.name, g), func(b *testing.B) {
				dev := benchDevice(b)
				r := br.make(b, dev, size)
				streams := make([]gpu.Stream, g)
				for i := range streams {
					streams[i] = benchStream(b, dev)
					p, err := r.Allocate(size, streams[i])
					if err != nil {
						b.Fatal(err)
					}
					if err := r.Deallocate(p, size, streams[i]); err != nil {
						b.Fatal(err)
					}
				}
				pairs := 0
				b.ReportAllocs()
				for b.Loop() {
					var wg sync.WaitGroup
					for _, s := range streams {
						wg.Go(func() {
							for range perRound {
								p, err := r.Allocate(size, s)
								if err != nil {
									b.Error(err)
									return
								}
								if err := r.Deallocate(p, size, s); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					pairs += perRound * g
				}
				b.ReportMetric(float64(pairs)/b.Elapsed().Seconds(), "pairs/s")
			})
		}
	}
}

func BenchmarkRandom(b *testing.B) {
	const (
		maxLive = 512
		minSize = 1 << 10
		maxSize = 4 << 20
	)
	for _, br := range benchResources() {
		b.Run("resource="+br.name, func(b *testing.B) {
			dev := benchDevice(b)
			s := benchStream(b, dev)
			r := br.make(b, dev, maxSize)
			rng := rand.New(rand.NewPCG(1, 2))
			type alloc struct {
				p gpu.DevicePtr
				n int
			}
			live := make([]alloc, 0, maxLive)
			free := func() {
				i := rng.IntN(len(live))
				if err := r.Deallocate(live[i].p, live[i].n, s); err != nil {
					b.Fatal(err)
				}
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
			b.ReportAllocs()
			for b.Loop() {
				if len(live) == maxLive || (len(live) > 0 && rng.IntN(2) == 0) {
					free()
					continue
				}
				n := minSize + rng.IntN(maxSize-minSize+1)
				p, err := r.Allocate(n, s)
				if errors.Is(err, mr.ErrOutOfMemory) && len(live) > 0 {
					free()
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				live = append(live, alloc{p, n})
			}
			for len(live) > 0 {
				free()
			}
		})
	}
}
