// Pipeline: a producer stream hands each buffer it fills to a consumer
// stream, which frees it when done. Every free is a cross-stream free, so
// this is the workload where the ordering a resource adds to make such
// frees safe decides both how fast the stages overlap and how much memory
// stays reserved.

package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
)

const (
	// PipelineBytes is the size of each buffer handed over.
	PipelineBytes = 1 << 20
	// PipelineBatch is how many buffers the host enqueues between
	// synchronizations of the two streams.
	PipelineBatch = 128
	// PipelineWork is how long each stage's kernel runs per buffer.
	PipelineWork = 20 * time.Microsecond
)

// Pipeline benchmarks one buffer through two stages per op: allocate it on
// producer, run a PipelineWork kernel there, hand it to consumer (an event
// recorded on producer, waited on by consumer: the program's own order),
// run a PipelineWork kernel on consumer, and free it there. Both streams
// are synchronized every PipelineBatch buffers and once at the end, inside
// the timing. With stages that overlap, an op takes about one PipelineWork;
// run one after the other, two.
//
// If r reports its usage (mr.UsageReporter), Pipeline reports its peak
// reserved bytes as the metric "peak-MiB": the memory the buffers in
// flight held.
func Pipeline(b *testing.B, r mr.Resource, producer, consumer gpu.Stream, k *kernels.Kernels) {
	b.Helper()
	dev := producer.Device()
	handoff, err := dev.NewEvent(false)
	if err != nil {
		fatalf(b, "pipeline: new event: %w", err)
	}
	defer handoff.Destroy()
	drain := func() {
		for _, s := range []gpu.Stream{producer, consumer} {
			if err := s.Synchronize(); err != nil {
				fatalf(b, "pipeline: synchronize: %w", err)
			}
		}
	}
	stages := func() error {
		if err := k.Spin(producer, PipelineWork); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		// A wait captures the event as recorded when it is enqueued, so
		// one event serves every hand-off.
		if err := handoff.Record(producer); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		if err := consumer.WaitEvent(handoff); err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if err := k.Spin(consumer, PipelineWork); err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		return nil
	}
	item := func() {
		p, err := r.Allocate(PipelineBytes, producer)
		if err != nil {
			fatalf(b, "pipeline: allocate: %w", err)
		}
		serr := stages()
		if err := r.Deallocate(p, PipelineBytes, consumer); err != nil {
			fatalf(b, "pipeline: free: %w", err)
		}
		if serr != nil {
			fatalf(b, "pipeline: %w", serr)
		}
	}
	item() // warm-up: a caching resource grows here
	drain()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		item()
		if i++; i%PipelineBatch == 0 {
			drain()
		}
	}
	// As in Notebook: the last batch's work belongs to the measurement.
	b.StartTimer()
	drain()
	b.StopTimer()
	if u, ok := r.(mr.UsageReporter); ok {
		b.ReportMetric(float64(u.Usage().PeakReserved)/(1<<20), "peak-MiB")
	}
}
