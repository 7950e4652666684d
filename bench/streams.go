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

// PairsPerRound is how many pairs each goroutine of Streams makes per op,
// on average.
const PairsPerRound = 4096

// streamsBatch is how many pairs a goroutine of Streams claims at a time.
const streamsBatch = 1024

// Streams benchmarks len(streams) goroutines, each making
// Allocate(size)+Deallocate pairs on its own stream, PairsPerRound per
// goroutine per op on average, and reports the total throughput of all
// of them as the metric "pairs/s", and as "min-share" the pairs of the
// goroutine that made the fewest over the mean (1: all made as many).
// Each stream first makes one untimed pair.
//
// The work is a queue of batches of streamsBatch pairs that every
// goroutine takes from, the benchmark's goroutine (on the first stream)
// included, and each op adds a round of batches to it. An op ends when
// the batches of the rounds before the new one are done, so the next
// round is always queued while the goroutines finish the last: no
// goroutine waits for the slowest at the end of each round, which is what
// an op of exactly PairsPerRound pairs per goroutine measured. A profile
// of 16 goroutines on the H100 machine's KVM host spent 23% of its
// samples in goroutines that had finished their round and waited (on the
// scheduler's lock, yielding), so a round lasted as long as its slowest
// goroutine, whose pace the host, not the resource, set. The pairs
// counted are those of the batches done when the last op ends.
//
// The goroutines live for the whole benchmark (starting them for every
// round measured the host's thread wake-ups with the resource) and, with
// no batch to take, spin on the queue for a while, then sleep (so that a
// machine with fewer threads than goroutines still runs).
func Streams(b *testing.B, r mr.Resource, streams []gpu.Stream, size int) {
	b.Helper()
	n := len(streams)
	if n == 0 {
		fatalf(b, "streams: no streams")
	}
	for _, s := range streams {
		pair(b, r, s, size)
	}
	q := newBatchQueue()
	mine := make([]paddedCount, n) // batches each goroutine did, for min-share
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() {
			for q.wait() {
				if q.work(r, streams[i], size) {
					mine[i].n++
				}
			}
		})
	}
	defer func() {
		q.close()
		wg.Wait()
	}()
	perRound := int64(n * PairsPerRound / streamsBatch)
	var rounds, done int64
	b.ReportAllocs()
	for b.Loop() {
		rounds++
		if rounds == 1 {
			q.add(2 * perRound) // this round and the next
		} else {
			q.add(perRound)
		}
		for {
			if err := q.err(); err != nil {
				fatalf(b, "streams: %w", err)
			}
			if done = q.done.Load(); done >= rounds*perRound {
				break
			}
			if q.work(r, streams[0], size) {
				mine[0].n++
			} else {
				runtime.Gosched() // every batch is taken: wait for the others
			}
		}
	}
	q.close()
	wg.Wait()
	if err := q.err(); err != nil {
		fatalf(b, "streams: %w", err)
	}
	least := mine[0].n
	for i := range mine {
		least = min(least, mine[i].n)
	}
	total := q.done.Load()
	b.ReportMetric(float64(done*streamsBatch)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(least)*float64(n)/float64(max(total, 1)), "min-share")
}

type paddedCount struct {
	n int64
	_ [56]byte
}

// batchQueue hands out batches of pairs: limit is how many may be taken,
// claimed how many were, done how many are finished. Each counter has a
// cache line of its own: claimed and done change at every batch.
type batchQueue struct {
	limit   atomic.Int64
	_       [56]byte
	claimed atomic.Int64
	_       [56]byte
	done    atomic.Int64
	_       [56]byte
	stop    atomic.Bool
	failed  atomic.Bool

	mu       sync.Mutex
	cond     *sync.Cond
	sleepers int
	first    error
}

func newBatchQueue() *batchQueue {
	q := new(batchQueue)
	q.cond = sync.NewCond(&q.mu)
	return q
}

// add queues d more batches and wakes the sleepers.
func (q *batchQueue) add(d int64) {
	q.limit.Add(d)
	q.mu.Lock()
	if q.sleepers > 0 {
		q.cond.Broadcast()
	}
	q.mu.Unlock()
}

// close makes wait return false.
func (q *batchQueue) close() {
	q.stop.Store(true)
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

// queueSpins is how many times wait looks at the queue, yielding its
// thread in between, before it sleeps.
const queueSpins = 1000

// wait returns true once a batch may be available, false once the queue
// is closed.
func (q *batchQueue) wait() bool {
	for range queueSpins {
		if q.stop.Load() {
			return false
		}
		if q.claimed.Load() < q.limit.Load() {
			return true
		}
		runtime.Gosched()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sleepers++
	defer func() { q.sleepers-- }()
	for !q.stop.Load() && q.claimed.Load() >= q.limit.Load() {
		q.cond.Wait()
	}
	return !q.stop.Load()
}

// work takes a batch, if one is left, and makes its pairs on s; it
// reports whether it did. After a failure it makes no pairs and records
// the first error; the batch counts as done, so that no one waits for it.
func (q *batchQueue) work(r mr.Resource, s gpu.Stream, size int) bool {
	c := q.claimed.Load()
	if c >= q.limit.Load() || !q.claimed.CompareAndSwap(c, c+1) {
		return false
	}
	if !q.failed.Load() {
		if err := pairs(r, s, size, streamsBatch); err != nil {
			q.mu.Lock()
			if q.first == nil {
				q.first = fmt.Errorf("stream %d: %w", s.ID(), err)
			}
			q.mu.Unlock()
			q.failed.Store(true)
		}
	}
	q.done.Add(1)
	return true
}

// err returns the first error of a batch, or nil.
func (q *batchQueue) err() error {
	if !q.failed.Load() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.first
}

// pairs makes n pairs on s, stopping at the first error.
func pairs(r mr.Resource, s gpu.Stream, size, n int) error {
	for range n {
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
