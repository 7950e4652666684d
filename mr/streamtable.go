// streamTable: a resource's per-stream state, found by Stream.ID without
// a lock that streams contend for.
//
// Every operation looks its stream's state up, while states are created
// once per stream and dropped rarely. So the table is copy-on-write: a
// lookup is an atomic load and a map read; adding or dropping a state,
// serialized by mu, publishes a new map. (sync.Map would box the uint64 key
// on every lookup.)
//
// Invariants: a published map is never modified; at most one state per
// stream ID is published at any time.

package mr

import (
	"maps"
	"sync"
	"sync/atomic"
)

type streamTable[T any] struct {
	mu  sync.Mutex
	cur atomic.Pointer[map[uint64]*T]
}

// get returns the state of stream id, creating it with mk if there is none.
func (t *streamTable[T]) get(id uint64, mk func() *T) *T {
	if m := t.cur.Load(); m != nil {
		if v, ok := (*m)[id]; ok {
			return v
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[uint64]*T
	if m := t.cur.Load(); m != nil {
		if v, ok := (*m)[id]; ok {
			return v
		}
		old = *m
	}
	nm := make(map[uint64]*T, len(old)+1)
	maps.Copy(nm, old)
	v := mk()
	nm[id] = v
	t.cur.Store(&nm)
	return v
}

// drop unpublishes the state of stream id if it is v.
func (t *streamTable[T]) drop(id uint64, v *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.cur.Load()
	if m == nil || (*m)[id] != v {
		return
	}
	nm := maps.Clone(*m)
	delete(nm, id)
	t.cur.Store(&nm)
}

// all returns the published states (the map must not be modified).
func (t *streamTable[T]) all() map[uint64]*T {
	if m := t.cur.Load(); m != nil {
		return *m
	}
	return nil
}
