// Managed memory in the backend interface: prefetch, advice, and pools
// that hand out managed memory in stream order.
//
// Managed (unified) memory from MallocManaged is one address range valid
// on the host and on the device; its pages live on one side at a time
// (or, advised read-mostly, as read-only copies on several) and move to
// the processor that touches them, each move a page fault that stalls the
// touching kernel. A ManagedMemory device lets a program move pages ahead
// of use and say how they will be used:
//
//   - PrefetchAsync moves [p, p+n) to a location in stream order: after the
//     work enqueued on s before it, and before the work enqueued after it
//     (cuMemPrefetchAsync). A kernel that follows a prefetch to its device
//     finds the pages there and takes no faults.
//   - Advise records a hint for a range (cuMemAdvise): read-mostly makes a
//     read duplicate the page instead of moving it; a preferred location
//     keeps the pages there, other processors map them; accessed-by makes
//     a device keep a mapping, so its accesses never fault.
//   - NewManagedPool creates a pool whose allocations (MallocFromPoolAsync,
//     freed with FreeAsync) are managed memory (CUDA 13 on).
//
// The rules, on both backends: the range lies inside one managed
// allocation, else ErrInvalidValue; n > 0, else ErrInvalidValue; a
// location of an unknown kind ErrInvalidValue, a device that is not this
// one ErrInvalidDevice; an unknown Advice ErrInvalidValue; the location
// given with read-mostly advice is ignored (CheckAdvice, CheckLocation).
// Addresses need no alignment: the driver rounds a range out to whole
// pages.
//
// ManagedMemory is an optional part of the interface: both backends
// implement it; ManagedMemoryOf says ErrNotSupported for a device that
// does not. The simulator models residency per page and counts page faults
// (sim.Device.ManagedStats); the driver reports none through this API.
package gpu

import "fmt"

// LocationKind is a CUmemLocationType: where memory lives.
type LocationKind int

// Location kinds; the values are cuda.h's.
const (
	LocationDevice   LocationKind = 1 // a device, ID its ordinal
	LocationHost     LocationKind = 2 // the host, ID ignored
	LocationHostNUMA LocationKind = 3 // a host NUMA node, ID the node
)

// Location is a device or the host, as prefetch, advice and host-located
// pools name them.
type Location struct {
	Kind LocationKind
	ID   int
}

// DeviceLocation is the location of device ordinal.
func DeviceLocation(ordinal int) Location { return Location{Kind: LocationDevice, ID: ordinal} }

// HostLocation is the host.
func HostLocation() Location { return Location{Kind: LocationHost} }

// String is "device 0", "host" or "host NUMA node 1".
func (l Location) String() string {
	switch l.Kind {
	case LocationDevice:
		return fmt.Sprintf("device %d", l.ID)
	case LocationHost:
		return "host"
	case LocationHostNUMA:
		return fmt.Sprintf("host NUMA node %d", l.ID)
	}
	return fmt.Sprintf("location kind %d id %d", int(l.Kind), l.ID)
}

// MaxNUMANode is the highest host NUMA node a Location may name; a
// larger ID is refused before it reaches the driver.
const MaxNUMANode = 1 << 20

// CheckLocation reports whether a device of the given ordinal may name
// loc: itself, the host, or a host NUMA node in [0, MaxNUMANode]. Another
// device is an error matching ErrInvalidDevice; an unknown kind or a NUMA
// node out of range one matching ErrInvalidValue. A backend adds its own
// limits (the simulator has NUMA node 0 only) after this check.
func CheckLocation(ordinal int, loc Location) error {
	switch loc.Kind {
	case LocationDevice:
		if loc.ID != ordinal {
			return fmt.Errorf("%v from device %d: %w", loc, ordinal, ErrInvalidDevice)
		}
		return nil
	case LocationHost:
		return nil
	case LocationHostNUMA:
		if loc.ID < 0 || loc.ID > MaxNUMANode {
			return fmt.Errorf("%v: %w", loc, ErrInvalidValue)
		}
		return nil
	}
	return fmt.Errorf("%v: %w", loc, ErrInvalidValue)
}

// Advice is a CUmem_advise.
type Advice int

// Advice values; they are cuda.h's.
const (
	AdviseSetReadMostly          Advice = 1
	AdviseUnsetReadMostly        Advice = 2
	AdviseSetPreferredLocation   Advice = 3
	AdviseUnsetPreferredLocation Advice = 4
	AdviseSetAccessedBy          Advice = 5
	AdviseUnsetAccessedBy        Advice = 6
)

// String is the advice's cuda.h name without the CU_MEM_ADVISE_ prefix.
func (a Advice) String() string {
	switch a {
	case AdviseSetReadMostly:
		return "SET_READ_MOSTLY"
	case AdviseUnsetReadMostly:
		return "UNSET_READ_MOSTLY"
	case AdviseSetPreferredLocation:
		return "SET_PREFERRED_LOCATION"
	case AdviseUnsetPreferredLocation:
		return "UNSET_PREFERRED_LOCATION"
	case AdviseSetAccessedBy:
		return "SET_ACCESSED_BY"
	case AdviseUnsetAccessedBy:
		return "UNSET_ACCESSED_BY"
	}
	return fmt.Sprintf("Advice(%d)", int(a))
}

// Valid reports whether a is one of cuda.h's six advices.
func (a Advice) Valid() bool { return a >= AdviseSetReadMostly && a <= AdviseUnsetAccessedBy }

// TakesLocation reports whether a names a location: the read-mostly
// advices do not, and the driver ignores the location given with them.
func (a Advice) TakesLocation() bool {
	return a != AdviseSetReadMostly && a != AdviseUnsetReadMostly
}

// CheckAdvice reports whether a device of the given ordinal may give
// advice a with loc: an unknown advice is an error matching
// ErrInvalidValue; loc is checked by CheckLocation only where a takes a
// location, so read-mostly advice with a zero Location is accepted, as
// the driver accepts it.
func CheckAdvice(ordinal int, a Advice, loc Location) error {
	if !a.Valid() {
		return fmt.Errorf("%v: %w", a, ErrInvalidValue)
	}
	if !a.TakesLocation() {
		return nil
	}
	return CheckLocation(ordinal, loc)
}

// ManagedMemory is implemented by a Device that can prefetch and advise
// managed memory and make pools of it. All methods are safe for concurrent
// use.
type ManagedMemory interface {
	// PrefetchAsync moves the managed range [p, p+n) to loc in s's
	// order.
	PrefetchAsync(p DevicePtr, n int, loc Location, s Stream) error
	// Advise applies a to the managed range [p, p+n); loc is the
	// preferred location or the accessing processor (ignored by the
	// read-mostly advice).
	Advise(p DevicePtr, n int, a Advice, loc Location) error
	// NewManagedPool creates a pool of managed memory preferring this
	// device. A driver that has no managed pools answers with its error
	// (ErrNotSupported or ErrInvalidValue).
	NewManagedPool() (MemPool, error)
}

// ManagedMemoryOf returns dev's managed-memory interface, or an error
// matching ErrNotSupported if it has none.
func ManagedMemoryOf(dev Device) (ManagedMemory, error) {
	if m, ok := dev.(ManagedMemory); ok {
		return m, nil
	}
	return nil, fmt.Errorf("gpu: device %T has no managed-memory control: %w", dev, ErrNotSupported)
}
