// The virtual-memory wing: reserved address ranges, physical allocations
// and their mappings (cuMemAddressReserve, cuMemCreate, cuMemMap, ...).
//
// A reservation is a range of the context's virtual address space with no
// memory behind it. MemCreate makes a physical allocation of pinned device
// memory (a MemHandle, exported as no handle type); MemMap maps all or part
// of it at an address of a reservation, and MemSetAccess makes the mapped
// range readable and writable by a device. Only then may kernels and
// copies touch it; an access to an unmapped or inaccessible page faults on
// the card (CUDA_ERROR_ILLEGAL_ADDRESS, which poisons the context).
//
// Sizes, offsets and addresses are multiples of the allocation
// granularity (MemAllocationGranularity). MemUnmap unmaps whole mappings
// only, and is not stream-ordered: work still queued that touches the
// range faults, so callers unmap after that work is known complete.
// MemRelease may be called while the allocation is mapped; its memory is
// freed when the last mapping goes.
//
// Sharing (cuMemExportToShareableHandle, cuMemImportFromShareableHandle):
// an allocation made with MemCreateExportable is exported as one of the
// handle types it was created with, a POSIX file descriptor (a new one,
// the caller's to close once sent) or a 64-byte fabric handle; another
// process imports it as a MemHandle of its own (an fd import leaves the
// descriptor open), maps it, sets access and releases it like any other.
// Which types a device offers: AttrHandleTypePOSIXSupported and
// AttrHandleTypeFabricSupported. The memory lives until every process has
// released its handle and unmapped it.

package cuda

// MemHandle is a CUmemGenericAllocationHandle: one physical allocation.
type MemHandle uint64

// GranularityOption is a CUmemAllocationGranularity_flags value.
type GranularityOption int32

// Granularity options (cuda.h's values).
const (
	// GranularityMinimum is the granularity every size, offset and
	// address must be a multiple of.
	GranularityMinimum GranularityOption = 0
	// GranularityRecommended is the granularity the driver recommends
	// for performance.
	GranularityRecommended GranularityOption = 1
)

// MemAddressReserve reserves size bytes of virtual address space aligned
// to alignment (0: the granularity), at an address of the driver's choice.
func (c Context) MemAddressReserve(size, alignment uint64) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemAddressReserve(c, size, alignment)
	if r != Success {
		return 0, &Error{Op: "cuMemAddressReserve", Code: r}
	}
	return DevicePtr(p), nil
}

// MemAddressFree frees a reservation: p and size as MemAddressReserve
// returned and was given.
func (c Context) MemAddressFree(p DevicePtr, size uint64) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemAddressFree", rawMemAddressFree(c, p, size))
}

// Device attributes that say which handle types a physical allocation of
// the device can be exported as (cuda.h's values).
const (
	// AttrHandleTypePOSIXSupported is
	// CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED.
	AttrHandleTypePOSIXSupported DeviceAttribute = 103
	// AttrHandleTypeFabricSupported is
	// CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED (CUDA 12.3 on).
	AttrHandleTypeFabricSupported DeviceAttribute = 128
)

// MemCreate makes a physical allocation of size bytes of pinned memory on
// d.
func (c Context) MemCreate(d Device, size uint64) (MemHandle, error) {
	return c.MemCreateExportable(d, size, HandleNone)
}

// MemCreateExportable makes a physical allocation of size bytes of pinned
// memory on d that can be exported as the handle types given
// (requestedHandleTypes; HandleNone: none).
func (c Context) MemCreateExportable(d Device, size uint64, handles HandleType) (MemHandle, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, h := rawMemCreate(c, d, size, handles)
	if r != Success {
		return 0, &Error{Op: "cuMemCreate", Code: r}
	}
	return MemHandle(h), nil
}

// MemRelease releases h; its memory is freed once no mapping of it is
// left.
func (c Context) MemRelease(h MemHandle) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemRelease", rawMemRelease(c, h))
}

// MemMap maps size bytes of h, from offset, at p, inside a reservation
// where nothing is mapped yet.
func (c Context) MemMap(p DevicePtr, size, offset uint64, h MemHandle) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemMap", rawMemMap(c, p, size, offset, h))
}

// MemUnmap unmaps [p, p+size), which must cover whole mappings.
func (c Context) MemUnmap(p DevicePtr, size uint64) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemUnmap", rawMemUnmap(c, p, size))
}

// MemSetAccess makes the mapped range [p, p+size) readable and writable
// by d.
func (c Context) MemSetAccess(p DevicePtr, size uint64, d Device) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemSetAccess", rawMemSetAccess(c, p, size, d))
}

// MemAllocationGranularity is the minimum or recommended granularity of
// pinned device memory on d.
func (c Context) MemAllocationGranularity(d Device, opt GranularityOption) (uint64, error) {
	return c.MemAllocationGranularityExportable(d, opt, HandleNone)
}

// MemAllocationGranularityExportable is the minimum or recommended
// granularity of pinned device memory on d exportable as the handle types
// given, the properties MemCreateExportable makes it with (HandleNone:
// MemAllocationGranularity).
func (c Context) MemAllocationGranularityExportable(d Device, opt GranularityOption, handles HandleType) (uint64, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, g := rawMemGetAllocationGranularity(c, d, opt, handles)
	if r != Success {
		return 0, &Error{Op: "cuMemGetAllocationGranularity", Code: r}
	}
	return g, nil
}

// MemExportFD is cuMemExportToShareableHandle of h as a POSIX file
// descriptor, which the caller owns.
func (c Context) MemExportFD(h MemHandle) (int, error) {
	if err := c.ok(); err != nil {
		return -1, err
	}
	r, v := rawMemExportFD(c, h)
	if r != Success {
		return -1, &Error{Op: "cuMemExportToShareableHandle", Code: r}
	}
	return int(int64(v)), nil
}

// MemExportFabric is cuMemExportToShareableHandle of h as a fabric handle.
func (c Context) MemExportFabric(h MemHandle) (IPCHandle, error) {
	var f IPCHandle
	if err := c.ok(); err != nil {
		return f, err
	}
	err := check("cuMemExportToShareableHandle", rawMemExportFabric(c, h, (*[64]byte)(&f)))
	return f, err
}

// MemImportFD is cuMemImportFromShareableHandle of a POSIX file
// descriptor; fd stays open. Release the handle with MemRelease.
func (c Context) MemImportFD(fd int) (MemHandle, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemImportFD(c, fd)
	if r != Success {
		return 0, &Error{Op: "cuMemImportFromShareableHandle", Code: r}
	}
	return MemHandle(v), nil
}

// MemImportFabric is cuMemImportFromShareableHandle of a fabric handle.
func (c Context) MemImportFabric(f IPCHandle) (MemHandle, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemImportFabric(c, (*[64]byte)(&f))
	if r != Success {
		return 0, &Error{Op: "cuMemImportFromShareableHandle", Code: r}
	}
	return MemHandle(v), nil
}
