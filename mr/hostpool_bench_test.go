package mr_test

// Benchmarks of HostPool against the driver's page-locked memory, on
// internal/testdev's device (the GPU with STREAMALLOC_DEVICE=cuda):
//
//	BenchmarkHostPair/alloc=A/size=S  one allocation and free of S bytes of
//	                                  page-locked memory: A=pool is HostPool's
//	                                  AllocateHost+FreeHost on a stream,
//	                                  A=pool-stats the same through a Stats
//	                                  adaptor, A=driver
//	                                  cuMemAllocHost+cuMemFreeHost,
//	                                  A=pool-ordered HostPool's AllocateOrdered+Deallocate,
//	                                  A=driverpool DriverHostPool's Allocate+Free
//	                                  (the driver's host-located pool, memory kept),
//	                                  A=driverpool-sync the same with the stream
//	                                  synchronized before the free, as a host
//	                                  that writes the memory must
//	BenchmarkHtoD/src=K/size=S        one host-to-device copy of S bytes and
//	                                  a stream synchronization, from a pooled
//	                                  page-locked buffer (K=pinned) or from
//	                                  ordinary Go memory (K=pageable); MB/s

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func BenchmarkHostPair(b *testing.B) {
	dev := testdev.Device(b)
	s := testdev.Must(dev.NewStream())(b)
	defer s.Destroy()
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("alloc=pool/size=%s", mr.FormatBytes(uint64(size))), func(b *testing.B) {
			p := mr.NewHostPool(dev)
			defer p.ReleaseContext(context.Background())
			for b.Loop() {
				buf, err := mr.AllocateHost[byte](p, size, s)
				if err != nil {
					b.Fatal(err)
				}
				if err := mr.FreeHost(p, buf, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Stats().Misses), "mallochost")
		})
		b.Run(fmt.Sprintf("alloc=pool-stats/size=%s", mr.FormatBytes(uint64(size))), func(b *testing.B) {
			p := mr.NewHostPool(dev)
			defer p.ReleaseContext(context.Background())
			r := mr.NewStats(p, mr.StatsOptions{})
			for b.Loop() {
				buf, err := mr.AllocateHost[byte](r, size, s)
				if err != nil {
					b.Fatal(err)
				}
				if err := mr.FreeHost(r, buf, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Stats().Misses), "mallochost")
		})
		b.Run(fmt.Sprintf("alloc=pool-ordered/size=%s", mr.FormatBytes(uint64(size))), func(b *testing.B) {
			p := mr.NewHostPool(dev)
			defer p.ReleaseContext(context.Background())
			for b.Loop() {
				ptr, err := p.AllocateOrdered(size, s)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Deallocate(ptr, size, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Stats().Misses), "mallochost")
		})
		for _, sync := range []bool{false, true} {
			name := "driverpool"
			if sync {
				name = "driverpool-sync"
			}
			b.Run(fmt.Sprintf("alloc=%s/size=%s", name, mr.FormatBytes(uint64(size))), func(b *testing.B) {
				p, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{ReleaseThreshold: math.MaxUint64})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				for b.Loop() {
					buf, err := mr.AllocateHost[byte](p, size, s)
					if err != nil {
						b.Fatal(err)
					}
					if sync {
						if err := s.Synchronize(); err != nil {
							b.Fatal(err)
						}
					}
					if err := mr.FreeHost(p, buf, s); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(p.Usage().PeakReserved), "reserved-bytes")
			})
		}
		b.Run(fmt.Sprintf("alloc=driver/size=%s", mr.FormatBytes(uint64(size))), func(b *testing.B) {
			for b.Loop() {
				buf, err := dev.MallocHost(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := dev.FreeHost(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkHtoD(b *testing.B) {
	dev := testdev.Device(b)
	s := testdev.Must(dev.NewStream())(b)
	defer s.Destroy()
	p := mr.NewHostPool(dev)
	defer p.ReleaseContext(context.Background())
	for _, size := range []int{1 << 20, 64 << 20} {
		d := testdev.Must(dev.Malloc(size))(b)
		pinned := testdev.Must(mr.AllocateHost[byte](p, size, s))(b)
		for _, src := range []struct {
			name string
			buf  []byte
		}{{"pinned", pinned}, {"pageable", make([]byte, size)}} {
			b.Run(fmt.Sprintf("src=%s/size=%s", src.name, mr.FormatBytes(uint64(size))), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := dev.CopyHtoDAsync(d, src.buf, s); err != nil {
						b.Fatal(err)
					}
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if err := mr.FreeHost(p, pinned, s); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
		if err := dev.Free(d); err != nil {
			b.Fatal(err)
		}
	}
}
