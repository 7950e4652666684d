// spanIndex: which of a resource's upstream spans (chunks, superblocks)
// holds an address.
//
// Lookups happen on every free and must not take a lock that other streams
// contend for, while spans are added and removed rarely (when a resource
// grows or releases). So the index is copy-on-write: readers load an
// immutable sorted slice through an atomic pointer and binary-search it;
// writers, serialized by mu, build a new slice and publish it.
//
// Invariants: the published slice is sorted by base and its spans do not
// overlap; a published slice is never modified.

package mr

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

type span[T any] struct {
	base gpu.DevicePtr
	size int
	v    T
}

type spanIndex[T any] struct {
	mu  sync.Mutex
	cur atomic.Pointer[[]span[T]]
}

// find returns the value of the span holding p.
func (x *spanIndex[T]) find(p gpu.DevicePtr) (v T, base gpu.DevicePtr, ok bool) {
	sp := x.cur.Load()
	if sp == nil {
		return v, 0, false
	}
	s := *sp
	// The last span whose base is <= p.
	i, _ := slices.BinarySearchFunc(s, p, func(e span[T], p gpu.DevicePtr) int {
		if e.base <= p {
			return -1
		}
		return 1
	})
	if i == 0 {
		return v, 0, false
	}
	e := &s[i-1]
	if uint64(p-e.base) >= uint64(e.size) {
		return v, 0, false
	}
	return e.v, e.base, true
}

// add publishes a span; it must not overlap the others (upstream memory
// never does).
func (x *spanIndex[T]) add(base gpu.DevicePtr, size int, v T) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var old []span[T]
	if sp := x.cur.Load(); sp != nil {
		old = *sp
	}
	i, _ := slices.BinarySearchFunc(old, base, func(e span[T], b gpu.DevicePtr) int {
		if e.base < b {
			return -1
		}
		if e.base > b {
			return 1
		}
		return 0
	})
	s := make([]span[T], 0, len(old)+1)
	s = append(s, old[:i]...)
	s = append(s, span[T]{base: base, size: size, v: v})
	s = append(s, old[i:]...)
	x.cur.Store(&s)
}

// remove unpublishes the spans whose bases are in bases.
func (x *spanIndex[T]) remove(bases map[gpu.DevicePtr]bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	sp := x.cur.Load()
	if sp == nil {
		return
	}
	s := make([]span[T], 0, len(*sp))
	for _, e := range *sp {
		if !bases[e.base] {
			s = append(s, e)
		}
	}
	x.cur.Store(&s)
}

// all returns the published spans (not to be modified).
func (x *spanIndex[T]) all() []span[T] {
	if sp := x.cur.Load(); sp != nil {
		return *sp
	}
	return nil
}
