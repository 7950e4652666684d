// The address range of a driver pool: one reserved range that the pool's
// blocks tile from its start, backed by device memory granule by granule.
//
// The card's pool is one contiguous range of addresses: a growth maps
// memory right after what the pool already holds, so a block may start in
// one growth and end in the next (pool.go gives the measurements). A heap
// models that: a reservation-like segment (memory.go, vmm.go) whose 2 MiB
// pages are mapped as the pool grows, whose blocks tile [base, base+end)
// in address order, and whose 32 MiB granules are given back one by one
// (only when no live block and no pending free touches them), so memory
// can be released from the middle of the range, as the driver does.
// Touching an unmapped page of a heap is an illegal address, as on the
// card.
//
// A heap's span (its addresses) is fixed when it is made; a pool that
// outgrows it starts a new heap, not contiguous with the last, so two
// blocks of different heaps never merge. The span is the device's
// capacity, capped at heapMaxSpan, so the address space holds many pools.
//
// Invariants (under Device.mu): the blocks of a heap tile [base, base+end)
// without gaps, first to last by address; end is a multiple of
// poolGranule; a page is mapped iff seg.vm's entry for it is non-nil, and
// every page under a live block is mapped; the pool's reserved bytes are
// its heaps' mapped pages times vmGranule, and the device's committed
// bytes include them.

package sim

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	// poolGranule is what a pool grows by, and the unit in which it gives
	// memory back: requests are rounded up to it.
	poolGranule = 32 << 20
	// poolAlign is the spacing of a pool's blocks: requests are rounded
	// up to it (the card spaces 1-byte to 512-byte blocks 512 bytes
	// apart and 513-byte ones 1024).
	poolAlign = 512
	// heapMaxSpan caps a heap's addresses.
	heapMaxSpan = 16 << 30
)

// heap is one reserved range of a pool.
type heap struct {
	seg         *segment
	pages       []atomic.Pointer[page] // backing of each 2 MiB page, committed on touch
	mapped      int                    // pages mapped
	end         uint64                 // blocks tile [seg.base, seg.base+end)
	first, last *block
}

// newHeapLocked reserves the addresses of a heap that can hold at least
// need bytes.
func (p *memPool) newHeapLocked(call string, need uint64) (*heap, error) {
	d := p.dev
	span := min(roundUp(d.capacity, poolGranule), heapMaxSpan)
	span = max(span, roundUp(need, poolGranule))
	base, ok := d.va.alloc(span, poolGranule)
	if !ok && span > roundUp(need, poolGranule) {
		span = roundUp(need, poolGranule)
		base, ok = d.va.alloc(span, poolGranule)
	}
	if !ok {
		return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested: address space exhausted", need)
	}
	seg := &segment{base: base, size: span, vm: make([]atomic.Pointer[vmPage], span/vmGranule)}
	if p.managed {
		seg.res = newResidency(span)
	}
	seg.peers = &p.peers
	d.segs.add(seg)
	h := &heap{seg: seg, pages: make([]atomic.Pointer[page], span/vmGranule)}
	p.heaps = append(p.heaps, h)
	return h, nil
}

// refuseNewHeapLocked fails a growth into a new heap that the device
// cannot hold even with every idle granule reclaimLocked may move given
// back, before any address is reserved: reserving a device-sized heap,
// indexing its segment and dropping it again cost O(capacity) for each
// refused growth, which a full device answering one refusal per request
// made quadratic. Its effects are those of the growth it spares:
// extendLocked maps the new heap up to the granule past need (want bytes),
// giving back idle granules first, and near capacity tries again up to
// the page past need (least bytes), so a refused growth still unmapped
// every idle granule the allocating stream may reuse, and still hands
// their frees to rq. A growth that may succeed, or that finds no
// addresses (newHeapLocked's own error), returns nil and changes nothing.
func (p *memPool) refuseNewHeapLocked(call string, rq *mapFor, need uint64) error {
	d := p.dev
	want, least := roundUp(need, poolGranule), roundUp(need, vmGranule)
	if d.committed+least <= d.capacity {
		return nil
	}
	if !d.va.fits(want, poolGranule) { // newHeapLocked's smallest span
		return nil
	}
	idle := p.reclaimableLocked(rq.s, want)
	if idle >= want || d.committed-idle+least <= d.capacity {
		return nil
	}
	p.reclaimLocked(rq, nil, 0, 0, want)
	return driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested, %d of %d free", least, d.capacity-d.committed, d.capacity)
}

// reclaimableLocked is what reclaimLocked would give back for stream s,
// with nothing excluded, counted until it reaches want bytes.
func (p *memPool) reclaimableLocked(s *stream, want uint64) uint64 {
	var got uint64
	for _, c := range p.idleGranules(false) {
		if got >= want {
			break
		}
		if ok, w, _ := p.usable(c.b, s); !ok || len(w) > 0 {
			continue
		}
		got += uint64(poolGranule/vmGranule-c.h.unmappedIn(c.g*poolGranule, (c.g+1)*poolGranule)) * vmGranule
	}
	return got
}

// dropHeapLocked gives a heap's addresses back; nothing may be mapped.
func (p *memPool) dropHeapLocked(h *heap) {
	p.dev.segs.remove(h.seg)
	p.dev.va.release(h.seg.base, h.seg.size)
}

// unmappedIn counts the unmapped pages of [lo, hi), offsets in h.
func (h *heap) unmappedIn(lo, hi uint64) int {
	n := 0
	for i := lo / vmGranule; i < (hi+vmGranule-1)/vmGranule; i++ {
		if h.seg.vm[i].Load() == nil {
			n++
		}
	}
	return n
}

// mapFor is the allocation a mapping serves: its stream, and the frees
// the allocation must acquire because the memory reclaimLocked moved for
// it was freed on other streams.
type mapFor struct {
	s   *stream
	acq []*op
}

// mapLocked maps every unmapped page of the granules that [lo, hi)
// (offsets in h) touches, up to the end of h's range. It first gives back
// as many idle granules elsewhere in the pool as it maps (reclaimLocked),
// so a growth moves memory the pool holds idle rather than take more. If
// the device cannot hold the pages, it maps none.
func (p *memPool) mapLocked(call string, rq *mapFor, h *heap, lo, hi uint64) error {
	d := p.dev
	lo, hi = lo/poolGranule*poolGranule, min(roundUp(hi, poolGranule), max(h.end, roundUp(hi, vmGranule)))
	n := uint64(h.unmappedIn(lo, hi))
	if n == 0 {
		return nil
	}
	p.reclaimLocked(rq, h, lo, hi, n*vmGranule)
	if d.committed+n*vmGranule > d.capacity {
		return driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested, %d of %d free", n*vmGranule, d.capacity-d.committed, d.capacity)
	}
	for i := lo / vmGranule; i < (hi+vmGranule-1)/vmGranule; i++ {
		if h.seg.vm[i].Load() == nil {
			h.seg.publish(int(i), &vmPage{slot: &h.pages[i]})
		}
	}
	d.committed += n * vmGranule
	h.mapped += int(n)
	p.reserved += n * vmGranule
	p.reservedHigh = max(p.reservedHigh, p.reserved)
	return nil
}

// reclaimLocked gives back idle granules of the pool (idleGranules),
// the highest first, except those of [lo, hi) in h, until want bytes were
// given back or none is left. Only memory that rq's stream may reuse
// without an inserted wait moves (the reuse policies hold for moved memory
// as for blocks); the frees it must be ordered after go to rq.acq.
func (p *memPool) reclaimLocked(rq *mapFor, h *heap, lo, hi, want uint64) {
	var got uint64
	for _, c := range p.idleGranules(false) {
		if got >= want {
			return
		}
		if c.h == h && c.g*poolGranule < hi && (c.g+1)*poolGranule > lo {
			continue
		}
		ok, w, a := p.usable(c.b, rq.s)
		if !ok || len(w) > 0 {
			continue
		}
		rq.acq = append(rq.acq, a...)
		got += p.unmapGranuleLocked(c.h, c.g)
	}
}

// granuleRef names granule g of heap h, inside free block b.
type granuleRef struct {
	h *heap
	g uint64
	b *block
}

// idleGranules lists the mapped granules that one free block covers (up
// to the end of its heap's range) whose frees the pool processed and
// which have completed, and, if seen, of which the host has seen one
// complete; the highest addresses first.
func (p *memPool) idleGranules(seen bool) []granuleRef {
	var out []granuleRef
	b, gen := p.dev.b, p.dev.b.hostGen.Load()
	for x := p.free; x != nil; x = x.fnext {
		if x.pending || !x.settled() || seen && !x.seenComplete(b, gen) {
			continue
		}
		h := x.heap
		lo, hi := x.addr-h.seg.base, x.addr-h.seg.base+x.size
		for g := roundUp(lo, poolGranule) / poolGranule; g*poolGranule < hi && min((g+1)*poolGranule, h.end) <= hi; g++ {
			if h.granuleMapped(g) {
				out = append(out, granuleRef{h, g, x})
			}
		}
	}
	slices.SortFunc(out, func(a, b granuleRef) int {
		return cmp.Compare(b.h.seg.base+b.g*poolGranule, a.h.seg.base+a.g*poolGranule)
	})
	return out
}

// unmapGranuleLocked unmaps the pages of granule g of h and drops their
// bytes, returning how many bytes it gave back.
func (p *memPool) unmapGranuleLocked(h *heap, g uint64) uint64 {
	var n uint64
	raceDisable()
	for i := g * poolGranule / vmGranule; i < (g+1)*poolGranule/vmGranule; i++ {
		if h.seg.vm[i].Load() != nil {
			h.seg.vm[i].Store(nil)
			h.pages[i].Store(nil)
			n++
		}
	}
	raceEnable()
	h.mapped -= int(n)
	p.dev.committed -= n * vmGranule
	p.reserved -= n * vmGranule
	return n * vmGranule
}

// granuleMapped reports whether any page of granule g of h is mapped.
func (h *heap) granuleMapped(g uint64) bool {
	return h.unmappedIn(g*poolGranule, (g+1)*poolGranule) < poolGranule/vmGranule
}
