// The Resource interface, the errors every resource and adaptor shares,
// and the interfaces through which resources report what they hold. The
// contracts they keep are stated in the package doc (doc.go).

package mr

import (
	"errors"
	"fmt"
	"strings"

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
// It matches ErrOutOfMemory with errors.Is. Its message gives the sizes in
// IEC units (with the exact request in bytes), the largest free block
// where the resource knows it, and the reason:
//
//	pool: out of memory: 1.5 GiB (1610612736 bytes) requested on stream 3;
//	reserved 30.0 GiB, used 28.2 GiB, limit 32.0 GiB, largest free block 512.0 MiB:
//	MaxSize reached
type OutOfMemoryError struct {
	Resource  string // which resource refused, e.g. "pool"
	Requested int    // bytes asked for
	Stream    uint64 // Stream.ID of the request
	Reserved  uint64 // bytes the resource held from upstream at the time
	Used      uint64 // bytes it had handed out
	Limit     uint64 // its limit, or 0 if it has none
	// LargestFree is the largest block the resource could have handed
	// out without asking its upstream (a Pool's largest free block), or
	// 0 where the resource keeps no free blocks of its own.
	LargestFree uint64
	// Reason says why in a few words ("MaxSize reached", "the device is
	// out of memory", "over the budget"); "" if Err says it all.
	Reason string
	Err    error // the upstream error, if the refusal came from below
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: out of memory: %s (%d bytes) requested on stream %d; reserved %s, used %s",
		e.Resource, FormatBytes(uint64(max(e.Requested, 0))), e.Requested, e.Stream,
		FormatBytes(e.Reserved), FormatBytes(e.Used))
	if e.Limit != 0 {
		fmt.Fprintf(&b, ", limit %s", FormatBytes(e.Limit))
	}
	if e.LargestFree != 0 {
		fmt.Fprintf(&b, ", largest free block %s", FormatBytes(e.LargestFree))
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
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
