package mr_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// captureStepSizes are the allocations of one step: each is allocated,
// filled by a kernel and freed before the next, so the step's live peak is
// the largest.
var captureStepSizes = []int{64 << 10, 1 << 20, 256 << 10}

// captureStep enqueues one step on s.
func captureStep(b *testing.B, r mr.Resource, k *kernels.Kernels, s gpu.Stream) {
	for i, n := range captureStepSizes {
		p, err := r.Allocate(n, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Fill(s, p, n/4, uint32(i)); err != nil {
			b.Fatal(err)
		}
		if err := r.Deallocate(p, n, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCaptureStep measures one step of three allocate / fill kernel /
// free (64 KiB, 1 MiB, 256 KiB) run eagerly and replayed from a captured
// graph, with Pool (over Async) and with Async (whose calls become graph
// memory nodes). ns/op is per step (synchronized every 64 steps), with the
// kernels' time; graph-held-bytes is the memory the graph keeps (Pool: its
// GraphPool's chunks; Async: the device's graph memory), against the
// step's live peak of 1 MiB.
func BenchmarkCaptureStep(b *testing.B) {
	dev := testdev.Device(b)
	k, err := kernels.Load(dev)
	if err != nil {
		b.Fatal(err)
	}
	newPool := func(b *testing.B) mr.Resource {
		up, err := mr.NewAsync(dev, mr.AsyncOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p, err := mr.NewPool(up, mr.PoolOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		return p
	}
	newAsync := func(b *testing.B) mr.Resource {
		r, err := mr.NewAsync(dev, mr.AsyncOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		mk    func(*testing.B) mr.Resource
		graph bool
	}{
		{"pool/eager", newPool, false},
		{"pool/graph", newPool, true},
		{"async/eager", newAsync, false},
		{"async/graph", newAsync, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := tc.mk(b)
			s, err := dev.NewStream()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Destroy()
			captureStep(b, r, k, s) // warm the resource
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			run := func() { captureStep(b, r, k, s) }
			var c *mr.Capture
			var x gpu.GraphExec
			if tc.graph {
				c, err = mr.BeginCapture(s, gpu.CaptureGlobal, mr.CaptureOptions{})
				if err != nil {
					b.Fatal(err)
				}
				captureStep(b, r, k, s)
				g, err := c.End()
				if err != nil {
					b.Fatal(err)
				}
				if x, err = g.Instantiate(0); err != nil {
					b.Fatal(err)
				}
				if err := x.Launch(s); err != nil { // upload, first graph memory
					b.Fatal(err)
				}
				run = func() {
					if err := x.Launch(s); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				run()
				if i++; i%64 == 0 {
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			if tc.graph {
				held := c.Pool().Usage().Reserved
				if _, ok := r.(*mr.Async); ok {
					held, _ = dev.(gpu.GraphDevice).GraphMemAttribute(gpu.GraphMemReservedCurrent)
				}
				b.ReportMetric(float64(held), "graph-held-bytes")
				if err := x.Destroy(); err != nil {
					b.Fatal(err)
				}
				if err := c.Release(s); err != nil {
					b.Fatal(err)
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				dev.(gpu.GraphDevice).GraphMemTrim()
			}
		})
	}
}
