// A margin above the peak for a Pool that grows in place
// (PoolOptions.MappedSlack): memory that moves within the peak stays
// mapped.
//
// Over a Grower the pool decommits free granules before a commit that
// would raise its high-water mark of mapped bytes (pool_vgrow.go), so at
// its peak it maps little more than its live blocks. In a training loop
// that is also its cost: a step's tensors do not lie where the last
// step's did, so a request finds the free granules it needs mapped at
// other addresses than the run it must be contiguous in, and the pool
// decommits there and commits here, in every step, at the same peak.
// Replaying the ResNet-50 training recorded through the C ABI on an H100
// (pluggable/testdata), the pool over Virtual made 5-7 commits and 10-16
// decommits a steady step, each commit of 1 to 19 granules below the peak
// of live bytes; on the card, 73 commits and 123 decommits in 12 steps,
// a driver call or more per granule each, where the default pool makes
// none.
//
// So the rule has a margin: before a commit of n bytes the pool keeps
// its mapped bytes at most max(high-water mark, peak used + margin),
// where peak used is the high-water mark of bytes handed out. The margin
// starts at zero and grows by n whenever the commit would otherwise
// decommit although the pool's used bytes stay below their peak with the
// request (the memory moves within the peak; it does not add to it), and
// n is not above the cap, MappedSlack times the peak of used bytes (a
// margin the cap cannot cover would not spare the decommit, and a large
// growth early in a run would spend the margin on one commit). It never
// exceeds the cap, and only grows: ResetPeaks leaves it, as the layout it
// pays for does not change with the peaks. A workload that never moves
// memory keeps a margin of zero and the pool's peaks of before; one that
// does maps at most the cap above its peak of used bytes (and the
// granule rounding of its blocks), once, and stops paying the commits.
//
// With MappedSlack 0.01 the replayed ResNet-50 training settles at 0
// commits and 0 decommits a steady step, at 1.009-1.010 of peak live
// where it reached 1.018-1.028 without (the decommits' own placement
// raised the peak step by step), and on the H100 at 0 device calls in 12
// timed steps and 1.010 of peak allocated (1.024 without); GPT-2, whose
// moving tensors are larger than the cap, is left as it was (1.005-1.006
// replayed, 1.006 on the card). BENCHMARKS.md, "A margin against moving
// memory".
//
// Invariant, under Pool.mu: 0 <= margin <= MappedSlack times the largest
// peak of used bytes the pool has seen.

package mr

// mappedHighWater is what the pool may map after a commit of n bytes
// over a Grower: its high-water mark of reserved bytes, or its peak of
// used bytes and the margin, whichever is higher. It grows the margin
// when the commit moves memory within the peak. Caller holds p.mu.
func (p *Pool) mappedHighWater(n int) int {
	hw := int(p.usage.peakReserved.Load())
	if p.opts.MappedSlack <= 0 {
		return hw
	}
	p.flushDirty()
	peak := int(p.usage.peakUsed.Load())
	limit := int(float64(peak) * p.opts.MappedSlack)
	margin := min(p.margin, limit)
	if int(p.usage.reserved.Load()) > max(hw, peak+margin)-n && int(p.usedSum.Load())+n < peak && n <= limit {
		p.margin = max(p.margin, min(p.margin+n, limit))
		margin = min(p.margin, limit)
	}
	return max(hw, peak+margin)
}
