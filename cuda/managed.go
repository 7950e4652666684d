// The managed-memory wing: prefetch and advice for managed (unified)
// memory, memory pools by allocation type and location (managed pools,
// pools of pinned host memory), and stream-ordered allocations from a
// pool located on the host.
//
// Managed memory is one address range valid on the host and on every
// device; the driver moves its pages to whichever processor touches them
// (a page fault on a device, a CPU fault on the host). MemPrefetchAsync
// moves a range ahead of use, in stream order: the move starts after the
// work enqueued before it and completes before the work enqueued after
// it. MemAdvise records a hint for a range (read-mostly: processors that
// read it get a copy of their own; preferred location: the pages stay
// there and others map them; accessed-by: a device keeps a mapping, so
// its accesses never fault). Both are the _v2 entry points (CUDA 12.2 on),
// which take a Location; CUDA 13's cuda.h names no other form.
//
// A pool of AllocManaged type hands out managed memory in stream order
// (CUDA 13 on); a pool located on the host (LocationHost, or
// LocationHostNUMA with a NUMA node) hands out pinned host memory, whose
// address the host may use as is; MemAllocHostFromPoolAsync returns it as
// a pointer the driver owns (never Go memory), freed with
// MemFreeHostAsync. A driver that lacks an entry point answers
// ErrNotSupported; one that refuses a pool kind answers with its own code.

package cuda

import "unsafe"

// LocationType is a CUmemLocationType.
type LocationType int32

// Location types (cuda.h's values).
const (
	LocationNone     LocationType = 0 // CU_MEM_LOCATION_TYPE_NONE (INVALID before CUDA 13)
	LocationDevice   LocationType = 1
	LocationHost     LocationType = 2
	LocationHostNUMA LocationType = 3
)

// Location is a CUmemLocation: a device (ID its ordinal), the host (ID
// ignored), or a host NUMA node (ID the node).
type Location struct {
	Type LocationType
	ID   int32
}

// Advice is a CUmem_advise.
type Advice int32

// Advice values (cuda.h's).
const (
	AdviseSetReadMostly          Advice = 1
	AdviseUnsetReadMostly        Advice = 2
	AdviseSetPreferredLocation   Advice = 3
	AdviseUnsetPreferredLocation Advice = 4
	AdviseSetAccessedBy          Advice = 5
	AdviseUnsetAccessedBy        Advice = 6
)

// AllocationType is a CUmemAllocationType.
type AllocationType int32

// Allocation types (cuda.h's values); AllocManaged is CUDA 13's.
const (
	AllocPinned  AllocationType = 1
	AllocManaged AllocationType = 2
)

// MemPrefetchAsync is cuMemPrefetchAsync_v2: it moves the managed range
// [p, p+n) to loc in s's order.
func (c Context) MemPrefetchAsync(p DevicePtr, n uint64, loc Location, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemPrefetchAsync", rawMemPrefetchAsync(c, p, n, loc, s))
}

// MemAdvise is cuMemAdvise_v2: advice a for the managed range [p, p+n),
// about loc (ignored by the read-mostly advice).
func (c Context) MemAdvise(p DevicePtr, n uint64, a Advice, loc Location) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemAdvise", rawMemAdvise(c, p, n, a, loc))
}

// MemPoolCreateAt is cuMemPoolCreate of a pool of allocation type t at
// loc, with no exportable handles.
func (c Context) MemPoolCreateAt(t AllocationType, loc Location) (MemPool, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemPoolCreateAt(c, t, loc)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolCreate", Code: r}
	}
	return MemPool(p), nil
}

// MemAllocHostFromPoolAsync is cuMemAllocFromPoolAsync from a pool located
// on the host: size bytes of pinned host memory, usable by work on s from
// now on and by the host once it has synchronized with s.
func (c Context) MemAllocHostFromPoolAsync(size uint64, pool MemPool, s Stream) (unsafe.Pointer, error) {
	if err := c.ok(); err != nil {
		return nil, err
	}
	if pool == 0 {
		return nil, &Error{Op: "cuMemAllocFromPoolAsync", Code: ErrInvalidHandle}
	}
	r, p := rawMemAllocHostFromPoolAsync(c, size, pool, s)
	if r != Success {
		return nil, &Error{Op: "cuMemAllocFromPoolAsync", Code: r}
	}
	return p, nil
}

// MemFreeHostAsync is cuMemFreeAsync of memory from
// MemAllocHostFromPoolAsync.
func (c Context) MemFreeHostAsync(p unsafe.Pointer, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemFreeAsync", rawMemFreeHostAsync(c, p, s))
}
