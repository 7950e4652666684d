// The Resource interface, the errors every resource and adaptor shares,
// and the interfaces through which resources report what they hold. The
// contracts they keep are stated in the package doc (doc.go).

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// Alignment is the alignment of every allocation, what cudaMalloc
// guarantees.
const Alignment = 256

// Resource is a stream-ordered device memory resource.
type Resource interface {
	// Allocate returns size bytes aligned to Alignment, usable by work
	// enqueued on s after the call returns.
	Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error)
	// Deallocate frees p, which Allocate returned with the same size, in
	// stream order on s: after all work enqueued on s before the call.
	Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error
	// Device is the device the memory lives on.
	Device() gpu.Device
}

// Errors common to all resources.
var (
	ErrOutOfMemory    error = gpu.ErrOutOfMemory
	ErrInvalidSize          = errors.New("mr: invalid allocation size")
	ErrUnknownPointer       = errors.New("mr: pointer was not allocated by this resource")
	ErrDoubleFree           = errors.New("mr: pointer freed twice")
	ErrSizeMismatch         = errors.New("mr: deallocation size differs from allocation size")
	ErrClosed               = errors.New("mr: resource closed")
)

// OutOfMemoryError is returned when a resource cannot satisfy a request.
// It matches ErrOutOfMemory with errors.Is.
type OutOfMemoryError struct {
	Resource  string // which resource refused, e.g. "pool"
	Requested int    // bytes asked for
	Stream    uint64 // Stream.ID of the request
	Reserved  uint64 // bytes the resource held from upstream at the time
	Used      uint64 // bytes it had handed out
	Limit     uint64 // its limit, or 0 if it has none
	Err       error  // the upstream error, if the refusal came from below
}

func (e *OutOfMemoryError) Error() string {
	msg := fmt.Sprintf("%s: out of memory allocating %d bytes on stream %d (reserved %d, used %d",
		e.Resource, e.Requested, e.Stream, e.Reserved, e.Used)
	if e.Limit != 0 {
		msg += fmt.Sprintf(", limit %d", e.Limit)
	}
	msg += ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrOutOfMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the upstream error, if any.
func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// Usage is what a resource holds: Reserved is memory taken from upstream
// (or the driver), Used is memory handed out to callers and not yet freed.
// The Peak fields are high-water marks since creation or the last
// ResetPeaks.
type Usage struct {
	Reserved, Used         uint64
	PeakReserved, PeakUsed uint64
}

// UsageReporter is implemented by resources that know what they hold.
// Usage must be cheap enough to call after every operation of a replay.
type UsageReporter interface {
	Usage() Usage
}

// Releaser is implemented by resources that cache memory: Release returns
// every cached byte that no allocation uses to the upstream (or driver), in
// stream order, without blocking on work that is still running.
type Releaser interface {
	Release() error
}
