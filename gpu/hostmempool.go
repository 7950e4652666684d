// Host-located driver pools in the backend interface: the driver's
// stream-ordered allocator over pinned host memory (CUDA 12.2 on).
//
// A pool created at the host (or a host NUMA node) hands out page-locked
// host memory with the device pools' stream order: MallocHostFromPoolAsync
// returns memory usable by work enqueued on s from now on, and by the host
// once it has synchronized with s; FreeHostAsync returns it in s's order,
// so the next allocation on s may reuse it at once, and one on another
// stream once that stream is ordered after the free. The pool is a
// MemPool: attributes, TrimTo and Destroy as for device pools.
//
// The memory is returned as a slice of exactly n bytes, which only
// FreeHostAsync frees (the slice handed out, not a part of it: else
// ErrInvalidValue). HostMemPools is optional: both backends implement it;
// HostMemPoolsOf says ErrNotSupported for a device that does not.
package gpu

import "fmt"

// HostMemPools is implemented by a Device whose driver has pools located
// on the host. All methods are safe for concurrent use.
type HostMemPools interface {
	// NewHostMemPool creates a pool of pinned host memory at loc, which
	// is LocationHost or LocationHostNUMA; another kind is
	// ErrInvalidValue.
	NewHostMemPool(loc Location) (MemPool, error)
	// MallocHostFromPoolAsync allocates n bytes from a host-located
	// pool in s's order.
	MallocHostFromPoolAsync(n int, pool MemPool, s Stream) ([]byte, error)
	// FreeHostAsync frees b, from MallocHostFromPoolAsync, in s's order.
	FreeHostAsync(b []byte, s Stream) error
}

// HostMemPoolsOf returns dev's host-located pools, or an error matching
// ErrNotSupported if it has none.
func HostMemPoolsOf(dev Device) (HostMemPools, error) {
	if h, ok := dev.(HostMemPools); ok {
		return h, nil
	}
	return nil, fmt.Errorf("gpu: device %T has no host-located pools: %w", dev, ErrNotSupported)
}
