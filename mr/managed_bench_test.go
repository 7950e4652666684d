package mr_test

// A kernel over managed memory with and without a prefetch, on
// internal/testdev's device (the GPU with STREAMALLOC_DEVICE=cuda):
//
//	BenchmarkManagedKernel/prefetch=P/size=S  each op first moves S bytes
//	    of mr.Managed memory to the host (Prefetch, synchronized, not
//	    timed by the events), then times with events on the stream: with
//	    P=yes a Prefetch to the device and the fill kernel, with P=no the
//	    fill kernel alone, which migrates the pages by page faults. The
//	    gpu-ms/op metric is the events' time; ns/op includes the move to
//	    the host.
//
// The sizes stay far below the card's memory: managed memory is
// oversubscribed silently, and touching more than the card holds can hang
// it.

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func BenchmarkManagedKernel(b *testing.B) {
	dev := testdev.Device(b)
	s := testdev.Must(dev.NewStream())(b)
	defer s.Destroy()
	k := testdev.Must(kernels.Load(dev))(b)
	start := testdev.Must(dev.NewEvent(true))(b)
	defer start.Destroy()
	end := testdev.Must(dev.NewEvent(true))(b)
	defer end.Destroy()
	m := mr.NewManaged(dev)
	here := gpu.DeviceLocation(dev.Ordinal())
	for _, size := range []int{64 << 20, 1 << 30} {
		p := testdev.Must(m.Allocate(size, s))(b)
		for _, prefetch := range []bool{false, true} {
			name := "no"
			if prefetch {
				name = "yes"
			}
			b.Run(fmt.Sprintf("prefetch=%s/size=%s", name, mr.FormatBytes(uint64(size))), func(b *testing.B) {
				var gpuTime time.Duration
				for b.Loop() {
					if err := m.Prefetch(p, size, gpu.HostLocation(), s); err != nil {
						b.Fatal(err)
					}
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
					if err := start.Record(s); err != nil {
						b.Fatal(err)
					}
					if prefetch {
						if err := m.Prefetch(p, size, here, s); err != nil {
							b.Fatal(err)
						}
					}
					if err := k.Fill(s, p, size/4, 1); err != nil {
						b.Fatal(err)
					}
					if err := end.Record(s); err != nil {
						b.Fatal(err)
					}
					if err := end.Synchronize(); err != nil {
						b.Fatal(err)
					}
					d, err := end.ElapsedSince(start)
					if err != nil {
						b.Fatal(err)
					}
					gpuTime += d
				}
				b.ReportMetric(float64(gpuTime.Microseconds())/1e3/float64(b.N), "gpu-ms/op")
				b.ReportMetric(float64(size)/1e6/(gpuTime.Seconds()/float64(b.N)), "gpu-MB/s")
			})
		}
		if err := m.Deallocate(p, size, s); err != nil {
			b.Fatal(err)
		}
	}
}
