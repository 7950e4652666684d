// Owners: how an adaptor can trust its upstream to refuse bad frees, so
// that it keeps no pointer table of its own.
//
// Every adaptor refuses a free of a pointer it did not hand out, a double
// free and a free with the wrong size with a typed error before the
// upstream sees it, and counts nothing for it (ptrtable.go). Over an
// upstream that already checks every free exactly, the adaptor's table
// repeats that work, and on a host where a lock and unlock cost 20-35 ns it
// is most of an adaptor's cost. One thing the upstream alone cannot tell
// is whether the adaptor handed the pointer out: memory allocated from the
// upstream directly (or through another adaptor over it) is live below,
// and freeing it through the adaptor must still be refused. An Owner
// closes that gap: the upstream records, with each allocation, the owner
// that asked for it, and refuses a free that names another.
//
// An OwnedResource is such an upstream (Pool is one). An adaptor made over
// one takes an Owner of its own at construction, allocates and frees with
// it, and keeps no table when it needs none for its own work (Limit, Retry,
// Logging, and Stats without PerStream; Tracking, Aligned and Stats with
// PerStream keep a record per allocation, and are not OwnedResources).
// Aligned allocates with an Owner of its own too, and keeps its records,
// the offsets of its aligned addresses in their blocks, in lock-free slots
// (aligned_slots.go): the size check of a free is the upstream's. It
// is an OwnedResource itself, passing its caller's owner down, so that a
// stack of such adaptors over a Pool has no table at any level: the owner
// recorded below is the outermost adaptor's, and a free through any level
// is checked against it. So memory allocated through the top of a stack
// must be freed through the top: a free of it through a lower adaptor is
// refused as an unknown pointer (with tables, the lower adaptor accepted
// it and the upper one kept the allocation live forever).
//
// The contract, which every implementation keeps and the adaptors rely
// on:
//   - AllocateOwned(size, s, o) is Allocate, and records o with the memory.
//     Allocate records the zero Owner.
//   - DeallocateOwned(p, size, s, o) is Deallocate, and also refuses, with
//     an error matching ErrUnknownPointer, a live pointer recorded with
//     another owner. Deallocate is DeallocateOwned with the zero Owner.
//   - Every refused free (unknown pointer, another owner's pointer, double
//     free, wrong size, bad stream) returns an error matching the same
//     sentinel a pointer table would give and changes nothing: nothing is
//     freed, counted or logged, and the pointer stays live for its owner.
//   - Of two frees of one pointer racing, at most one succeeds.

package mr

import (
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Owner names one client of an OwnedResource. The zero Owner is the
// client that calls Allocate and Deallocate; NewOwner gives others. An
// Owner is 32 bits, kept in a Pool's block descriptor where it costs no
// space.
type Owner struct{ id uint32 }

var owners atomic.Uint32

// NewOwner returns an Owner that none of the last 2^32-1 calls returned,
// and never the zero Owner.
func NewOwner() Owner {
	for {
		if id := owners.Add(1); id != 0 {
			return Owner{id}
		}
	}
}

// OwnedResource is a Resource that checks every free exactly and records
// which Owner each allocation belongs to, so that adaptors over it need no
// pointer table (the contract is in owner.go's file comment).
type OwnedResource interface {
	Resource
	// AllocateOwned is Allocate, recording o as the memory's owner.
	AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error)
	// DeallocateOwned is Deallocate of memory that AllocateOwned gave o;
	// memory of another owner is refused with an error matching
	// ErrUnknownPointer, and changes nothing.
	DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error
	// OwnersChecked reports whether the resource keeps the contract. An
	// adaptor keeps it when its upstream does; when it does not, its
	// AllocateOwned and DeallocateOwned are Allocate and Deallocate, and
	// the owner is not checked.
	OwnersChecked() bool
}

// owned is what an adaptor keeps to use an OwnedResource upstream: the
// upstream (nil if it is not one) and the adaptor's own Owner.
type owned struct {
	oup   OwnedResource
	owner Owner
}

// ownedOver returns the owned state of an adaptor over up: trusted if up
// is an OwnedResource.
func ownedOver(up Resource) owned {
	if o, ok := up.(OwnedResource); ok && o.OwnersChecked() {
		return owned{oup: o, owner: NewOwner()}
	}
	return owned{}
}

// trusted reports whether the upstream checks frees and owners itself.
func (o *owned) trusted() bool { return o.oup != nil }

// OwnersChecked is part of OwnedResource: an adaptor checks owners when
// its upstream does.
func (o *owned) OwnersChecked() bool { return o.oup != nil }
