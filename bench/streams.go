// Streams: how a resource scales with goroutines that each allocate on a
// stream of their own (where the pool must do 50 times what the driver's
// pool does at 16 goroutines).

package bench

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// PairsPerRound is how many pairs each goroutine of Streams makes per op.
const PairsPerRound = 4096

// Streams benchmarks len(streams) goroutines, each making PairsPerRound
// Allocate(size)+Deallocate pairs on its own stream per op, and reports
// the total throughput of all of them as the metric "pairs/s". Each
// stream first makes one untimed pair.
//
// The goroutines live for the whole benchmark: the benchmark's goroutine
// works on the first stream, and the others wait for each round by
// spinning on a counter for a while, then sleeping on a condition
// variable (so that a machine with fewer threads than goroutines still
// runs the rounds). Starting them for every round, as this did before,
// measured the host's thread wake-ups with the resource: on the H100
// machine's KVM host a round of 16 goroutines began only after a chain of
// futex wake-ups, and its end waited for the last goroutine to be
// scheduled.
func Streams(b *testing.B, r mr.Resource, streams []gpu.Stream, size int) {
	b.Helper()
	n := len(streams)
	if n == 0 {
		fatalf(b, "streams: no streams")
	}
	for _, s := range streams {
		pair(b, r, s, size)
	}
	// errs[i] is written by the goroutine of stream i only, before it
	// counts its round done, and read after.
	errs := make([]error, n)
	var (
		started = newGate() // rounds started
		done    = newGate() // rounds finished, summed over the other goroutines
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for i := 1; i < n; i++ {
		wg.Go(func() {
			for k := int64(1); started.await(k, &stop); k++ {
				if errs[i] == nil {
					errs[i] = pairs256(r, streams[i], size)
				}
				done.add(1)
			}
		})
	}
	defer func() {
		stop.Store(true)
		started.add(0) // wake the sleepers to see stop
		wg.Wait()
	}()
	pairs := 0
	b.ReportAllocs()
	for b.Loop() {
		k := started.add(1)
		errs[0] = pairs256(r, streams[0], size)
		done.await(k*int64(n-1), nil)
		for i, err := range errs {
			if err != nil {
				fatalf(b, "streams: goroutine %d: %w", i, err)
			}
		}
		pairs += PairsPerRound * n
	}
	b.ReportMetric(float64(pairs)/b.Elapsed().Seconds(), "pairs/s")
}

// gate is a counter that goroutines wait to reach a value: spinning
// first, for about as long as a round's stragglers take, then asleep. An
// add wakes sleepers only if there are any, so that the goroutines
// counting their rounds done take no lock while the benchmark's goroutine
// spins (a broadcast at every add was a seventh of a profile of 16
// goroutines on the H100 host).
type gate struct {
	n        atomic.Int64
	sleepers atomic.Int64
	mu       sync.Mutex
	cond     *sync.Cond
}

func newGate() *gate {
	g := new(gate)
	g.cond = sync.NewCond(&g.mu)
	return g
}

// gateSpins is how many times await looks at the counter, yielding its
// thread in between, before it sleeps.
const gateSpins = 1000

// add adds d to the counter, wakes the sleepers, and returns the new value.
func (g *gate) add(d int64) int64 {
	v := g.n.Add(d)
	// A sleeper counts itself before it looks at the counter, under mu:
	// either it sees v, or this sees it and broadcasts once it waits.
	if g.sleepers.Load() > 0 {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	}
	return v
}

// await waits until the counter reaches v and returns true, or until stop
// (if not nil) is set and returns false.
func (g *gate) await(v int64, stop *atomic.Bool) bool {
	for range gateSpins {
		if g.n.Load() >= v {
			return true
		}
		if stop != nil && stop.Load() {
			return false
		}
		runtime.Gosched()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sleepers.Add(1)
	defer g.sleepers.Add(-1)
	for g.n.Load() < v {
		if stop != nil && stop.Load() {
			return false
		}
		g.cond.Wait()
	}
	return true
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
