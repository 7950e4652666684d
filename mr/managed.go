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

package mr

import "github.com/streamalloc/streamalloc/gpu"

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
