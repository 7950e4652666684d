// Virtual memory in the backend interface: reserved address ranges,
// physical allocations, and the mappings between them.
//
// A VirtualMemory device separates address space from memory. A
// reservation (ReserveAddress) is a range of the device's virtual address
// space with nothing behind it; a physical allocation (CreatePhysical) is
// device memory with no address; Map puts all or part of an allocation at
// an address inside a reservation, and SetAccess makes a mapped range
// readable and writable by the device. Memory so mapped serves kernels,
// copies and sets like any other; a range may span several mappings, so a
// reservation grows by mapping more allocations at its end.
//
// The rules are the driver's (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease):
//   - every size, offset and address is a multiple of the minimum
//     granularity (Granularity), else ErrInvalidValue (from Map:
//     ErrNotSupported, as driver 580 answers an unaligned address or
//     offset);
//   - Map needs a range inside one reservation where nothing is mapped,
//     and an allocation at least offset+size long, else ErrNotSupported
//     (driver 580's answer to both);
//   - Unmap covers whole mappings, never part of one; it is not stream
//     ordered: work still queued that touches the range fails with
//     ErrIllegalAddress (on the card the fault poisons the context), so a
//     caller unmaps only after that work is known complete (an event);
//   - an access to a page of a reservation that is unmapped, or mapped
//     without SetAccess, is ErrIllegalAddress;
//   - ReleasePhysical may come while the allocation is mapped; its memory
//     is freed (and the device's capacity given back) when its last
//     mapping goes. Capacity counts physical allocations, never
//     reservations.
//
// VirtualMemory is an optional part of the interface: both backends
// implement it; VirtualMemoryOf says ErrNotSupported for a device that
// does not.
package gpu

import "fmt"

// Physical is a physical allocation (CUmemGenericAllocationHandle); 0 is
// never one.
type Physical uint64

// VirtualMemory is implemented by a Device that can reserve address
// ranges and map physical memory into them. All methods are safe for
// concurrent use.
type VirtualMemory interface {
	// Granularity is the minimum granularity of sizes, offsets and
	// addresses, or with recommended the driver's recommended one (a
	// multiple of the minimum).
	Granularity(recommended bool) (uint64, error)
	// ReserveAddress reserves size bytes of address space aligned to
	// alignment (0: the minimum granularity).
	ReserveAddress(size, alignment uint64) (DevicePtr, error)
	// FreeAddress frees a whole reservation, p and size as reserved. The
	// simulator demands that nothing is mapped in it any more.
	FreeAddress(p DevicePtr, size uint64) error
	// CreatePhysical makes a physical allocation of size bytes of device
	// memory; ErrOutOfMemory when the device has not that much free.
	CreatePhysical(size uint64) (Physical, error)
	// ReleasePhysical releases h; its memory is freed when no mapping of
	// it is left.
	ReleasePhysical(h Physical) error
	// Map maps size bytes of h from offset at p.
	Map(p DevicePtr, size uint64, h Physical, offset uint64) error
	// Unmap unmaps [p, p+size), which covers whole mappings.
	Unmap(p DevicePtr, size uint64) error
	// SetAccess makes the mapped range [p, p+size) readable and writable
	// by the device.
	SetAccess(p DevicePtr, size uint64) error
}

// VirtualMemoryOf returns dev's virtual-memory interface, or an error
// matching ErrNotSupported if it has none.
func VirtualMemoryOf(dev Device) (VirtualMemory, error) {
	if vm, ok := dev.(VirtualMemory); ok {
		return vm, nil
	}
	return nil, fmt.Errorf("gpu: device %T has no virtual memory: %w", dev, ErrNotSupported)
}
