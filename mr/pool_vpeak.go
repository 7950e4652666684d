// Small requests at a peak (PoolOptions.SmallAtPeak, off by default): over
// a Grower, a small request that would grow a small chunk and with it
// raise the pool's high-water mark of reserved bytes takes a free piece of
// its stream's growable chunks instead, memory that is mapped already.
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
// chunks as before. So does a pool over a Grower that refuses commits
// (ErrGrowBlocked, a Virtual without WaitForDecommits), which places
// without lifetimes too (pool_lifetime.go): there the layout depends on
// when the device completes decommits, and the rule took
// torch-train-gpt-b from 1.0308 to 1.0334 in the run measured.
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
// finds), or reports false. Caller holds
// p.mu, and the growth it replaces would raise the high-water mark.
func (p *Pool) smallAtPeak(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	if !p.opts.SmallAtPeak || st.life == nil || st.packHoles {
		return 0, false // off, over a refusing Grower, or packing holes
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
