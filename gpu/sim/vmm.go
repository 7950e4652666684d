// Virtual memory: reservations, physical allocations and mappings
// (gpu.VirtualMemory), modelled on cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap and cuMemRelease.
//
// A reservation is a segment of the address space (memory.go) whose bytes
// are not its own: its vm table has one entry per granule, the physical
// page mapped and made accessible there, or nil. Lookups of a reservation
// check that every granule of the range has an entry, so a kernel, copy or
// set touching an unmapped or inaccessible page fails with
// gpu.ErrIllegalAddress, as on the card; an access may span granules of
// different physical allocations, as on the card. A physical allocation
// owns its pages (committed on first touch, like a segment's), so two
// mappings of one allocation see the same bytes, and memory survives an
// unmap and a map elsewhere.
//
// Capacity counts physical allocations, charged whole at CreatePhysical
// and given back when an allocation is released and its last granule
// unmapped; reservations cost only address space.
//
// Invariants (host state under Device.mu): a reservation's granule is
// mapped iff maps[i].h != nil; seg.vm[i] is non-nil iff granule i is mapped
// and accessible, and then points at the page of maps[i]; a physical
// allocation's mapped count is the number of granules of all reservations
// that map it. Workers read seg.vm as they read the segment index: without
// locks or happens-before edges.

package sim

import (
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// vmGranule is the simulator's allocation granularity, minimum and
// recommended: the card's 2 MiB large page, also the simulator's page.
const vmGranule = 1 << pageShift

var _ gpu.VirtualMemory = (*Device)(nil)

// vmState is a device's virtual-memory bookkeeping, under Device.mu.
type vmState struct {
	next gpu.Physical                // last handle made
	phys map[gpu.Physical]*physAlloc // live (not released, or still mapped)
	resv map[uint64]*reservation     // by base address
	maps uint64                      // mapping IDs handed out
}

// physAlloc is a physical allocation.
type physAlloc struct {
	h        gpu.Physical
	size     uint64
	pages    []atomic.Pointer[page] // one per granule, committed on touch
	mapped   int                    // granules mapped, over all reservations
	released bool
	// Sharing (vmmshare.go): the handle types it was created exportable
	// as, its entry in exports (0: never exported) and the file its POSIX
	// descriptors open; imported: the pages are another allocation's,
	// charged to the exporter's capacity, not this device's.
	handles  gpu.HandleType
	exportID uint64
	file     string
	imported bool
}

// reservation is a reserved range and what is mapped in it.
type reservation struct {
	seg  *segment
	maps []granuleMap // one per granule
}

// granuleMap is what is mapped at one granule of a reservation.
type granuleMap struct {
	h      *physAlloc // nil: unmapped
	idx    int        // granule of h
	id     uint64     // the Map call that mapped it; Unmap takes whole mappings
	access bool
}

// vmPage is a mapped, accessible granule as workers see it: the page slot
// of its physical allocation.
type vmPage struct{ slot *atomic.Pointer[page] }

func (d *Device) vmLocked() *vmState {
	if d.vm.phys == nil {
		d.vm.phys = make(map[gpu.Physical]*physAlloc)
		d.vm.resv = make(map[uint64]*reservation)
	}
	return &d.vm
}

// Granularity is 2 MiB, minimum and recommended.
func (d *Device) Granularity(recommended bool) (uint64, error) { return vmGranule, nil }

// vmAligned reports whether every value is a multiple of the granule.
func vmAligned(vs ...uint64) bool {
	for _, v := range vs {
		if v%vmGranule != 0 {
			return false
		}
	}
	return true
}

// ReserveAddress reserves size bytes of address space.
func (d *Device) ReserveAddress(size, alignment uint64) (gpu.DevicePtr, error) {
	const call = "cuMemAddressReserve"
	if size == 0 || !vmAligned(size) {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "size %d is not a positive multiple of the granularity %d", size, vmGranule)
	}
	if alignment&(alignment-1) != 0 {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "alignment %d is not a power of two", alignment)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	base, ok := d.va.alloc(size, max(alignment, vmGranule))
	if !ok {
		return 0, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes of address space requested: exhausted", size)
	}
	seg := &segment{base: base, size: size, vm: make([]atomic.Pointer[vmPage], size/vmGranule)}
	d.segs.add(seg)
	d.vmLocked().resv[base] = &reservation{seg: seg, maps: make([]granuleMap, size/vmGranule)}
	return gpu.DevicePtr(base), nil
}

// FreeAddress frees a whole reservation with nothing mapped in it.
func (d *Device) FreeAddress(p gpu.DevicePtr, size uint64) error {
	const call = "cuMemAddressFree"
	d.mu.Lock()
	defer d.mu.Unlock()
	vm := d.vmLocked()
	r := vm.resv[uint64(p)]
	if r == nil || r.seg.size != size {
		return driverErrf(call, gpu.ErrInvalidValue, "[%#x, +%d) is not a reservation", uint64(p), size)
	}
	for i := range r.maps {
		if r.maps[i].h != nil {
			return driverErrf(call, gpu.ErrInvalidValue, "reservation %#x still has %#x mapped", uint64(p), r.seg.base+uint64(i)*vmGranule)
		}
	}
	d.segs.remove(r.seg)
	d.va.release(r.seg.base, r.seg.size)
	delete(vm.resv, uint64(p))
	return nil
}

// CreatePhysical makes a physical allocation, charged to the capacity.
func (d *Device) CreatePhysical(size uint64) (gpu.Physical, error) {
	return d.createPhysical(size, gpu.HandleNone)
}

// createPhysical makes a physical allocation exportable as handles.
func (d *Device) createPhysical(size uint64, handles gpu.HandleType) (gpu.Physical, error) {
	const call = "cuMemCreate"
	if size == 0 || !vmAligned(size) {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "size %d is not a positive multiple of the granularity %d", size, vmGranule)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	if size > d.capacity || d.committed+size > d.capacity {
		return 0, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested, %d of %d free", size, d.capacity-min(d.committed, d.capacity), d.capacity)
	}
	vm := d.vmLocked()
	vm.next++
	a := &physAlloc{h: vm.next, size: size, pages: make([]atomic.Pointer[page], size/vmGranule), handles: handles}
	vm.phys[a.h] = a
	d.committed += size
	return a.h, nil
}

// ReleasePhysical releases h; its memory goes with its last mapping.
func (d *Device) ReleasePhysical(h gpu.Physical) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.vmLocked().phys[h]
	if a == nil || a.released {
		return driverErrf("cuMemRelease", gpu.ErrInvalidValue, "%d is not a live physical allocation", uint64(h))
	}
	a.released = true
	d.dropPhysLocked(a)
	return nil
}

// dropPhysLocked frees a once it is released and unmapped.
func (d *Device) dropPhysLocked(a *physAlloc) {
	if a.released && a.mapped == 0 {
		delete(d.vm.phys, a.h)
		if !a.imported {
			d.committed -= a.size
		}
		a.unexport()
	}
}

// rangeLocked returns the reservation holding [p, p+size) and the index
// of its first granule, after the checks every call on a range makes; a
// failed check is an error with code bad.
func (d *Device) rangeLocked(call string, bad gpu.Code, p gpu.DevicePtr, size uint64) (*reservation, int, error) {
	if size == 0 || !vmAligned(uint64(p), size) {
		return nil, 0, driverErrf(call, bad, "[%#x, +%d) is not granularity-aligned", uint64(p), size)
	}
	s := d.segs.find(uint64(p))
	if s == nil || s.vm == nil || uint64(p)+size < uint64(p) || uint64(p)+size > s.base+s.size {
		return nil, 0, driverErrf(call, bad, "[%#x, +%d) is not inside one reservation", uint64(p), size)
	}
	r := d.vmLocked().resv[s.base]
	if r == nil { // a driver pool's range (poolheap.go), not the program's
		return nil, 0, driverErrf(call, bad, "[%#x, +%d) is not inside one reservation", uint64(p), size)
	}
	return r, int((uint64(p) - s.base) / vmGranule), nil
}

// mappedLocked is rangeLocked for a call on mapped memory (ErrInvalidValue
// when a check fails), which also refuses a granule not mapped; it
// returns the reservation and the range's granules [first, end).
func (d *Device) mappedLocked(call string, p gpu.DevicePtr, size uint64) (r *reservation, first, end int, err error) {
	r, first, err = d.rangeLocked(call, gpu.ErrInvalidValue, p, size)
	if err != nil {
		return nil, 0, 0, err
	}
	end = first + int(size/vmGranule)
	for i := first; i < end; i++ {
		if r.maps[i].h == nil {
			return nil, 0, 0, driverErrf(call, gpu.ErrInvalidValue, "%#x is not mapped", r.seg.base+uint64(i)*vmGranule)
		}
	}
	return r, first, end, nil
}

// Map maps size bytes of h from offset at p. A range, offset or size the
// driver cannot map (unaligned, past the allocation's end, over a mapped
// granule) is ErrNotSupported, as driver 580 answers cuMemMap; a handle
// that is not a live allocation is ErrInvalidValue.
func (d *Device) Map(p gpu.DevicePtr, size uint64, h gpu.Physical, offset uint64) error {
	const call = "cuMemMap"
	d.mu.Lock()
	defer d.mu.Unlock()
	r, first, err := d.rangeLocked(call, gpu.ErrNotSupported, p, size)
	if err != nil {
		return err
	}
	vm := d.vmLocked()
	a := vm.phys[h]
	switch {
	case a == nil || a.released:
		return driverErrf(call, gpu.ErrInvalidValue, "%d is not a live physical allocation", uint64(h))
	case !vmAligned(offset) || offset > a.size || size > a.size-offset:
		return driverErrf(call, gpu.ErrNotSupported, "offset %d and size %d do not fit allocation %d of %d bytes", offset, size, uint64(h), a.size)
	}
	n := int(size / vmGranule)
	for i := first; i < first+n; i++ {
		if r.maps[i].h != nil {
			return driverErrf(call, gpu.ErrNotSupported, "%#x is already mapped", r.seg.base+uint64(i)*vmGranule)
		}
	}
	vm.maps++
	for k := range n {
		r.maps[first+k] = granuleMap{h: a, idx: int(offset/vmGranule) + k, id: vm.maps}
	}
	a.mapped += n
	return nil
}

// Unmap unmaps [p, p+size), whole mappings only. Work still queued that
// touches the range fails with ErrIllegalAddress when it runs.
func (d *Device) Unmap(p gpu.DevicePtr, size uint64) error {
	const call = "cuMemUnmap"
	d.mu.Lock()
	defer d.mu.Unlock()
	r, first, end, err := d.mappedLocked(call, p, size)
	if err != nil {
		return err
	}
	if first > 0 && r.maps[first-1].h != nil && r.maps[first-1].id == r.maps[first].id ||
		end < len(r.maps) && r.maps[end].h != nil && r.maps[end].id == r.maps[end-1].id {
		return driverErrf(call, gpu.ErrInvalidValue, "[%#x, +%d) cuts a mapping", uint64(p), size)
	}
	for i := first; i < end; i++ {
		a := r.maps[i].h
		r.maps[i] = granuleMap{}
		r.seg.publish(i, nil)
		a.mapped--
		d.dropPhysLocked(a)
	}
	return nil
}

// SetAccess makes the mapped range [p, p+size) accessible.
func (d *Device) SetAccess(p gpu.DevicePtr, size uint64) error {
	const call = "cuMemSetAccess"
	d.mu.Lock()
	defer d.mu.Unlock()
	r, first, end, err := d.mappedLocked(call, p, size)
	if err != nil {
		return err
	}
	for i := first; i < end; i++ {
		m := &r.maps[i]
		if !m.access {
			m.access = true
			r.seg.publish(i, &vmPage{slot: &m.h.pages[m.idx]})
		}
	}
	return nil
}

// publish sets what workers see at granule i of a reservation (host only,
// under Device.mu).
func (s *segment) publish(i int, v *vmPage) {
	raceDisable()
	s.vm[i].Store(v)
	raceEnable()
}

// accessible reports whether every granule of [off, off+n) of a
// reservation is mapped and accessible, n >= 1.
//
//go:norace
func (s *segment) accessible(off, n uint64) bool {
	raceDisable()
	defer raceEnable()
	for i := off / vmGranule; i <= (off+n-1)/vmGranule; i++ {
		if s.vm[i].Load() == nil {
			return false
		}
	}
	return true
}

// vmPiece is piece for a reservation: the bytes from off to the end of
// its granule, at most n, committing the physical page on first touch;
// nil if the granule is not mapped and accessible now.
//
//go:norace
func (s *segment) vmPiece(off, n uint64) []byte {
	i := off / vmGranule
	raceDisable()
	v := s.vm[i].Load()
	var pg *page
	if v != nil {
		pg = v.slot.Load()
		if pg == nil {
			np := &page{b: make([]byte, vmGranule)}
			if v.slot.CompareAndSwap(nil, np) {
				pg = np
			} else {
				pg = v.slot.Load()
			}
		}
	}
	raceEnable()
	if pg == nil {
		return nil
	}
	b := pg.b[off-i*vmGranule:]
	if uint64(len(b)) > n {
		b = b[:n]
	}
	return b
}
