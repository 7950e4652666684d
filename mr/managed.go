// Managed: unified memory from cuMemAllocManaged (attached globally), freed
// with cuMemFree.
//
// Managed memory is addressable from the host and from every device, and
// the driver migrates pages on demand. Its allocation and free are
// synchronous like Direct's, so Managed shares Direct's body and its
// invariants: a Deallocate on s blocks until the work enqueued so far on s,
// and on the allocation's stream if another, has completed, and only then
// frees; a failed free leaves the pointer allocated.
//
// The driver lets managed memory exceed the device's (it is paged in on
// demand), so it would not report out of memory even for 64 TiB, and
// touching far more than the device holds can hang it. Managed refuses a
// single request larger than the device's total memory with an
// *OutOfMemoryError whose Limit is that total; oversubscription by many
// smaller requests is left to the driver.
//
// Prefetch and advice. Pages of managed memory move to the processor that
// touches them, each move a page fault that stalls the kernel touching it.
// Prefetch moves a range ahead of use in a stream's order (a kernel that
// follows a prefetch to its device takes no faults), and Advise records
// how a range will be used (gpu/managed.go lists the advice). Both take
// any range inside one live allocation of the resource, interior and
// unaligned ranges included (the driver rounds them out to whole pages),
// found through an index of the allocations by address. For the
// stream-ordered form of managed memory, a driver pool of managed memory,
// see AsyncOptions.ManagedPool.

package mr

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// Managed is a resource of unified (managed) memory. It is safe for
// concurrent use.
type Managed struct {
	core syncCore
}

// NewManaged returns a Managed resource on dev.
func NewManaged(dev gpu.Device) *Managed {
	return &Managed{core: syncCore{name: "managed", dev: dev, managed: true}}
}

// Allocate returns size bytes of managed memory from cuMemAllocManaged.
// It blocks the host for as long as the driver call takes.
func (m *Managed) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return m.core.allocate(size, s)
}

// Deallocate synchronizes s (and the allocation's stream, if another),
// then frees p with cuMemFree.
func (m *Managed) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	return m.core.deallocate(p, size, s)
}

// Device is the device the memory is allocated for.
func (m *Managed) Device() gpu.Device { return m.core.dev }

// Usage reports the bytes allocated and not yet freed; Reserved equals
// Used since Managed caches nothing.
func (m *Managed) Usage() Usage { return m.core.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (m *Managed) ResetPeaks() { m.core.usage.resetPeaks() }

// Prefetch moves [p, p+size), inside one live allocation of m, to loc in
// s's order: after the work enqueued on s before it, before the work
// enqueued after it. It never blocks the host. A range not inside one
// live allocation matches ErrUnknownPointer (p outside every allocation)
// or ErrInvalidSize (a size that is not positive, or one running past the
// allocation's end); a nil stream or one of another device
// gpu.ErrInvalidHandle or gpu.ErrWrongDevice; a capturing stream
// ErrStreamCapturing; a location of an unknown kind gpu.ErrInvalidValue,
// another device gpu.ErrInvalidDevice; a device without managed-memory
// control gpu.ErrNotSupported.
func (m *Managed) Prefetch(p gpu.DevicePtr, size int, loc gpu.Location, s gpu.Stream) error {
	const op = "prefetch"
	if err := checkStream(m.core.name, op, m.core.dev, s); err != nil {
		return err
	}
	mm, err := m.managedRange(op, p, size)
	if err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("managed: prefetch on stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	if err := mm.PrefetchAsync(p, size, loc, s); err != nil {
		return fmt.Errorf("managed: prefetch %#x (%d bytes) to %v: %w", uint64(p), size, loc, err)
	}
	return nil
}

// Advise applies a to [p, p+size), inside one live allocation of m; loc is
// the preferred location or the accessing processor, ignored by the
// read-mostly advice. Its errors are Prefetch's, and an unknown advice
// matches gpu.ErrInvalidValue.
func (m *Managed) Advise(p gpu.DevicePtr, size int, a gpu.Advice, loc gpu.Location) error {
	mm, err := m.managedRange("advise", p, size)
	if err != nil {
		return err
	}
	if err := mm.Advise(p, size, a, loc); err != nil {
		return fmt.Errorf("managed: advise %v on %#x (%d bytes) for %v: %w", a, uint64(p), size, loc, err)
	}
	return nil
}

// managedRange checks that [p, p+size) lies inside one live allocation and
// returns the device's managed-memory control.
func (m *Managed) managedRange(op string, p gpu.DevicePtr, size int) (gpu.ManagedMemory, error) {
	if size <= 0 {
		return nil, fmt.Errorf("managed: %s %d bytes: %w", op, size, ErrInvalidSize)
	}
	n, base, ok := m.core.spans.find(p)
	if !ok {
		return nil, fmt.Errorf("managed: %s %#x: %w", op, uint64(p), ErrUnknownPointer)
	}
	if end := uint64(base) + uint64(n); uint64(p)+uint64(size) > end || uint64(p)+uint64(size) < uint64(p) {
		return nil, fmt.Errorf("managed: %s %#x: %d bytes run past the allocation's end %#x: %w", op, uint64(p), size, end, ErrInvalidSize)
	}
	mm, err := gpu.ManagedMemoryOf(m.core.dev)
	if err != nil {
		return nil, fmt.Errorf("managed: %s: %w", op, err)
	}
	return mm, nil
}
