// Giant chunks split at the high-water mark (PoolOptions.SplitGiantAtMark).
//
// Over an upstream that cannot extend or merge chunks (cuMemAlloc), a
// program whose steps cycle through requests of a few scales makes the
// pool alternate between two sets of chunks: a step of large arrays grows
// giant chunks (1/poolGiantShare of the high-water mark of reserved bytes
// and up) and, to stay under the mark, first gives back the idle chunks of
// the smaller steps; the next smaller step finds only giant chunks idle,
// which splitLarger keeps for requests of at least half their size, grows
// chunks of its own scale and gives the giant ones back. The CuPy workload
// of scripts/torch-bench.py (arrays of 1, 4, 16, 3 and 9 M floats in turn)
// made 59 growths and 57 releases in 20 steps of a millisecond this way on
// the H100, each release a cuMemFree that waits for the device.
//
// With the option, a big request whose growth would give idle chunks back
// takes the best-fitting free block of a giant chunk instead, if a request
// of the same rounded size came to the slow path before (a size the
// program repeats). The memory stays where it is, so the mark does not
// rise on this request. Requests seen for the first time grow as before:
// a program's first occurrence of a size is where long-lived blocks come
// from (CuPy's cached FFT plans keep a work area of their first
// transform's size), and such a block cut from a giant chunk would pin it
// for good; on the CuPy history, splitting for them as well raised peak
// reserved from 1.10 to 1.15 times peak live.
//
// It is an option, off by default, because it moves other programs'
// reserved bytes both ways: replaying every recorded history (pluggable's
// TestRecordedTraces), CuPy keeps its 1.0999 of peak live with 26 device
// calls in its 20 timed steps where the default makes 116; GPT-2 training
// lengthened to 34 steps keeps its 1.0260 with 0.12 growths and 0.12
// releases a steady step where the default makes 1.88 and 2.00, and the
// two recorded GPT-2 histories replayed whole reserve 1.0260 (from 1.0239
// and 1.0259); ResNet-50 holds less (1.0392 from 1.0510); the CUDA-graph,
// torch.compile, three-stream and out-of-memory traces hold more (1.1766,
// 1.0796, 1.0977 and 1.0397 where the default holds 1.0813, 1.0563,
// 1.0889 and 1.0304): their long-lived blocks come in sizes seen before
// (BENCHMARKS.md, "Chunk churn under CuPy"). Rules that would let the
// split through only where it is safe were replayed on every recorded
// trace (the size's past lifetimes, no recent rise of the mark or of
// live bytes, whether the size was live when a giant chunk's own scale
// was last requested, the splits not made judged in hindsight): each
// left at least two traces above the default, because a split made
// before a step's peak pins the chunk that peak needs, and even a block
// freed at once keeps a giant chunk the default would have traded for
// one of the request's size, which changes the later steps' chunks
// (BENCHMARKS.md, "Gates for split_giant").
//
// The memory of sizes seen is a direct-mapped table of poolSeenSlots
// exact sizes, so a program of ever-new sizes costs no more memory; a
// collision forgets a size (it counts as new once more), never makes one
// look seen. It is touched only under Pool.mu, on the slow path; the
// hot path does not know the option.

package mr

import "github.com/streamalloc/streamalloc/gpu"

// poolSeenSlots is the number of sizes a pool with SplitGiantAtMark
// remembers (a power of two).
const poolSeenSlots = 256

// poolSeenSizes remembers the rounded sizes of big requests that reached
// the slow path. Guarded by Pool.mu.
type poolSeenSizes [poolSeenSlots]int

// note records rounded and reports whether it was recorded before (and
// not forgotten since by a collision).
func (s *poolSeenSizes) note(rounded int) bool {
	// Fibonacci hashing of the size in units of Alignment.
	i := uint64(rounded/Alignment) * 0x9E3779B97F4A7C15 >> (64 - 8)
	if s[i] == rounded {
		return true
	}
	s[i] = rounded
	return false
}

// splitGiantAtMark serves a big request from the best-fitting free block
// of st's large chunks, giant ones included, if growing for it would
// first give back idle chunks (a growth at the high-water mark, the
// threshold or MaxSize). It reports false otherwise, or if no free block
// is large enough. Caller holds p.mu, has tried splitLarger, and knows
// the size is a repeat.
func (p *Pool) splitGiantAtMark(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	if int(p.usage.reserved.Load()) <= p.releaseTarget(p.growthSize(rounded, false)) {
		return 0, false // the growth would give nothing back
	}
	st.lock()
	defer st.mu.Unlock()
	st.quickFlush()
	b := st.large.findFit(rounded, func(*poolBlock) bool { return true })
	if b == nil {
		return 0, false
	}
	b = st.split(&st.large, b, rounded)
	st.markLive(b, size, p.slowOwner)
	p.wide.bigSplits++
	p.wide.giantSplits++
	return b.ptr, true
}
