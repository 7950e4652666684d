// Synchronous device memory (cuMemAlloc, cuMemFree, managed memory) and
// page-locked host memory.
//
// Capacity accounting: a cuMemAlloc or managed allocation charges its size
// rounded up to 256 bytes below 1 MiB (the card packs small allocations
// into shared 2 MiB pages) and to 2 MiB from 1 MiB up; a pool charges its
// mapped granules. MemGetInfo reports capacity minus the charges.
//
// cuMemFree synchronizes the device before unmapping (as the driver does),
// so no stream can still be using the memory. cuMemFreeAsync of cuMemAlloc
// memory unmaps it once the free operation has completed; the host notices
// at its next allocation, MemGetInfo or synchronization (reapLocked).
//
// MallocHost returns ordinary Go memory: "page-locked" only in the model.

package sim

import (
	"fmt"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

type allocKind uint8

const (
	allocMalloc allocKind = iota
	allocManaged
	allocPool
	allocGraph  // a graph's allocation node (graph.go)
	allocImport // memory of another process, imported (ipc.go)
)

// allocation is a live allocation, by address in Device.allocs.
type allocation struct {
	ptr, size uint64
	charge    uint64
	kind      allocKind
	seg       *segment // allocMalloc, allocManaged
	blk       *block   // allocPool
	freeOp    *op      // async free of cuMemAlloc memory, pending
	ga        *graphAlloc
	legacy    bool   // allocImport: opened with cuIpcOpenMemHandle, closed with cuIpcCloseMemHandle
	exportID  uint64 // allocMalloc: its number in exports.mems once exported, under exports.mu
}

func mallocCharge(size uint64) uint64 {
	if size < 1<<20 {
		return roundUp(size, align)
	}
	return roundUp(size, bigAlign)
}

// checkSize validates a requested size for call.
func (d *Device) checkSize(call string, size int) error {
	switch {
	case size < 0:
		return driverErrf(call, gpu.ErrInvalidValue, "negative size %d", size)
	case size == 0:
		return driverErrf(call, gpu.ErrInvalidValue, "size 0")
	case uint64(size) > d.capacity:
		return driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested, device capacity %d", size, d.capacity)
	}
	return nil
}

// mapLocked reserves charge bytes of capacity and size bytes of address
// space, and maps a segment there.
func (d *Device) mapLocked(call string, size, charge uint64) (*segment, error) {
	if d.committed+charge > d.capacity {
		return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested, %d of %d free", size, d.capacity-d.committed, d.capacity)
	}
	a := uint64(align)
	if size >= bigAlign {
		a = bigAlign
	}
	base, ok := d.va.alloc(roundUp(size, align), a)
	if !ok {
		return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested: address space exhausted", size)
	}
	d.committed += charge
	seg := newSegment(base, size)
	d.segs.add(seg)
	return seg, nil
}

// unmapLocked undoes mapLocked.
func (d *Device) unmapLocked(seg *segment, charge uint64) {
	d.segs.remove(seg)
	if seg.view != nil {
		d.importVA.release(seg.base, roundUp(seg.size, align))
		return
	}
	d.va.release(seg.base, roundUp(seg.size, align))
	d.committed -= charge
}

// reapLocked unmaps cuMemAlloc memory whose async free has completed, and
// releases the idle granules of destroyed pools.
func (d *Device) reapLocked() {
	kept := d.asyncFrees[:0]
	for _, a := range d.asyncFrees {
		if a.freeOp.s.doneSeq() >= a.freeOp.seq {
			d.unmapLocked(a.seg, a.charge)
		} else {
			kept = append(kept, a)
		}
	}
	clear(d.asyncFrees[len(kept):])
	d.asyncFrees = kept
	for _, p := range d.pools {
		if p.destroyed {
			p.releaseLocked(0, false)
		}
	}
	d.dropDestroyedPoolsLocked()
}

func (d *Device) malloc(op Op, size int, kind allocKind) (gpu.DevicePtr, error) {
	call := op.String()
	if err := d.inject(op); err != nil {
		return 0, err
	}
	if err := d.checkSize(call, size); err != nil {
		return 0, err
	}
	if err := d.unsafeCall(call); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	charge := mallocCharge(uint64(size))
	seg, err := d.mapLocked(call, uint64(size), charge)
	if err != nil {
		return 0, err
	}
	seg.peers = &d.mallocPeers
	if kind == allocManaged {
		seg.peers = &everyDevice
		seg.res = newResidency(seg.size)
	}
	d.allocs[seg.base] = &allocation{ptr: seg.base, size: uint64(size), charge: charge, kind: kind, seg: seg}
	return gpu.DevicePtr(seg.base), nil
}

// Malloc is cuMemAlloc.
func (d *Device) Malloc(size int) (gpu.DevicePtr, error) {
	return d.malloc(OpMalloc, size, allocMalloc)
}

// MallocManaged is cuMemAllocManaged; the simulator treats managed memory
// as device memory (free it with Free).
func (d *Device) MallocManaged(size int) (gpu.DevicePtr, error) {
	return d.malloc(OpMallocManaged, size, allocManaged)
}

// Free is cuMemFree: it waits for all work on the device, then frees p,
// which may come from Malloc, MallocManaged or a pool. An unknown pointer
// (or one freed already) returns an error matching gpu.ErrInvalidValue.
func (d *Device) Free(p gpu.DevicePtr) error {
	const call = "cuMemFree"
	if err := d.inject(OpFree); err != nil {
		return err
	}
	if err := d.unsafeCall(call); err != nil {
		return err
	}
	d.mu.Lock()
	a := d.allocs[uint64(p)]
	if a == nil || a.kind == allocGraph || a.legacy {
		d.mu.Unlock()
		return driverErrf(call, gpu.ErrInvalidValue, "%#x is not a live allocation of device %d", uint64(p), d.ordinal)
	}
	delete(d.allocs, uint64(p)) // claimed: a concurrent Free of p now fails
	d.mu.Unlock()
	a.unexport()

	// The driver synchronizes the device; sticky stream errors are the
	// streams' to report, the memory is freed regardless.
	_ = d.syncAll(call)

	d.mu.Lock()
	defer d.mu.Unlock()
	switch a.kind {
	case allocPool:
		a.blk.pool.freeBlockLocked(a.blk, nil)
	default:
		d.unmapLocked(a.seg, a.charge)
	}
	d.reapLocked()
	return nil
}

// MallocHost returns size bytes of (simulated) page-locked host memory.
func (d *Device) MallocHost(size int) ([]byte, error) {
	const call = "cuMemAllocHost"
	if err := d.inject(OpMallocHost); err != nil {
		return nil, err
	}
	if err := d.unsafeCall(call); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "negative size %d", size)
	}
	if size == 0 {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "size 0")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if uint64(size) > d.b.cfg.HostCapacity-d.pinned {
		return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes of page-locked memory requested, %d free", size, d.b.cfg.HostCapacity-d.pinned)
	}
	b := make([]byte, size)
	d.hostAllocs[unsafe.SliceData(b)] = size
	d.pinned += uint64(size)
	return b, nil
}

// FreeHost frees memory from MallocHost; anything else returns an error
// matching gpu.ErrInvalidValue.
func (d *Device) FreeHost(b []byte) error {
	const call = "cuMemFreeHost"
	if err := d.inject(OpFreeHost); err != nil {
		return err
	}
	if err := d.unsafeCall(call); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cap(b) == 0 {
		return driverErrf(call, gpu.ErrInvalidValue, "empty slice")
	}
	key := unsafe.SliceData(b)
	n, ok := d.hostAllocs[key]
	if !ok {
		return driverErrf(call, gpu.ErrInvalidValue, "%p is not page-locked memory of device %d", key, d.ordinal)
	}
	delete(d.hostAllocs, key)
	d.pinned -= uint64(n)
	return nil
}

// FreeAsync frees p in stream order: pool memory goes back to its pool,
// cuMemAlloc memory is unmapped once the free has run.
func (d *Device) FreeAsync(p gpu.DevicePtr, gs gpu.Stream) error {
	const call = "cuMemFreeAsync"
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if err := d.inject(OpFreeAsync); err != nil {
		return err
	}
	capturing := s.cs.capt.Load() != nil
	if !capturing {
		if err := d.unsafeCall(call); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if capturing {
		return d.captureFreeLocked(call, p, s)
	}
	a := d.allocs[uint64(p)]
	if a == nil || a.legacy {
		return driverErrf(call, gpu.ErrInvalidValue, "%#x is not a live allocation of device %d", uint64(p), d.ordinal)
	}
	if a.kind == allocGraph {
		return d.freeGraphAllocLocked(call, a, s)
	}
	delete(d.allocs, uint64(p))
	a.unexport()
	o := &op{kind: opFree, name: call}
	s.mu.Lock()
	s.enqueueLocked(o)
	s.mu.Unlock()
	if a.kind == allocPool {
		a.blk.pool.freeBlockLocked(a.blk, o)
	} else {
		a.freeOp = o
		d.asyncFrees = append(d.asyncFrees, a)
	}
	return nil
}

func (a *allocation) String() string { return fmt.Sprintf("allocation %#x+%d", a.ptr, a.size) }
