// The quick cache of a pool stream: blocks freed on their home stream,
// kept whole for the next request of the same size.
//
// The commonest pattern a caching allocator sees is a block freed and a
// block of the same size asked for right after, on the same stream: a
// layer's activations, a workspace, a pinned staging buffer. Through the
// tlsf alone that pair costs a split on the allocation (remove the free
// block, file the rest) and a coalesce on the free (remove the rest, file
// the whole), four list operations and a descriptor recycled, for a block
// that ends where it started. The quick cache skips both: a block freed on
// its home goes, uncoalesced, onto a short list of the stream, and a
// request of its size takes it back. That is a pointer moved each way,
// which is most of what makes a pool pair cheaper than the tlsf round trip.
//
// A cached block is neither live nor free: it is in no tlsf and no live
// map, its state is blockCached, and its chunk counts it in cached. So
// free blocks may neighbour a cached block (they coalesce when it is
// flushed), and a chunk holding one is not idle: steals and releases pass
// it by. To keep that from costing memory, the cache lives only as long as
// requests keep matching it: the first request it cannot serve flushes it
// whole into the tlsf before the tlsf is searched, so when the sizes a
// program asks for change, its blocks are placed as the tlsf alone would
// place them (replaying the PyTorch traces with a cache that outlived
// misses raised the pool's peak reserved memory by up to 6%). And steal
// and releaseIdle flush the cache of each stream they examine. So the
// pool never grows, steals or fails while a cached block could have served
// the request, and Release gives back every chunk whose blocks are all
// free or cached.
//
// With PoolOptions.PackHoles, a pool growing in place over a Grower with
// the lifetime placement does not cache the blocks of its growable
// chunks: freed, they coalesce at once, so that a request smaller than a
// granule can fill the room they leave beside a live block
// (pool_vhole.go); with HolesKeepPair too, but for the block the stream
// handed out last, which a pair asks for again (pool_vpair.go).
//
// Invariants, under the stream's mutex: quick[:nquick] are exactly the
// blocks of state blockCached homed at the stream, oldest first, and
// c.cached counts those of chunk c; quick[nquick:] is nil.

package mr

// poolQuick is how many freed blocks a stream keeps whole. A few cover
// the interleaved pairs of a loop body; more would only delay the
// coalescing that keeps a stream's free memory in large blocks.
const poolQuick = 8

// quickTake returns the most recently cached block that serves a request
// of rounded bytes, taken out of the cache (still marked cached), or nil.
// A block serves if its size is rounded, or, for a big request, exceeds it
// by at most the slack take would accept from the tlsf.
func (st *poolStream) quickTake(rounded int) *poolBlock {
	for i := st.nquick - 1; i >= 0; i-- {
		b := st.quick[i]
		if b.size != rounded && (rounded < st.pool.tune.bigMin || b.size < rounded || b.size-rounded > st.pool.slack(rounded)) {
			continue
		}
		// Close the gap by hand: copy would go through the runtime's
		// typed copy for a slice of pointers, which costs more than the
		// few moves (none for the newest block, the common case).
		n := st.nquick - 1
		for j := i; j < n; j++ {
			st.quick[j] = st.quick[j+1]
		}
		st.quick[n] = nil
		st.nquick = n
		b.c.cached--
		return b
	}
	return nil
}

// quickPut caches b, which was live and is in no list now. A full cache
// first files its oldest block in the tlsf. A block of a growable chunk
// of a pool that packs holes (PoolOptions.PackHoles) is filed free
// instead (pool_vhole.go), unless it is the pair's block and the pool
// keeps it (HolesKeepPair, pool_vpair.go).
func (st *poolStream) quickPut(b *poolBlock) {
	if st.packHoles && b.c.limit > 0 && !st.keepsPair(b) {
		st.putFree(b) // a growable chunk's block is not kept whole (pool_vhole.go, pool_vpair.go)
		return
	}
	if st.nquick == poolQuick {
		old := st.quick[0]
		for j := range poolQuick - 1 {
			st.quick[j] = st.quick[j+1]
		}
		st.nquick--
		st.quick[st.nquick] = nil
		old.c.cached--
		st.putFree(old)
	}
	b.state = blockCached
	b.c.cached++
	st.quick[st.nquick] = b
	st.nquick++
}

// quickFlush files every cached block in the tlsf, coalescing it with its
// free neighbours.
func (st *poolStream) quickFlush() {
	for i, b := range st.quick[:st.nquick] {
		st.quick[i] = nil
		b.c.cached--
		st.putFree(b)
	}
	st.nquick = 0
}
