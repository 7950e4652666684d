package mr_test

// BenchmarkChunkUpstream times what a chunked Pool pays its upstream for
// one chunk of a large size (a growth and the chunk given back), on the
// device internal/testdev gives (the simulator; the GPU with
// STREAMALLOC_DEVICE=cuda), with the device idle and with work queued on
// the stream:
//
//	upstream=direct  Direct: cuMemAlloc, then cuMemFree, which waits for
//	                 the device's work before it returns
//	upstream=vmm     Virtual's plain Allocate (cuMemCreate of the whole
//	                 chunk, cuMemMap, cuMemSetAccess), then Deallocate (an
//	                 event recorded; no wait), and the reap that unmaps
//	                 the chunk once the work before the free is done
//
// Metrics per operation: alloc-ns (the allocation's host time), free-ns
// (the free's), reap-ns (Virtual's Release after the stream is idle, which
// unmaps: cuMemUnmap and the release of the physical memory; 0 for
// Direct), and queued-ns (the host's time to enqueue the work, off the
// clock). The queued work is memsets on the GPU; on the simulator the
// stream is held (sim.Device.Hold) for chunkWork, a stream that runs no
// work at all until then.

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// chunkWorkBytes and chunkWorkSets size the queued work on a GPU: memsets
// of a 256 MiB buffer, 40 of them (10 GiB written, a few milliseconds on
// an H100); chunkWork is how long the simulator's stream is held instead.
const (
	chunkWorkBytes = 256 << 20
	chunkWorkSets  = 40
	chunkWork      = 10 * time.Millisecond
)

func BenchmarkChunkUpstream(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	direct := mr.NewDirect(dev)
	scratch, err := direct.Allocate(chunkWorkBytes, s)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Deallocate(scratch, chunkWorkBytes, s)
	simDev, onSim := dev.(*sim.Device)
	// queue enqueues work on s that keeps it busy for about chunkWork.
	queue := func(b *testing.B) {
		if onSim {
			time.AfterFunc(chunkWork, simDev.Hold(s))
			return
		}
		for range chunkWorkSets {
			if err := dev.MemsetD8Async(scratch, 0x5A, chunkWorkBytes, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, up := range []string{"direct", "vmm"} {
		for _, size := range []int{64 << 20, 256 << 20, 1 << 30, 1536 << 20} {
			for _, busy := range []bool{false, true} {
				name := fmt.Sprintf("upstream=%s/size=%dMiB/device=%s", up, size>>20, map[bool]string{false: "idle", true: "busy"}[busy])
				b.Run(name, func(b *testing.B) {
					var r mr.Resource = direct
					var v *mr.Virtual
					if up == "vmm" {
						if v, err = mr.NewVirtual(dev, mr.VirtualOptions{}); err != nil {
							b.Skipf("no virtual memory management: %v", err)
						}
						defer v.Close()
						r = v
					}
					var alloc, free, reap, queued time.Duration
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						if busy {
							t := time.Now()
							queue(b)
							queued += time.Since(t)
						}
						t := time.Now()
						p, err := r.Allocate(size, s)
						alloc += time.Since(t)
						if err != nil {
							b.Fatal(err)
						}
						t = time.Now()
						err = r.Deallocate(p, size, s)
						free += time.Since(t)
						if err != nil {
							b.Fatal(err)
						}
						if err := s.Synchronize(); err != nil {
							b.Fatal(err)
						}
						if v != nil {
							t = time.Now()
							err := v.Release()
							reap += time.Since(t)
							if err != nil {
								b.Fatal(err)
							}
							if st := v.Stats(); st.Mapped != 0 {
								b.Fatalf("after the reap %d bytes still mapped", st.Mapped)
							}
						}
					}
					n := float64(b.N)
					b.ReportMetric(float64(alloc.Nanoseconds())/n, "alloc-ns/op")
					b.ReportMetric(float64(free.Nanoseconds())/n, "free-ns/op")
					b.ReportMetric(float64(reap.Nanoseconds())/n, "reap-ns/op")
					b.ReportMetric(float64(queued.Nanoseconds())/n, "queued-ns/op")
				})
			}
		}
	}
}
