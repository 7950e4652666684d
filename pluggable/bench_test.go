package pluggable

import (
	"os"
	"testing"
)

// BenchmarkAllocFree is the Go side of the C ABI's pair cost: Alloc and
// Free of 1 MiB on the legacy stream, as sa_torch_alloc/free call them,
// without the C-to-Go transitions (capi_bench measures those on top), for
// the pool over each upstream that holds its memory itself. On the
// simulator unless STREAMALLOC_DEVICE=cuda.
func BenchmarkAllocFree(b *testing.B) {
	for _, conf := range []string{"pool", "pool,upstream=vmm"} {
		b.Run(conf, func(b *testing.B) {
			if os.Getenv("STREAMALLOC_DEVICE") != "cuda" {
				conf += ",backend=sim"
			}
			a := New()
			if err := a.Configure(conf); err != nil {
				b.Fatal(err)
			}
			const size = 1 << 20
			// The first pair opens the device and reserves the pool's
			// address space (on the simulator, tenths of a second over
			// vmm, which indexes every granule): outside the timing.
			if p := a.Alloc(size, 0, 0); p == 0 || a.Free(p, size, 0, 0) != nil {
				b.Fatal(a.LastError())
			}
			for b.Loop() {
				p := a.Alloc(size, 0, 0)
				if p == 0 {
					b.Fatal(a.LastError())
				}
				if err := a.Free(p, size, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSteadyResNet50 is the host's cost per call in ResNet-50's
// steady training steps as PyTorch makes them: the recorded history
// (testdata) is replayed through the allocator with its eight steady
// steps repeated, the first four copies outside the timing (the pool
// settles), then b.N copies timed; ns/call is the mean over their
// allocations and frees. Over Virtual with its margin (mapped_slack) a
// settled step commits nothing, so that line compares the pool's path
// over its growable chunk with the default pool's over chunks. On the
// simulator.
func BenchmarkSteadyResNet50(b *testing.B) {
	evs := readTorch(b, "testdata/torch-train-resnet50-h100.csv.gz")
	const first, last = 3587, 9786 // the recorded steady steps, by allocation
	for _, conf := range []string{"pool", "pool,upstream=vmm", "pool,upstream=vmm,mapped_slack"} {
		b.Run(conf, func(b *testing.B) {
			a := New()
			if err := a.Configure(conf + ",backend=sim"); err != nil {
				b.Fatal(err)
			}
			h := repeatSteps(b, evs, first, last, 4+b.N)
			cut, n := 0, 0
			for i, e := range h {
				if e.alloc {
					if n++; n == last+(last-first+1)*3+1 {
						cut = i
						break
					}
				}
			}
			live := map[int]uintptr{}
			play := func(evs []torchEvent) {
				for _, ev := range evs {
					if ev.alloc {
						p := a.Alloc(ev.size, 0, 0)
						if p == 0 {
							b.Fatal(a.LastError())
						}
						live[ev.id] = p
						continue
					}
					if err := a.Free(live[ev.id], ev.size, 0, 0); err != nil {
						b.Fatal(err)
					}
					delete(live, ev.id)
				}
			}
			play(h[:cut])
			b.ResetTimer()
			play(h[cut:])
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(len(h)-cut), "ns/call")
		})
	}
}
