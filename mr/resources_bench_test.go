package mr_test

// Benchmarks of every resource, in shapes that compare side by side:
//
//	BenchmarkPair/resource=R/size=S           one Allocate+Deallocate on one stream
//	BenchmarkStreams/resource=R/goroutines=N  N goroutines, each on its own
//	                                          stream, doing 4 KiB pairs; reports
//	                                          the total pairs/s
//	BenchmarkRandom/resource=R                RMM-style random allocations: up
//	                                          to 512 live blocks of 1 KiB to 4 MiB,
//	                                          random allocate or free per op
//	BenchmarkNotebook/resource=R              the notebook loop: allocate 4 MiB,
//	                                          fill it with a kernel, free; time per
//	                                          iteration with the stream syncs
//	BenchmarkPipeline/resource=R              a producer stream fills 1 MiB buffers,
//	                                          a consumer uses and frees them; time
//	                                          per buffer, peak reserved MiB
//
// The workloads and the cases live in package bench, which
// `streamalloc bench` runs too, so both measure the same code under the
// same names; the resources they run on (the pool included) come from the
// table of mr/registry. Add resources there and parameters to bench.Suite
// rather than here.
//
// The device is internal/testdev's: the simulator by default, the GPU
// with STREAMALLOC_DEVICE=cuda (the GPU script), from the same binary.

import (
	"testing"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

func BenchmarkPair(b *testing.B)     { benchSuite(b, bench.WorkloadPair) }
func BenchmarkStreams(b *testing.B)  { benchSuite(b, bench.WorkloadStreams) }
func BenchmarkRandom(b *testing.B)   { benchSuite(b, bench.WorkloadRandom) }
func BenchmarkNotebook(b *testing.B) { benchSuite(b, bench.WorkloadNotebook) }
func BenchmarkPipeline(b *testing.B) { benchSuite(b, bench.WorkloadPipeline) }

// benchSuite runs the suite's cases of workload w as sub-benchmarks named
// resource=R[/param], each on a device of its own.
func benchSuite(b *testing.B, w bench.Workload) {
	for _, c := range bench.Suite() {
		if c.Workload == w {
			b.Run(c.Sub(), func(b *testing.B) { c.Run(b, testdev.Device(b)) })
		}
	}
}
