// Small requests at a peak (PoolOptions.SmallAtPeak, off in the options'
// zero value, set by the registry's pool_vmm): over a Grower, a small
// request that would grow a small chunk and with it raise the pool's
// high-water mark takes a free piece of its stream's growable chunks
// instead, memory that is mapped already. Over a Grower that never
// refuses a commit the rule acts once the release before the growth
// could not keep it under the mark; over one that refuses commits it
// acts before that release, so that a small chunk's growth never gives
// memory back first.
//
// Over the Grower that never refuses a commit.
//
// Over a Grower the pool decommits the whole free granules of its
// growable chunks before a growth that would raise its high-water mark
// (pool_vgrow.go), so at such a moment every free byte left in them lies
// in a granule that a live neighbour keeps mapped: a piece at the end of
// a run of live blocks, or between two of them. A new small chunk there
// maps 2 MiB more for a request of at most 256 KiB, and raises the peak by
// that granule; a piece of those runs holds the request at no cost in
// mapped memory, now or at a later peak. So when a small request reaches
// grow (its stream's lists, a steal and a borrow, pool_vborrow.go, could
// not serve it) and the release before the growth could not bring the
// reserved bytes under the mark, the request takes a good fit among the
// free blocks of its stream's growable chunks, long or short-lived
// (pool_lifetime.go): in each, the tlsf's first block of the smallest
// size class that surely holds it, and of the two the smaller, cut
// from the block's start. At any other
// moment a small chunk costs no peak and grows as before, and so does
// the stream's first small chunk if its ranges have no free piece.
//
// Replaying the thirteen recorded traces (BENCHMARKS.md, "Small requests
// at a peak"), the rule takes cupy-cycle from 1.0333 of peak live to
// 1.0285, cuda-graph from 1.0309 to 1.0253 and torch-train-gpt-b from
// 1.0308 to 1.0295, and both ResNet-50 traces and GPT-2 through the C ABI
// lower; oom-h100 holds two granules of 9 GiB more (1.0009 to 1.0013): in
// the growth of its first step it places 74 small parameters in the runs
// where the default grows one small chunk, and its layout 9 GiB of
// requests later differs by two granules (with the rule for all but the
// last of those 74, or from the 64th on only, it gives 1.0009). Taking
// the largest piece, the piece's end, the lowest or the highest address
// instead of the good fit leaves oom at 1.0013; bounded to a
// stream's first 16 or 64 such requests oom keeps 1.0009 but cupy-cycle
// and cuda-graph, or torch-train-gpt-b (1.0360), stay above 1.03; only
// after the pool's first decommit oom is at 1.0013 and cuda-graph and
// torch-train-gpt-b above 1.03. A rule that trades one trace for others
// is not the default, hence the option. With PoolOptions.PackHoles, whose
// holes are filled by requests of more than the small classes, the same
// rule raised torch-train-gpt-b from 1.0281 to 1.0334 and resnet50-amp
// from 1.0050 to 1.0070, so a pool that packs holes grows its small
// chunks as before, unless it keeps the pair's block in the quick cache
// (PoolOptions.HolesKeepPair, pool_vpair.go), where the two together
// measured better than either alone.
//
// Over a Grower that refuses commits (ErrGrowBlocked, a Virtual without
// WaitForDecommits), where the pool places without lifetimes.
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
// There, with the option, such a request takes a good fit among the free
// blocks of its stream's growable chunks, before any release: memory
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
// default, hence the option. The same rule before the release over the
// Grower that never refuses, where the pool places by lifetime
// (pool_lifetime.go), put small requests in its long-lived range and
// raised the pipeline there from 1.0014 to 1.0058 and oom-h100 from
// 1.0009 to 1.0015: hence, there, the rule after the release above.
//
//
// It runs on the growth path only (under Pool.mu, where the growth would
// have run), so a request served from the stream's lists costs what it
// did; a stream whose small chunks are full at a peak takes this path for
// each small request until one of them frees room or a growth no longer
// raises the mark (tens of requests per replayed trace, at most 120).
//
// Invariants: the block handed out is a block of a growable chunk homed
// at the requesting stream, live there like any block of it (freed, it
// is filed in the index of its chunk, binsOf); poolWideStats.smallInRuns
// counts such requests, under Pool.mu.

package mr

import "github.com/streamalloc/streamalloc/gpu"

// smallAtPeak serves a small request of st from a good fit among the
// free blocks of st's growable chunks (the smaller of the two tlsfs'
// finds; without lifetimes the short one is empty), or reports false.
// Caller holds p.mu, and the growth it replaces would raise the
// high-water mark (after the release over a Grower placing by lifetime,
// before it over a refusing one, smallTarget).
func (p *Pool) smallAtPeak(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	if !p.opts.SmallAtPeak || st.packHoles && !st.keepPair {
		return 0, false // off, or packing holes with the quick cache off (pool_vpair.go)
	}
	st.lock()
	defer st.mu.Unlock()
	st.quickFlush()
	t, b := &st.large, st.large.find(rounded)
	if s := st.largeShort.find(rounded); s != nil && (b == nil || s.size < b.size) {
		t, b = &st.largeShort, s
	}
	if b == nil {
		return 0, false
	}
	b = st.split(t, b, rounded)
	st.markLive(b, size, p.slowOwner)
	p.wide.smallInRuns++
	return b.ptr, true
}

// smallTarget is releaseTarget for a small chunk's growth of g bytes with
// SmallAtPeak over a refusing Grower: the high-water mark of mapped bytes a commit of g bytes
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
