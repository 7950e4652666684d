// Holes in pinned granules (PoolOptions.PackHoles, off by default): over
// a Grower, with blocks placed by predicted lifetime (pool_lifetime.go),
// a request smaller than a granule first takes a free piece that it
// fills exactly, up to a granule boundary or up to the next block,
// beside a block that keeps its granule mapped; and a freed block of a
// growable chunk is filed free at once instead of kept whole in the
// quick cache.
//
// Over a Grower the pool's peak of mapped memory is its live blocks
// rounded out to granules (pool_vgrow.go): a granule that holds a live
// byte stays mapped, whatever else it holds. Replaying
// llama-generate-h100, whose requests of 0.5, 1 and 2 MiB come hundreds
// of times each, the peak held 10 MiB free in the partial granules of 11
// runs, in patterns such as a live 1 MiB block beside a free 1 MiB piece
// of the same granule (BENCHMARKS.md, "Holes in pinned granules"). The
// tlsf's best fit hands a request of 1 MiB the smallest free block that
// holds it, which may lie in a granule no live block pins, while the free
// MiB beside a live block stays empty: at the next peak both granules are
// mapped. A piece filled exactly up to a granule boundary beside a live,
// pending or cached block adds no granule to what is mapped, now or at a
// later peak, and leaves no free sliver in that granule. Taking the
// tightest piece that a request fills only partly was measured too: it
// took the pipeline and both ResNet-50 traces over 1.01 and gpt-b to
// 1.0360 (the slivers it leaves split the free space that later requests
// of the same size would have filled).
//
// Two changes go with it, because without them the holes do not form
// where the lifetime placement expects them:
//
//   - A block of a growable chunk freed on its home goes to the tlsf at
//     once, coalesced, instead of into the quick cache (pool_quick.go),
//     which hands it whole to the next request of its size whatever its
//     predicted lifetime and keeps its free neighbours apart. The fast
//     slot is untouched: a block freed right after it was allocated is
//     still handed back to the next request of its size without a lock.
//   - A request predicted short-lived takes free blocks of the short
//     chunks only; it no longer falls back to a long chunk's free block,
//     where a block that lives longer than predicted would split a run of
//     long-lived blocks. With no short free block it commits granules in
//     its short chunk (pool_vgrow.go).
//
// The free blocks a hole may lie in are those filed lately: takeHole
// looks at the last poolHoles free blocks of growable chunks the stream
// filed (putFree), newest first, not at every block of its chunks. Walking
// every block gave about the same figures (BENCHMARKS.md) but cost a walk
// of the stream's blocks per request; the holes that matter are made by the
// frees just before (a block of a pair freed beside its live twin).
//
// Each of the three alone moved some traces up and others down; together
// (BENCHMARKS.md, "Holes in pinned granules") they took
// llama-generate-h100 from 1.0289 to 1.0086 of peak live,
// torch-train-gpt-b from 1.0308 to 1.0281, resnet50-amp from 1.0096 to
// 1.0050 and both ResNet-50 and GPT-2 traces and compile lower, at the
// price of one granule on torch-serve-varlen-b (1.0107 to 1.0178: its
// request of 11.8 MiB, predicted short and live at the peak, now lies
// alone in the short chunk) and oom-h100's 1.0009 (now 1.0011).
//
// What it costs, only over a Grower with the lifetime placement and the
// option set (the registry's pool_vmm_holes): a request of more than the
// small classes and less than a granule that the quick cache does not
// serve checks up to poolHoles descriptors; a free of a growable
// chunk's block that the fast slot does not keep coalesces at once, and
// the next request of its size splits a free block, where the quick
// cache handed the block back whole. Requests up to 1 MiB freed right
// after they were allocated (the fast slot) are served as before; a pair
// of 1.5 MiB through the lists took about twice as long as with the
// quick cache on the development machine (66 to 120 ns; 62 to 98 ns in
// a later A/B of pool_vmm against pool_vmm_holes; 4 MiB 20% and random
// churn 38% slower, BENCHMARKS.md).
// A pair served from the pool's lists must not get slower by default, so
// the three rules are an option, each hook behind one test of
// poolStream.packHoles (set at the stream's creation when the pool places
// by lifetime and PackHoles is set): serve, takeFrom, putFree,
// removeHomed and quickPut. Without it the pool behaves as if this file
// were not there.
//
// Invariants, under the stream's mutex: takeHole returns a block of
// exactly rounded bytes, in no list, cut from a free block of a growable
// chunk homed at st whose short flag matches the index it was asked for;
// the pieces of that free block around it stay free and filed in that
// index. holes names only descriptors st's mutex guards: blocks of
// chunks homed at st, or descriptors recycled since they were filed into
// st's spare list or another block of such a chunk (a name is used only
// if it is a free block of a growable chunk homed at st now, and a free
// block is in its index); a chunk that leaves st takes the names of its
// blocks out of the ring (forgetHoles).

package mr

import "github.com/streamalloc/streamalloc/gpu"

// poolHoles is how many of a stream's lately filed free blocks of
// growable chunks takeHole looks at (a power of two).
const poolHoles = 16

// takeHole takes, from one of the free blocks st filed lately (holes,
// newest first) that lies in a growable chunk homed at st of the
// lifetime t indexes, a piece of rounded bytes that fills the block's
// room beside a neighbour that pins its granule (holeIn). It returns nil
// if the request is not smaller than a granule or no such room is
// exactly rounded bytes. Caller holds st.mu; st.packHoles is set (the
// pool places by lifetime and packs holes).
func (st *poolStream) takeHole(t *tlsf, rounded int) *poolBlock {
	gran := st.pool.grower.GrowGranularity()
	if rounded >= gran {
		return nil
	}
	short := t == &st.largeShort
	for i := range poolHoles {
		b := st.holes[(st.holesPos-1-i)&(poolHoles-1)]
		// The descriptor may have been recycled since: any free block of
		// a growable chunk of this stream and lifetime will do.
		if b == nil || b.state != blockFree || b.c == nil || b.c.limit == 0 || b.c.short != short || b.size < rounded || b.c.home.Load() != st {
			continue
		}
		if at, ok := holeIn(b, rounded, gran); ok {
			t.remove(b)
			return st.cutBlock(b, at, rounded)
		}
	}
	return nil
}

// noteHole records free block b, just filed, of a growable chunk homed
// at st, as a place takeHole looks. Caller holds st.mu.
func (st *poolStream) noteHole(b *poolBlock) {
	if st.holes[(st.holesPos-1)&(poolHoles-1)] == b {
		return // a pair's block, freed again
	}
	st.holes[st.holesPos&(poolHoles-1)] = b
	st.holesPos++
}

// forgetHoles drops the names of blocks of c, which leaves st (stolen or
// released), from st's ring: from now on another stream's mutex guards
// them. Caller holds st.mu.
func (st *poolStream) forgetHoles(c *poolChunk) {
	for i, b := range st.holes {
		if b != nil && b.c == c {
			st.holes[i] = nil
		}
	}
}

// holeIn reports where in free block b a piece of rounded bytes fills the
// room a pinning neighbour leaves: at b's start if the room from there to
// the next granule boundary (or b's end) is exactly rounded and the
// block before b pins that granule, else at b's end if the room from the
// last granule boundary in b (or b's start) is exactly rounded and the
// block after b pins it.
func holeIn(b *poolBlock, rounded, gran int) (gpu.DevicePtr, bool) {
	g := gpu.DevicePtr(gran)
	if pinsGranule(b.prev) && b.ptr%g != 0 {
		if min(poolRoundUpPtr(b.ptr, gran), b.end())-b.ptr == gpu.DevicePtr(rounded) {
			return b.ptr, true
		}
	}
	if end := b.end(); pinsGranule(b.next) && end%g != 0 {
		if end-max(end&^(g-1), b.ptr) == gpu.DevicePtr(rounded) {
			return end - gpu.DevicePtr(rounded), true
		}
	}
	return 0, false
}

// pinsGranule reports whether block n holds memory that keeps its
// granules mapped: it is live, pending or cached (free blocks coalesce
// with their free neighbours, unmapped ones hold no memory).
func pinsGranule(n *poolBlock) bool {
	return n != nil && n.state != blockFree && n.state != blockUnmapped
}
