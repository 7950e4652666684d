// Grower: an upstream whose allocations are address ranges with physical
// memory committed and decommitted granule by granule, in place.
//
// A suballocator that cuts blocks from fixed-size chunks wastes, at its
// peak, what its chunks hold beyond their live blocks: the rounding of
// each chunk to the device's page, and the room its blocks did not fill.
// An upstream that maps physical memory into a reserved range on demand
// (Virtual) can let one allocation's memory follow its live blocks: a
// growable allocation keeps a range of address space, and the caller
// commits (maps) and decommits (unmaps) whole granules of it wherever it
// needs, without moving what lives in the others. A Pool over it keeps one
// such range per stream instead of many fixed chunks. Grower is that
// contract, optional: the Pool asks its upstream for it and grows in place
// where the upstream implements it, and cuts chunks otherwise
// (pool_vgrow.go).
//
// Offsets and sizes are multiples of GrowGranularity. A committed granule
// is usable by work enqueued on the committing stream after the call. A
// decommit is stream ordered like a free: work enqueued on its stream
// before the call may still use the granules; the upstream takes their
// memory back only after that work, without blocking the host.

package mr

import (
	"errors"

	"github.com/streamalloc/streamalloc/gpu"
)

// Grower is implemented by upstreams whose allocations can be committed
// and decommitted in place (Virtual). Every method is safe for concurrent
// use. A growable allocation is freed with Deallocate(p, limit, s): every
// granule still committed is decommitted in stream order on s and the
// range goes with the last.
type Grower interface {
	Resource
	// GrowGranularity is the unit of offsets and sizes, in bytes: the
	// device's mapping granularity.
	GrowGranularity() int
	// AllocateGrowable returns a range of limit bytes of address space
	// with its first size bytes committed, usable by work enqueued on s
	// after the call (both multiples of GrowGranularity, 0 < size <=
	// limit).
	AllocateGrowable(size, limit int, s gpu.Stream) (gpu.DevicePtr, error)
	// Commit maps physical memory at [p+off, p+off+n) of the growable
	// allocation at p, every granule of which must be decommitted,
	// usable by work enqueued on s after the call. It fails with an
	// error matching ErrOutOfMemory if the device cannot hold them, and
	// with ErrGrowBlocked if one of them is still mapped (a decommit
	// whose memory went to another allocation, until the decommit's work
	// completes); either way nothing changes.
	Commit(p gpu.DevicePtr, off, n int, s gpu.Stream) error
	// Decommit takes the memory of [p+off, p+off+n), every granule of
	// which must be committed, in stream order on s: the upstream unmaps
	// it once the work enqueued on s before the call has completed.
	Decommit(p gpu.DevicePtr, off, n int, s gpu.Stream) error
}

// ErrGrowBlocked is the error, wrapped, of a Commit of addresses that are
// still mapped; the caller grows some other way.
var ErrGrowBlocked = errors.New("the addresses are still mapped")

// piecewiseGrower is a Grower that maps memory in pieces of several
// granules and gives a piece back only whole (Virtual): a Decommit of part
// of a piece leaves its memory mapped until the rest is decommitted too.
// DecommitSpan returns the part [lo, hi) of the committed [off, off+n)
// whose Decommit gives all its memory back. The Pool decommits only such
// spans, so that what it counts as given back is.
type piecewiseGrower interface {
	DecommitSpan(p gpu.DevicePtr, off, n int) (lo, hi int)
}
