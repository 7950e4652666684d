// Notebook: the notebook loop, the smallest program that shows why
// stream-ordered allocation matters. Each iteration allocates 4 MiB,
// launches a kernel that writes all of it, and frees it, on one stream.
//
// With cuMemAlloc (the direct resource) every free waits for the kernel,
// so the host and the GPU take turns. With stream-ordered allocation
// (async, pool) the host only enqueues; the GPU runs the kernels back to
// back, and the memory one iteration frees is the memory the next one
// gets. The loop is timed over 100 iterations and one stream
// synchronization at the end; Notebook runs it in batches of
// NotebookBatch, so the queue of enqueued work stays bounded however long
// the benchmark runs (the simulator's queues are not, and the driver's
// blocks the host once full), and counts the final synchronization too.

package bench

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
)

const (
	// NotebookBytes is the size each Notebook iteration allocates and
	// fills (1<<20 float32s).
	NotebookBytes = 4 << 20
	// NotebookBatch is how many iterations run between two stream
	// synchronizations.
	NotebookBatch = 100
)

// Notebook benchmarks one iteration of the notebook loop per op: allocate
// NotebookBytes on s, fill them with k's fill kernel, free them on s.
// After every NotebookBatch iterations, and once after the last, it
// synchronizes s, inside the timed region, so ns/op is the time per
// iteration of work done, not only enqueued.
func Notebook(b *testing.B, r mr.Resource, s gpu.Stream, k *kernels.Kernels) {
	b.Helper()
	const words = NotebookBytes / 4
	iter := func(seed uint32) {
		p, err := r.Allocate(NotebookBytes, s)
		if err != nil {
			fatalf(b, "notebook: allocate: %w", err)
		}
		ferr := k.Fill(s, p, words, seed)
		if err := r.Deallocate(p, NotebookBytes, s); err != nil {
			fatalf(b, "notebook: free: %w", err)
		}
		if ferr != nil {
			fatalf(b, "notebook: fill: %w", ferr)
		}
	}
	iter(0) // warm-up: a caching resource grows here
	if err := s.Synchronize(); err != nil {
		fatalf(b, "notebook: synchronize: %w", err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		iter(uint32(i))
		if i%NotebookBatch == 0 {
			if err := s.Synchronize(); err != nil {
				fatalf(b, "notebook: synchronize: %w", err)
			}
		}
	}
	// b.Loop stopped the timer; the work of the last batch is still
	// running on the GPU and belongs to the measurement.
	b.StartTimer()
	err := s.Synchronize()
	b.StopTimer()
	if err != nil {
		fatalf(b, "notebook: synchronize: %w", err)
	}
}
