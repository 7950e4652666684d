// Streams: how a resource scales with goroutines that each allocate on a
// stream of their own (where the pool must do 50 times what the driver's
// pool does at 16 goroutines).

package bench

import (
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// PairsPerRound is how many pairs each goroutine of Streams makes per op:
// enough that starting the goroutines, and waking the OS threads that run
// them (tens of microseconds each), is a small part of an op. With 256
// pairs, a round of a fast resource lasted about as long as those
// wake-ups, and 4 or 8 goroutines measured fewer pairs per second than 1.
const PairsPerRound = 4096

// Streams benchmarks len(streams) goroutines, each making PairsPerRound
// Allocate(size)+Deallocate pairs on its own stream per op, and reports
// the total throughput of all of them as the metric "pairs/s". Each
// stream first makes one untimed pair.
func Streams(b *testing.B, r mr.Resource, streams []gpu.Stream, size int) {
	b.Helper()
	if len(streams) == 0 {
		fatalf(b, "streams: no streams")
	}
	for _, s := range streams {
		pair(b, r, s, size)
	}
	errs := make([]error, len(streams)) // one slot per goroutine: no lock
	pairs := 0
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for i, s := range streams {
			wg.Go(func() { errs[i] = pairs256(r, s, size) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				fatalf(b, "streams: goroutine %d: %w", i, err)
			}
		}
		pairs += PairsPerRound * len(streams)
	}
	b.ReportMetric(float64(pairs)/b.Elapsed().Seconds(), "pairs/s")
}

// pairs256 makes PairsPerRound pairs on s, stopping at the first error.
func pairs256(r mr.Resource, s gpu.Stream, size int) error {
	for range PairsPerRound {
		p, err := r.Allocate(size, s)
		if err != nil {
			return fmt.Errorf("allocate %d bytes: %w", size, err)
		}
		if err := r.Deallocate(p, size, s); err != nil {
			return fmt.Errorf("free %d bytes: %w", size, err)
		}
	}
	return nil
}
