// Which streams a Pool's slow paths visit: the cost of many streams.
//
// A pool may serve tens of thousands of streams. Three things used to look
// at every one of them, each call: Usage (summing each stream's used
// bytes), and steal and releaseIdle (flushing each stream's quick cache and
// scanning its chunks for an idle one). A replay that reads Usage after
// every event, or a program whose streams each grow once, then costs
// O(streams) per operation, quadratic in all. Each now visits only the
// streams that can matter, listed by the streams themselves on their hot
// path when they first can:
//
//   - dirty: streams whose unflushed change of used bytes is not zero (the
//     pool-wide total, usedSum, lacks it). Usage flushes them and empties
//     the list; a stream lists itself again at its next change. The
//     invariant is unflushed != 0 implies listed, so after Usage flushed
//     the list, usedSum is the sum of every stream's used bytes.
//   - cands: streams that may home a chunk with no live block, the only
//     chunks steal and releaseIdle can take (after flushing the quick
//     cache, whose blocks are not live). A stream lists itself when one of
//     its chunks' live count drops to 0 and when it is given a chunk with
//     none; a walker that finds no such chunk at a listed stream unlists
//     it. The invariant is a chunk with live == 0 has a listed home.
//     Walkers visit the listed streams in the order the pool first saw
//     them, as they visited every stream before, so a replay decides the
//     same way on every run.
//   - parked: listed streams whose chunks with no live block are all
//     their working chunks or growable ones, which an unforced steal or
//     release of another stream never takes. A stream that allocated and
//     freed once keeps its working chunk so, and with many such streams
//     every slow-path allocation visited them all. A walker that finds a
//     stream so parks it; unforced walks skip parked streams (but the
//     requester's own release, which takes its working chunks), forced
//     ones visit them. Any change to a parked stream's chunks or working
//     chunks is made under its mutex, taken with lock, which lists it
//     again (unpark), so skipping it changes no decision. cand stays set
//     while parked: the invariant above holds over both sets.
//
// Both sets are trees ordered by seq (pool_candtree.go): a walker steps
// to the next stream after the one it visited, O(log n) a step, instead
// of sorting every listed stream at each walk.
//
// Listing takes Pool.aux, a leaf lock, under the stream's own mutex; it
// happens on a stream's first change after being flushed or unlisted, so a
// stream busy with its own pairs takes it once. Each poolStream's dirty,
// cand and parked flags are guarded by its mutex, its tree and links by
// Pool.aux.
//
// Release forgets the state of every stream that holds nothing (no chunk,
// no pending or cached block), folding its counters into the pool's, so
// that a program that makes and destroys streams does not keep a state
// for each: the next request on such a stream makes a new one.

package mr

import (
	"errors"
	"fmt"
)

// markDirty lists st as having an unflushed change. Caller holds st.mu.
//
//go:noinline
func (st *poolStream) markDirty() {
	st.dirty = true
	p := st.pool
	p.aux.Lock()
	p.dirty = append(p.dirty, st)
	p.aux.Unlock()
}

// flushDirty adds every listed stream's unflushed change to usedSum and
// empties the list.
func (p *Pool) flushDirty() {
	p.aux.Lock()
	list := p.dirty
	p.dirty = nil
	p.aux.Unlock()
	for _, st := range list {
		st.lock()
		if st.unflushed != 0 {
			p.flushUsed(st.unflushed)
			st.unflushed = 0
		}
		st.dirty = false
		st.mu.Unlock()
	}
}

// markCand lists st as a stream that may home an idle chunk. Caller holds
// st.mu.
//
//go:noinline
func (st *poolStream) markCand() {
	st.cand = true
	p := st.pool
	p.aux.Lock()
	p.moveTo(st, treeCands)
	p.aux.Unlock()
}

// moveTo lists st in tree (treeNone: in none). Caller holds p.aux.
func (p *Pool) moveTo(st *poolStream, tree uint8) {
	if st.tree == tree {
		return
	}
	switch st.tree {
	case treeCands:
		p.cands.remove(st)
	case treeParked:
		p.parked.remove(st)
	}
	switch tree {
	case treeCands:
		p.cands.insert(st)
	case treeParked:
		p.parked.insert(st)
	}
	st.tree = tree
}

// sortCand files st, which a walker just visited, by what its chunks
// without live blocks offer: none, it is unlisted; only its working chunks
// or growable ones, which no walker but a forced one or st's own takes, it
// is parked; else it stays listed. Caller holds st.mu, and has flushed
// its quick cache.
func (st *poolStream) sortCand() {
	idle, park := false, true
	for _, c := range st.homed {
		if c.live == 0 {
			idle = true
			if !st.isWorking(c) && c.limit == 0 {
				park = false
				break
			}
		}
	}
	if idle && !park {
		return
	}
	tree := treeNone
	if idle {
		tree = treeParked
	}
	p := st.pool
	p.aux.Lock()
	p.moveTo(st, tree)
	p.aux.Unlock()
	st.cand, st.parked = idle, idle
}

// unpark lists the parked stream st for every walker again: its state may
// change now. Caller holds st.mu.
//
//go:noinline
func (st *poolStream) unpark() {
	st.parked = false
	p := st.pool
	p.aux.Lock()
	p.moveTo(st, treeCands)
	p.aux.Unlock()
}

// nextCand returns the stream a walker visits after the one numbered
// after (0: the first), in the order the pool first saw them, among those
// that may home an idle chunk the walker may take: the listed ones; with
// force, the parked ones too; else, of them, only self, whose own
// releaseIdle takes its working chunks. Each step looks the next one up,
// so a walk that stops early costs O(log n) a step, and a walk sees the
// streams listed or unlisted while it runs. Caller holds p.mu.
func (p *Pool) nextCand(after uint64, force bool, self *poolStream) *poolStream {
	p.aux.Lock()
	defer p.aux.Unlock()
	next := p.cands.next(after)
	var parked *poolStream
	if force {
		parked = p.parked.next(after)
	} else if self != nil && self.tree == treeParked && self.seq > after {
		parked = self
	}
	if next == nil || (parked != nil && parked.seq < next.seq) {
		return parked
	}
	return next
}

// forgetEmptyStreams drops the state of every stream that holds nothing,
// keeping its counters in the pool's. A state whose cached events cannot
// all be destroyed is kept, with the events that remain, and the error
// returned. Caller holds p.mu.
func (p *Pool) forgetEmptyStreams() error {
	var errs []error
	p.streams.dropIf(func(st *poolStream) bool {
		st.lock()
		defer st.mu.Unlock()
		st.quickFlush()
		if len(st.homed) > 0 || st.pendingBytes > 0 || len(st.pendingLists) > 0 || st.live.len() > 0 {
			return false
		}
		kept := st.events[:0]
		for _, e := range st.events {
			if err := e.Destroy(); err != nil {
				errs = append(errs, fmt.Errorf("pool: release: %w", err))
				kept = append(kept, e)
			}
		}
		clear(st.events[len(kept):])
		st.events = kept
		if len(kept) > 0 {
			return false
		}
		st.dropped = true
		if st.unflushed != 0 {
			p.flushUsed(st.unflushed)
			st.unflushed = 0
		}
		p.forgotten.allocs += st.stats.allocs
		p.forgotten.quickHits += st.stats.quickHits
		p.forgotten.crossFrees += st.stats.crossFrees
		p.forgotten.waits += st.stats.waits
		st.stats = poolStreamStats{}
		if st.cand {
			st.cand, st.parked = false, false
			p.aux.Lock()
			p.moveTo(st, treeNone)
			p.aux.Unlock()
		}
		return true
	})
	p.forgetLF()
	return errors.Join(errs...)
}
