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
