// Holes in pinned granules: over a Grower, with blocks placed by
// predicted lifetime (pool_lifetime.go), a request smaller than a granule
// first takes a free piece that it fills exactly, up to a granule
// boundary or up to the next block, beside a block that keeps its
// granule mapped; and a freed block of a growable chunk is filed free at
// once instead of kept whole in the quick cache.
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
// later peak, and leaves no free sliver in that granule. Taking a piece
// that a request fills only partly was measured too, and raised three
// traces (the pieces it leaves split the free space that later requests
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
// Each of the three alone moved some traces up and others down; together
// they took llama-generate-h100 from 1.0289 to 1.0086 of peak live and
// torch-train-gpt-b from 1.0308 to 1.0268, at the price of one granule on
// torch-serve-varlen-b (1.0107 to 1.0178: its request of 11.8 MiB,
// predicted short and live at the peak, now lies alone in the short
// chunk) and of the pipeline's 1.0014 (now 1.0081). BENCHMARKS.md has the
// figures of every trace and of the variants measured.
//
// What it costs: only over a Grower with the lifetime placement (the
// registry's pool_vmm), a request of more than the small classes and
// less than a granule that the quick cache does not serve walks the
// blocks of its stream's growable chunks of its predicted lifetime, under
// the stream's mutex; a free of a growable chunk's block that is not the
// one the fast slot keeps coalesces at once. The fast slot's pair and
// every request of another size are served as before.
//
// Invariants: takeHole returns a block of exactly rounded bytes, in no
// list, cut from a free block of a growable chunk homed at st whose
// short flag matches the index it was asked for; the pieces of that free
// block around it stay free and filed in that index.

package mr

import "github.com/streamalloc/streamalloc/gpu"

// takeHole takes from a growable chunk of st, of the lifetime t indexes,
// a piece of rounded bytes that fills a free block's room beside a
// neighbour that pins its granule: from the block's start up to the
// granule boundary (or the block's end), after a live, pending or cached
// block; or from the granule boundary (or the block's start) up to the
// block's end, before one. It returns nil if the request is not smaller
// than a granule or no such room is exactly rounded bytes. Caller holds
// st.mu; st.life is set (the pool places by lifetime).
func (st *poolStream) takeHole(t *tlsf, rounded int) *poolBlock {
	gran := st.pool.grower.GrowGranularity()
	if rounded >= gran {
		return nil
	}
	short := t == &st.largeShort
	for _, c := range st.homed {
		if c.limit == 0 || c.short != short {
			continue
		}
		for b := c.first; b != nil; b = b.next {
			if b.state != blockFree || b.size < rounded {
				continue
			}
			if at, ok := holeIn(b, rounded, gran); ok {
				t.remove(b)
				return st.cutBlock(b, at, rounded)
			}
		}
	}
	return nil
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
