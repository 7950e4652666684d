// Host memory as a Resource: the pinned host pools (HostPool,
// DriverHostPool) hand out addresses like every other resource, so that
// every adaptor, StatsOf, Summary and the replay of a trace work over them
// unchanged, and the host reaches the memory through a []byte view.
//
// Why an address. Page-locked host memory under unified addressing (every
// 64-bit platform the driver supports) has one address that is valid on
// the host and, where the driver maps it for the device, in the device's
// address space: cuMemAllocHost's pointer is the device pointer
// (cuMemHostGetDevicePointer returns it unchanged). RMM's pinned host
// resource hands out that pointer through the same interface as its
// device resources. So the host pools implement Resource: Allocate returns
// the address of the page-locked block as a gpu.DevicePtr, Deallocate
// takes it back in stream order, with the Resource contract's checks and
// errors (package doc), and an adaptor stacked over a host pool counts,
// limits, logs, tracks and retries host memory as it does device memory.
//
// The host's view. A host pool also implements HostResource: Bytes returns
// the []byte of a range inside a live allocation, and HostBytesOf finds
// the host pool below any stack of adaptors and asks it. AllocateHost and
// FreeHost are the slice API over any such stack (a host pool itself, or
// Stats over Limit over a host pool): a typed slice, or AllocateHost[byte]
// for bytes, allocated and freed through the stack's Allocate and
// Deallocate, so the adaptors see every slice. There is no second,
// slice-only path around the adaptors.
//
// On the simulator the address is the Go memory that stands for the
// page-locked block. The simulator does not model device access to host
// memory: its kernels, memsets and device-to-device copies refuse such an
// address (gpu.ErrInvalidValue), so code that passes a host pool's pointer
// to device work fails on the simulator rather than corrupting anything.
// Copies between host and device take the []byte view (CopyHtoDAsync,
// CopyDtoHAsync, buf's CopyFromPinned and CopyToPinned), which the
// simulator recognizes as page-locked and reads or writes when the stream
// reaches the copy, as the driver's DMA does.
//
// Replaying a trace against a host pool. The trace formats record device
// allocations; replayed against a host pool, a trace's sizes, streams and
// order drive the pool's size classes, its stream-ordered reuse and its
// release, so the replay studies the allocator over page-locked memory
// (reserved against used bytes, how often it calls the driver), not the
// recorded program, which never staged those bytes on the host.

package mr

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// ErrNotHostMemory is the error of a host slice asked of a resource whose
// stack holds no HostResource: its memory is not the host's to address.
var ErrNotHostMemory = errors.New("mr: resource does not hand out host memory")

// HostResource is a Resource of page-locked host memory (*HostPool,
// *DriverHostPool): the addresses it hands out are host addresses, and
// Bytes returns the memory behind them.
type HostResource interface {
	Resource
	// Bytes returns the size bytes at p, which must lie inside one live
	// allocation: len and cap size, the same memory the allocation
	// holds. A pointer inside no live allocation matches
	// ErrUnknownPointer; a negative size, or one that runs past the end
	// of the allocation, ErrInvalidSize. A size of 0 returns nil.
	Bytes(p gpu.DevicePtr, size int) ([]byte, error)
}

// hostAllocator is implemented by the host pools: an Allocate that
// returns the slice itself, so that AllocateHost over a pool with nothing
// stacked on it does not look the address up again.
type hostAllocator interface {
	allocateBytes(n int, s gpu.Stream) ([]byte, error)
}

// hostResourceOf returns the first HostResource of r's stack, walking the
// way Walk does (adaptors, then the suballocators' upstreams), without
// building the list.
func hostResourceOf(r Resource) (HostResource, bool) {
	for range maxChain {
		switch x := r.(type) {
		case HostResource:
			return x, true
		case Wrapper:
			r = x.Upstream()
		case summaryUpstream:
			r = x.summaryUpstream()
		default:
			return nil, false
		}
	}
	return nil, false
}

// HostBytesOf returns the size bytes at p, an address that r (a host pool
// or any stack of adaptors over one) handed out, as HostResource.Bytes of
// the host pool below r does. A stack with no host pool matches
// ErrNotHostMemory.
func HostBytesOf(r Resource, p gpu.DevicePtr, size int) ([]byte, error) {
	h, ok := hostResourceOf(r)
	if !ok {
		return nil, fmt.Errorf("mr: host bytes: %s: %w", resourceName(r), ErrNotHostMemory)
	}
	return h.Bytes(p, size)
}

// hostAddr is the address of b's first byte, 0 for an empty slice.
func hostAddr(b []byte) gpu.DevicePtr {
	if len(b) == 0 {
		return 0
	}
	return gpu.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// HostElem is the element types a typed slice of page-locked memory may
// hold: fixed-size numbers, which hold no Go pointers (the memory is not
// scanned by the garbage collector).
type HostElem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// AllocateHost allocates n elements of T (n*sizeof(T) bytes) from r on s
// and returns them as a slice of len and cap n, with r's Allocate promise
// (a HostPool's memory the host may write at once; a DriverHostPool's for
// work on s, the host after it has synchronized with s). r is a host pool
// or any stack of adaptors over one, which then sees the allocation as any
// other. Free it with FreeHost on the same r. n == 0 returns nil and no
// error; a negative n, or one whose bytes overflow an int, matches
// ErrInvalidSize; a nil r gpu.ErrInvalidHandle; a stack with no host pool
// ErrNotHostMemory, before anything is allocated; the rest are r's
// Allocate's.
func AllocateHost[T HostElem](r Resource, n int, s gpu.Stream) ([]T, error) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n < 0 || n > int(^uint(0)>>1)/size {
		return nil, sizeError("allocate host", opAllocate, n)
	}
	if r == nil {
		return nil, fmt.Errorf("mr: allocate host: nil resource: %w", gpu.ErrInvalidHandle)
	}
	var b []byte
	if a, ok := r.(hostAllocator); ok {
		var err error
		if b, err = a.allocateBytes(n*size, s); err != nil || len(b) == 0 {
			return nil, err
		}
	} else {
		h, ok := hostResourceOf(r)
		if !ok {
			return nil, fmt.Errorf("mr: allocate host: %s: %w", resourceName(r), ErrNotHostMemory)
		}
		p, err := r.Allocate(n*size, s)
		if err != nil || p == 0 {
			return nil, err
		}
		if b, err = h.Bytes(p, n*size); err != nil {
			// Something between r and h handed out memory of its own.
			if ferr := r.Deallocate(p, n*size, s); ferr != nil {
				err = errors.Join(err, ferr)
			}
			return nil, fmt.Errorf("mr: allocate host: %w", err)
		}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// FreeHost frees v, which AllocateHost(r, len(v), ...) returned (the same
// start and length), through r's Deallocate in s's order. Freeing an empty
// slice does nothing. The errors are r's Deallocate's; a nil r matches
// gpu.ErrInvalidHandle.
func FreeHost[T HostElem](r Resource, v []T, s gpu.Stream) error {
	if r == nil {
		return fmt.Errorf("mr: free host: nil resource: %w", gpu.ErrInvalidHandle)
	}
	b := HostBytes(v)
	return r.Deallocate(hostAddr(b), len(b), s)
}

// HostBytes is the memory of v as bytes, for copies (CopyHtoDAsync,
// CopyDtoHAsync) of a typed slice.
func HostBytes[T HostElem](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(zero)))
}
