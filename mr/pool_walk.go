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
//
// Listing takes Pool.aux, a leaf lock, under the stream's own mutex; it
// happens on a stream's first change after being flushed or unlisted, so a
// stream busy with its own pairs takes it once. Each poolStream's dirty and
// cand flags are guarded by its mutex.
//
// Release forgets the state of every stream that holds nothing (no chunk,
// no pending or cached block), folding its counters into the pool's, so
// that a program that makes and destroys streams does not keep a state
// for each: the next request on such a stream makes a new one.

package mr

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
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
	if p.cands == nil {
		p.cands = make(map[*poolStream]struct{})
	}
	p.cands[st] = struct{}{}
	p.aux.Unlock()
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
	p := st.pool
	p.aux.Lock()
	delete(p.cands, st)
	if idle {
		if p.parked == nil {
			p.parked = make(map[*poolStream]struct{})
		}
		p.parked[st] = struct{}{}
	}
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
	delete(p.parked, st)
	if p.cands == nil {
		p.cands = make(map[*poolStream]struct{})
	}
	p.cands[st] = struct{}{}
	p.aux.Unlock()
}

// candidates returns the streams that may home an idle chunk a walker may
// take, in the order the pool first saw them: with force, the parked
// streams too; else, of them, only self, whose own walk takes its working
// chunks (releaseIdle). Caller holds p.mu.
func (p *Pool) candidates(force bool, self *poolStream) []*poolStream {
	p.aux.Lock()
	n := len(p.cands)
	if force {
		n += len(p.parked)
	}
	list := make([]*poolStream, 0, n)
	for st := range p.cands {
		list = append(list, st)
	}
	if force {
		for st := range p.parked {
			list = append(list, st)
		}
	} else if _, ok := p.parked[self]; ok && self != nil {
		list = append(list, self)
	}
	p.aux.Unlock()
	slices.SortFunc(list, func(a, b *poolStream) int { return cmp.Compare(a.seq, b.seq) })
	return list
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
			st.cand = false
			p.aux.Lock()
			delete(p.cands, st)
			p.aux.Unlock()
		}
		return true
	})
	return errors.Join(errs...)
}
