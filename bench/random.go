// Random: RMM's random-allocations benchmark in our words. Many blocks
// stay live at once, of sizes spread over three orders of magnitude, and
// are freed in random order: the searches, splits and coalescing of a
// suballocator under load, not only its fast path.

package bench

import (
	"errors"
	"math/bits"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// RandomOptions shape the Random workload. The zero value is the suite's:
// up to 512 live blocks of 1 KiB to 4 MiB, seed 1.
type RandomOptions struct {
	MaxLive int    // most blocks live at once (0: 512)
	MinSize int    // smallest request in bytes (0: 1 KiB)
	MaxSize int    // largest request in bytes (0: 4 MiB)
	Seed    uint64 // the random sequence (0: 1); the same seed makes the same requests
	// Warmup is how many operations of the sequence run untimed before
	// the first timed one (0: 200 per MaxLive block; negative: none).
	Warmup int
}

func (o RandomOptions) withDefaults() RandomOptions {
	if o.MaxLive <= 0 {
		o.MaxLive = 512
	}
	if o.MinSize <= 0 {
		o.MinSize = 1 << 10
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 4 << 20
	}
	if o.MaxSize < o.MinSize {
		o.MaxSize = o.MinSize
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Warmup == 0 {
		o.Warmup = randomWarmupPerLive * o.MaxLive
	}
	return o
}

// randomWarmupPerLive is the default warm-up, in operations per MaxLive
// block. A caching resource grows while the total of the live blocks
// reaches new highs, which, in a random walk, become rarer as it goes: on
// a Pool over the simulator with the suite's options, 166 of the first
// 176 growths (each a cuMemAllocAsync of 8 MiB or more on a GPU) fall in
// the first 110,000 operations, 10 in the next million. Timed, they make
// the figure depend on how long it runs: a 150 ms run at 200 ns an
// operation times about 750,000 of them, that ramp included.
const randomWarmupPerLive = 200

type randomBlock struct {
	p gpu.DevicePtr
	n int
}

// randomRun is one run of the Random workload: the resource, the blocks
// live on it, and the random sequence.
//
// The harness is part of every figure Random reports, so it keeps its own
// cost small: one random number per operation, from a generator of one
// multiply (wyrand), which decides between allocation and free (its
// lowest bit) and picks the block or the size (its high bits, by a
// multiply-shift: uniform to within n/2^64). Drawing the same from
// math/rand/v2's PCG, up to three bounded draws an operation through
// closures, took 222 of the 795 instructions an operation cost on a Pool
// (cachegrind); this takes 88.
type randomRun struct {
	r     mr.Resource
	s     gpu.Stream
	o     RandomOptions
	state uint64 // the generator's
	span  uint64 // MaxSize - MinSize + 1
	live  []randomBlock
}

// next returns the sequence's next 64 random bits (wyrand).
func (w *randomRun) next() uint64 {
	w.state += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(w.state, w.state^0xe7037ed1a0b428db)
	return hi ^ lo
}

// below maps random bits x to [0, n).
func below(x uint64, n int) int {
	hi, _ := bits.Mul64(x, uint64(n))
	return int(hi)
}

// free frees the live block that x picks.
func (w *randomRun) free(x uint64) error {
	i := below(x, len(w.live))
	b := w.live[i]
	if err := w.r.Deallocate(b.p, b.n, w.s); err != nil {
		return err
	}
	last := len(w.live) - 1
	w.live[i] = w.live[last]
	w.live = w.live[:last]
	return nil
}

// step runs one operation.
func (w *randomRun) step(b *testing.B) {
	x := w.next()
	if n := len(w.live); n == w.o.MaxLive || (n > 0 && x&1 == 0) {
		if err := w.free(x); err != nil {
			fatalf(b, "random: free: %w", err)
		}
		return
	}
	n := w.o.MinSize + below(x, int(w.span))
	p, err := w.r.Allocate(n, w.s)
	if err != nil {
		if errors.Is(err, mr.ErrOutOfMemory) && len(w.live) > 0 {
			if err := w.free(x); err != nil {
				fatalf(b, "random: free: %w", err)
			}
			return
		}
		fatalf(b, "random: allocate %d bytes with %d live: %w", n, len(w.live), err)
	}
	w.live = append(w.live, randomBlock{p, n})
}

// Random benchmarks one random operation per op on s: a free of a random
// live block when MaxLive blocks are live, else an allocation of a
// uniformly random size in [MinSize, MaxSize] or a free, with equal
// chances (an allocation when nothing is live). An allocation refused
// with mr.ErrOutOfMemory frees a block instead, so a resource that cannot
// hold MaxLive of the largest blocks still runs; with nothing live to
// free, it fails the benchmark. The first Warmup operations run before
// the timer starts, so that the timed ones measure the churn of a
// resource that holds what the workload needs rather than its growth to
// it. Every block is freed at the end, untimed.
func Random(b *testing.B, r mr.Resource, s gpu.Stream, opts RandomOptions) {
	b.Helper()
	o := opts.withDefaults()
	w := &randomRun{r: r, s: s, o: o, state: o.Seed, span: uint64(o.MaxSize - o.MinSize + 1),
		live: make([]randomBlock, 0, o.MaxLive)}
	// Every block is freed on every way out, so a failed benchmark
	// leaves the resource closable.
	defer func() {
		for len(w.live) > 0 {
			if err := w.free(w.next()); err != nil {
				errorf(b, "random: free at the end: %w", err)
				return
			}
		}
	}()
	for range o.Warmup {
		w.step(b)
	}
	b.ReportAllocs()
	for b.Loop() {
		w.step(b)
	}
}
