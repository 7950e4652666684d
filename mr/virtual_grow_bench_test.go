package mr_test

// Benchmarks of growth in place (pool_vgrow.go, virtual_grow.go), on the
// device internal/testdev gives (the simulator; the GPU with
// STREAMALLOC_DEVICE=cuda):
//
//	BenchmarkGrowth/upstream=virtual-granule  one Commit of one granule at
//	                                          the end of a growable range:
//	                                          cuMemCreate, cuMemMap,
//	                                          cuMemSetAccess
//	BenchmarkGrowth/upstream=async-2MiB, -8MiB  one Async allocation of a
//	                                          chunk from a driver pool that
//	                                          holds no free memory, so that
//	                                          cuMemAllocAsync grows it
//	BenchmarkPoolPairModes/mode=M/size=S      the pool's pair served from its
//	                                          lists, over Direct (chunked)
//	                                          and over Virtual (growable)
//
// The growths give their memory back every growthBatch operations, off the
// clock (a decommit and a wait for it; a free and a stream
// synchronization, at which a driver pool with no release threshold
// returns its memory).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

const growthBatch = 32

func BenchmarkGrowth(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	b.Run("upstream=virtual-granule", func(b *testing.B) {
		v, err := mr.NewVirtual(dev, mr.VirtualOptions{ReserveSize: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		g := v.GrowGranularity()
		limit := (growthBatch + 1) * g
		p, err := v.AllocateGrowable(g, limit, s)
		if err != nil {
			b.Fatal(err)
		}
		defer v.Deallocate(p, limit, s)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := i % growthBatch
			if err := v.Commit(p, (1+k)*g, g, s); err != nil {
				b.Fatal(err)
			}
			if k == growthBatch-1 || i == b.N-1 {
				b.StopTimer()
				if err := v.Decommit(p, g, (1+k)*g, s); err != nil {
					b.Fatal(err)
				}
				if err := v.ReleaseContext(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
	})
	for _, size := range []int{2 << 20, mr.DefaultPoolChunkSize} {
		b.Run(fmt.Sprintf("upstream=async-%dMiB", size>>20), func(b *testing.B) {
			a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				b.Skipf("no driver pool: %v", err)
			}
			defer a.Close()
			ptrs := make([]gpu.DevicePtr, 0, growthBatch)
			free := func() {
				for _, p := range ptrs {
					if err := a.Deallocate(p, size, s); err != nil {
						b.Fatal(err)
					}
				}
				ptrs = ptrs[:0]
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := a.Allocate(size, s)
				if err != nil {
					b.Fatal(err)
				}
				ptrs = append(ptrs, p)
				if len(ptrs) == growthBatch || i == b.N-1 {
					b.StopTimer()
					free()
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkPoolPairModes: a pair served from the lists of a Pool with
// the default options over Direct (chunked) and over a Virtual that
// refuses commits at mapped addresses (virtual).
func BenchmarkPoolPairModes(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	for _, mode := range []string{"chunked", "virtual"} {
		for _, size := range []int{4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("mode=%s/size=%dKiB", mode, size>>10), func(b *testing.B) {
				var up mr.Resource = mr.NewDirect(dev)
				var v *mr.Virtual
				if mode == "virtual" {
					if v, err = mr.NewVirtual(dev, mr.VirtualOptions{}); err != nil {
						b.Fatal(err)
					}
					up = v
				}
				p, err := mr.NewPool(up, mr.PoolOptions{})
				if err != nil {
					b.Fatal(err)
				}
				// The first pair grows the pool; the measured ones are
				// served from its lists.
				pair(b, p, s, size)
				b.ReportAllocs()
				for b.Loop() {
					pair(b, p, s, size)
				}
				b.StopTimer()
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
				if v != nil {
					if err := v.Close(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCommitLarge times one Commit of n bytes into a growable range
// and, as the metric decommit-ns/op, its Decommit and the unmap that
// follows once the stream is idle (ReleaseContext): with the default
// pieces (pieces=32, DefaultVirtualPiecesPerCommit) and with one granule a
// piece (pieces=granule, PiecesPerCommit at n's granule count), which is
// how Virtual mapped every commit before pieces.
func BenchmarkCommitLarge(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	for _, n := range []int{32 << 20, 1 << 30} {
		for _, mode := range []string{"32", "granule"} {
			b.Run(fmt.Sprintf("size=%dMiB/pieces=%s", n>>20, mode), func(b *testing.B) {
				opts := mr.VirtualOptions{ReserveSize: 64 << 20}
				v0, err := mr.NewVirtual(dev, opts)
				if err != nil {
					b.Fatal(err)
				}
				g := v0.GrowGranularity()
				if err := v0.Close(); err != nil {
					b.Fatal(err)
				}
				if mode == "granule" {
					opts.PiecesPerCommit = n / g
				}
				v, err := mr.NewVirtual(dev, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				limit := n + g
				p, err := v.AllocateGrowable(g, limit, s)
				if err != nil {
					b.Fatal(err)
				}
				defer v.Deallocate(p, limit, s)
				var decommit time.Duration
				b.ResetTimer()
				for range b.N {
					if err := v.Commit(p, g, n, s); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
					t := time.Now()
					if err := v.Decommit(p, g, n, s); err != nil {
						b.Fatal(err)
					}
					if err := v.ReleaseContext(context.Background()); err != nil {
						b.Fatal(err)
					}
					decommit += time.Since(t)
					b.StartTimer()
				}
				b.ReportMetric(float64(decommit.Nanoseconds())/float64(b.N), "decommit-ns/op")
			})
		}
	}
}
