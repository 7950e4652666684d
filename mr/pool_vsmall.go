// Small requests in growable ranges (PoolOptions.SmallInRanges, off by
// default): over a Grower that refuses commits at addresses still being
// decommitted, a small request whose small chunk's growth would first
// give memory back takes mapped free room of its stream's growable chunks
// instead.
//
// Small requests (the classes up to 256 KiB) have small chunks of their
// own, 2 MiB allocations of the upstream, while the rest of a stream's
// requests share its growable chunks (pool_vgrow.go). Where the share of
// small requests changes from step to step, the two kinds trade memory
// through the device. Autoregressive generation with cycling batch sizes
// shows it: a batch of 4 keeps its KV cache, 24 tensors of 192-378 KiB,
// in small chunks, a batch of 32 the same tensors at eight times the size
// in the growable chunk. At the batch of 32's peak the idle small chunks
// are released to make room for commits under the high-water mark; at the
// next batch of 4 they grow back, each first giving back memory under the
// same rule, and over a Grower the release decommits the whole free
// block at the top of the growable chunk (hundreds of MiB that the last
// step freed), which the following steps commit again. Replaying that
// workload's history recorded on an H100 through the C ABI (BENCHMARKS.md,
// "Generation's commits and small chunks"), the pool over Virtual with
// MappedSlack committed 26 times and released or decommitted 6 times in
// every cycle of five steps, 5.2 commits a step, as it did on the card.
//
// With the option, such a request takes the smallest free block of its
// stream's growable chunks that holds it, before any release: memory
// the pool maps already, which it would otherwise have given back. The
// small chunks released at a peak are not grown back, nothing is
// decommitted for them, and at the peak itself small requests fill the
// pieces that larger requests leave in the growable chunk rather than
// map a small chunk more. And the growth of a small chunk keeps
// MappedSlack's margin, as a commit does (pool_vslack.go): without it a
// small chunk's growth decommits where a commit of the same bytes would
// not, and on resnet50-amp the rule then placed small requests in the
// growable chunk at every step (1.0188 of peak live, 123 decommits,
// where the pool keeps 1.0096 and 5).
//
// Measured on every recorded trace, with and without MappedSlack: the
// generation history settles at no device call from its third step on
// (1.0361 of peak live with MappedSlack, 1.0338-1.0384 without;
// 1.0406-1.0474 and 1.0406-1.0429 before; on the H100, no device call in
// 80 timed steps where the pool made 416 commits and 96 decommits, at
// 1.036 of peak allocated where it reached 1.032), llama-generate-h100
// drops from 1.0339 to 1.0289, cupy-cycle from 1.0333 to 1.0238-1.0285 and
// torch-train-gpt-b with MappedSlack from 1.0308-1.0334 to 1.0295; but the
// two-stream pipeline rises from 1.0081-1.0125 to 1.0125-1.0148 with
// MappedSlack (1.0081-1.0103 to 1.0125-1.0148 without), torch-train-gpt-b
// without MappedSlack from 1.0268-1.0308 to 1.0347, and resnet50-amp with
// MappedSlack from 1.0096 to 1.0103. A rule that trades traces is not the
// default, hence the option. Over a Grower that never refuses a commit the
// pool places by lifetime (pool_lifetime.go), and small requests in its
// long-lived range raised the pipeline there from 1.0014 to 1.0058 and
// oom-h100 from 1.0009 to 1.0015; so there the option does nothing, and
// PoolOptions.SmallAtPeak (pool_vpeak.go) is its counterpart: over the
// Grower that never refuses, a small request takes mapped room only after
// the release could not keep the growth under the mark.
//
// Cost: the rule runs on the growth path, under Pool.mu, where the
// growth would have run; a stream whose small chunks are full while the
// pool maps its mark takes it for each small request they cannot serve
// (1,740 of the generation history's 175,590 requests).
//
// Invariants: the block handed out is a block of a growable chunk homed
// at the requesting stream, live like any other block of it (freed, it
// is filed in its chunk's index, binsOf); poolWideStats.smallInRanges
// counts such requests, under Pool.mu.

package mr

import "github.com/streamalloc/streamalloc/gpu"

// smallTarget is releaseTarget for a small chunk's growth of g bytes with
// SmallInRanges: the high-water mark of mapped bytes a commit of g bytes
// keeps (mappedHighWater, with MappedSlack's margin), then the same
// bounds. Caller holds p.mu.
func (p *Pool) smallTarget(g int) int {
	target := max(p.releaseTarget(g), p.mappedHighWater(g)-g)
	if p.opts.ReleaseThreshold > 0 {
		target = min(target, p.opts.ReleaseThreshold-g)
	}
	if p.opts.MaxSize > 0 {
		target = min(target, p.opts.MaxSize-g)
	}
	return target
}

// smallInRanges serves a small request of st from the smallest free
// block of st's growable chunks that holds it, or reports false. Caller
// holds p.mu; a small chunk's growth would give memory back first, and
// the pool does not place by lifetime (the option does nothing there).
func (p *Pool) smallInRanges(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	st.lock()
	defer st.mu.Unlock()
	st.quickFlush()
	b := st.large.find(rounded)
	if b == nil {
		return 0, false
	}
	b = st.split(&st.large, b, rounded)
	st.markLive(b, size, p.slowOwner)
	p.wide.smallInRanges++
	return b.ptr, true
}
