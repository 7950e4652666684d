// Holes at the pair's cost (PoolOptions.HolesKeepPair, which refines
// PackHoles): a pool that packs holes (pool_vhole.go) still keeps the
// block a stream handed out last whole in the quick cache when it is
// freed on its home, and lets SmallAtPeak (pool_vpeak.go) act.
//
// PackHoles files every freed block of a growable chunk free at once,
// coalesced, so that the room beside a live block is there for a request
// that fills it exactly. The price is paid by the commonest pattern a
// caching allocator sees, a block freed and one of the same size asked
// for right after: it goes through a coalesce and a split where the quick
// cache (pool_quick.go) moved a pointer each way, about twice as long for
// a pair of 1.5 MiB on the development machine. Such a pair's block is
// the one the stream handed out last (poolStream.last, the block the fast
// slot arms with, pool_fast.go). Kept whole, it goes back to the next
// request of its size, at the place it had, which costs no hole: the
// request would have taken that room again, or a hole of the same size.
// Every other freed block of a growable chunk (blocks freed in another
// order than they were handed out, the frees that make and widen holes)
// is filed free as with PackHoles; and the quick cache is flushed into
// the tlsf at its first miss as always, so a cached block delays no
// coalescing past the next request of another size.
//
// Replaying the thirteen recorded traces (BENCHMARKS.md, "Holes at the
// pair's cost"), keeping the pair's block cost PackHoles none of its gain
// on llama-generate-h100 (1.0086 of peak live, 1.0289 without PackHoles)
// and changed the others by a granule either way; keeping the quick
// cache for every block, or for every block of at least a granule or
// above 1 MiB, lost that gain (1.0137-1.0289). SmallAtPeak, which
// PackHoles alone turns off (with the quick cache off for growable
// blocks it raised torch-train-gpt-b from 1.0281 to 1.0334), measured
// better with it here: cupy-cycle 1.0333 to 1.0285, cuda-graph 1.0309 to
// 1.0253, torch-train-gpt-b 1.0321 to 1.0295. So with HolesKeepPair the
// pool applies both.
//
// Invariants: a block cached under this rule is an ordinary cached block
// (pool_quick.go): in quick[:nquick], counted in its chunk's cached,
// filed free at the first request it does not serve, by steal, release
// and every walk that flushes the cache.

package mr

// keepsPair reports whether b, a block of a growable chunk freed on its
// home st, stays whole in the quick cache although the pool packs holes:
// HolesKeepPair is set and b is the block st handed out last. Caller
// holds st.mu.
func (st *poolStream) keepsPair(b *poolBlock) bool {
	return st.keepPair && b == st.last
}
