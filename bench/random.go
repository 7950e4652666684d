// Random: RMM's random-allocations benchmark in our words. Many blocks
// stay live at once, of sizes spread over three orders of magnitude, and
// are freed in random order: the searches, splits and coalescing of a
// suballocator under load, not only its fast path.

package bench

import (
	"errors"
	"math/rand/v2"
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
	rng := rand.New(rand.NewPCG(o.Seed, 2))
	live := make([]randomBlock, 0, o.MaxLive)
	free := func() error {
		i := rng.IntN(len(live))
		if err := r.Deallocate(live[i].p, live[i].n, s); err != nil {
			return err
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		return nil
	}
	// freeAll runs on every way out, so a failed benchmark leaves the
	// resource closable.
	defer func() {
		for len(live) > 0 {
			if err := free(); err != nil {
				errorf(b, "random: free at the end: %w", err)
				return
			}
		}
	}()
	step := func() {
		if len(live) == o.MaxLive || (len(live) > 0 && rng.IntN(2) == 0) {
			if err := free(); err != nil {
				fatalf(b, "random: free: %w", err)
			}
			return
		}
		n := o.MinSize + rng.IntN(o.MaxSize-o.MinSize+1)
		p, err := r.Allocate(n, s)
		if errors.Is(err, mr.ErrOutOfMemory) && len(live) > 0 {
			if err := free(); err != nil {
				fatalf(b, "random: free: %w", err)
			}
			return
		}
		if err != nil {
			fatalf(b, "random: allocate %d bytes with %d live: %w", n, len(live), err)
		}
		live = append(live, randomBlock{p, n})
	}
	for range o.Warmup {
		step()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}
