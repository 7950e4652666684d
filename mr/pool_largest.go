// The largest free block of a Pool, for its out-of-memory errors, at a
// cost that does not grow with the number of streams.
//
// An OutOfMemoryError names the pool's largest free or cached block. A pool
// of tens of thousands of streams at a full device refuses request after
// request, and finding that block by visiting every stream (each its own
// lists, each a few cache misses) made each refusal O(streams): 100,000
// streams of a generated trace took 297 s, nearly all of it there. So each
// stream's largest block is kept in a max-heap of streams (lfHeap, keyed by
// lf), and a refusal refreshes only the streams that may have changed
// since they were filed.
//
// Which streams those are. A stream's free and cached blocks change only
// under its mutex (the fast slot toggles a block between cached and live
// without it, but a slot is armed and settled only under the mutex, and
// the refresh settles it), and every holder of the mutex takes it with
// lock, which lists the stream in lfStale the first time after a refresh
// (lfStale flag under the mutex, the list under Pool.aux). The refresh
// takes the list, and for each stream, under its mutex, reads its largest
// block from its indexes (tlsf.largest and the quick cache, O(1) for all
// but the top size class) and clears the flag before unlocking; the heap
// is under Pool.mu.
//
// Invariants: a stream not listed in lfStale is in lfHeap at lfAt-1 with
// lf its largest free or cached block, or has lfAt 0 and none; the list
// holds each stream once. Release drops forgotten streams from both.

package mr

import "container/heap"

// markLFStale lists st as changed since its largest block was filed.
// Caller holds st.mu.
//
//go:noinline
func (st *poolStream) markLFStale() {
	st.lfStale = true
	p := st.pool
	p.aux.Lock()
	p.lfStale = append(p.lfStale, st)
	p.aux.Unlock()
}

// largestFreeLocked is the pool's largest free or cached block, for an
// out-of-memory error. Caller holds p.mu.
func (p *Pool) largestFreeLocked() uint64 {
	p.aux.Lock()
	list := p.lfStale
	p.lfStale = nil
	p.aux.Unlock()
	h := (*lfHeap)(&p.lfHeap)
	for _, st := range list {
		st.lock()
		v := 0
		if !st.dropped {
			v = max(st.small.largest(), st.large.largest(), st.largeShort.largest())
			for _, b := range st.quick[:st.nquick] {
				v = max(v, b.size)
			}
		}
		st.lfStale = false
		st.mu.Unlock()
		switch {
		case v == 0 && st.lfAt > 0:
			heap.Remove(h, st.lfAt-1)
		case v > 0 && st.lfAt > 0:
			st.lf = v
			heap.Fix(h, st.lfAt-1)
		case v > 0:
			st.lf = v
			heap.Push(h, st)
		}
	}
	if len(p.lfHeap) == 0 {
		return 0
	}
	return uint64(p.lfHeap[0].lf)
}

// forgetLF drops forgotten streams from the heap and the list. Caller
// holds p.mu, and not p.aux.
func (p *Pool) forgetLF() {
	h := (*lfHeap)(&p.lfHeap)
	p.aux.Lock()
	kept := p.lfStale[:0]
	for _, st := range p.lfStale {
		if !st.dropped {
			kept = append(kept, st)
		}
	}
	clear(p.lfStale[len(kept):])
	p.lfStale = kept
	p.aux.Unlock()
	for i := 0; i < len(p.lfHeap); {
		if st := p.lfHeap[i]; st.dropped {
			heap.Remove(h, i)
			continue
		}
		i++
	}
}

// lfHeap orders streams by their largest block, the largest first.
type lfHeap []*poolStream

func (h lfHeap) Len() int           { return len(h) }
func (h lfHeap) Less(i, j int) bool { return h[i].lf > h[j].lf }
func (h lfHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lfAt, h[j].lfAt = i+1, j+1
}
func (h *lfHeap) Push(x any) {
	st := x.(*poolStream)
	st.lfAt = len(*h) + 1
	*h = append(*h, st)
}
func (h *lfHeap) Pop() any {
	old := *h
	st := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	st.lfAt = 0
	return st
}
