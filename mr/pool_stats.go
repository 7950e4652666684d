// What a Pool did: counters of how its requests were served and of what
// its slow paths cost, for tuning a pool to a workload and for seeing why
// it holds what it holds.
//
// The per-stream counters live in poolStream and change under its mutex,
// next to the work they count, so they cost the hot path an increment and
// no shared cache line; the pool-wide ones change under Pool.mu, on slow
// paths only. Stats adds them up under the same locks.

package mr

// PoolStats counts what a Pool did since it was made. Every counter only
// grows, except Chunks.
type PoolStats struct {
	// Allocations is the number of requests served (size 0 excluded).
	Allocations uint64 `json:"allocations"`
	// QuickHits is how many of them took a block from the quick cache:
	// one of the last blocks freed on their home stream, of the same size.
	QuickHits uint64 `json:"quick_hits"`
	// Frees is the number of blocks freed, and CrossStreamFrees how many
	// of them on another stream than the one that owns the block's chunk
	// (they wait as pending until the owner needs the memory).
	Frees            uint64 `json:"frees"`
	CrossStreamFrees uint64 `json:"cross_stream_frees"`
	// Waits is the number of event waits the pool enqueued so that a
	// stream could reuse memory freed on another: one per absorption of
	// another stream's pending blocks, per steal and per release of a
	// chunk with such blocks.
	Waits uint64 `json:"waits"`
	// Steals is the number of idle chunks one stream took from another.
	Steals uint64 `json:"steals"`
	// Growths and Releases count chunks allocated from and given back to
	// the upstream; Chunks is how many the pool holds now.
	Growths  uint64 `json:"growths"`
	Releases uint64 `json:"releases"`
	Chunks   int    `json:"chunks"`
	// BigSplits is how many big requests split a larger free block
	// instead of growing the pool (PoolOptions.SplitBig).
	BigSplits uint64 `json:"big_splits"`
	// GiantSplits is how many of those split a free block of a giant
	// chunk at the high-water mark (PoolOptions.SplitGiantAtMark).
	GiantSplits uint64 `json:"giant_splits"`
	// Over an upstream that grows in place (Grower, pool_vgrow.go):
	// InPlaceGrowths counts the commits of granules into a growable chunk
	// (a new growable chunk counts in Growths), Decommits the runs of
	// whole granules of free blocks given back from growable chunks, and
	// AddressSpace is the address space the growable chunks keep reserved
	// now, of which the mapped part is in Usage's Reserved.
	InPlaceGrowths uint64 `json:"in_place_growths"`
	Decommits      uint64 `json:"decommits"`
	AddressSpace   uint64 `json:"address_space_bytes"`
	// BorrowedSmall counts the small requests served, over a Grower,
	// from a free block of another stream's small chunk where their
	// stream would have grown a small chunk of its own (pool_vborrow.go).
	BorrowedSmall uint64 `json:"borrowed_small"`
	// SmallAtPeak counts the small requests served, over a Grower, from
	// a free block of their stream's growable chunks where a small chunk
	// would have raised the high-water mark of reserved bytes
	// (PoolOptions.SmallAtPeak, pool_vpeak.go).
	SmallAtPeak uint64 `json:"small_at_peak"`
}

// poolStreamStats are the counters of one stream, guarded by its mutex.
// Frees are not counted: a block stays in the live map of the stream that
// handed it out until it is freed (its chunk cannot move meanwhile), so a
// stream's frees are its allocations less its live blocks.
type poolStreamStats struct {
	allocs, quickHits, crossFrees, waits uint64
}

// poolWideStats are the counters of the slow paths, guarded by Pool.mu.
type poolWideStats struct {
	steals, growths, releases, bigSplits uint64
	giantSplits                          uint64
	inPlace, decommits, borrows          uint64
	smallInRuns                          uint64
}

// Stats returns the pool's counters. It takes the pool's lock and each
// stream's in turn, so it waits for a growth or a release in progress.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.forgotten // streams Release forgot, which held no block
	s := PoolStats{
		Steals:           p.wide.steals,
		Growths:          p.wide.growths,
		Releases:         p.wide.releases,
		BigSplits:        p.wide.bigSplits,
		GiantSplits:      p.wide.giantSplits,
		InPlaceGrowths:   p.wide.inPlace,
		Decommits:        p.wide.decommits,
		BorrowedSmall:    p.wide.borrows,
		SmallAtPeak:      p.wide.smallInRuns,
		AddressSpace:     p.addressSpace(),
		Chunks:           p.chunks.len(),
		Allocations:      f.allocs,
		QuickHits:        f.quickHits,
		Frees:            f.allocs,
		CrossStreamFrees: f.crossFrees,
		Waits:            f.waits,
	}
	for _, st := range p.streams.all() {
		st.lock()
		c := st.stats
		live := st.live.len()
		st.mu.Unlock()
		s.Allocations += c.allocs
		s.QuickHits += c.quickHits
		s.Frees += c.allocs - uint64(live)
		s.CrossStreamFrees += c.crossFrees
		s.Waits += c.waits
	}
	return s
}
