// streamTable: a resource's per-stream states (Pool, FixedSize, Arena),
// found by Stream.ID without a lock that streams contend for.
//
// The three stream-ordered resources that carve memory themselves share
// one model: every piece of memory they hold has a home stream, whose
// state (free lists, arena, chunks) only that stream's own requests touch
// on the hot path, under the state's own mutex. Memory freed on its home
// is reusable there at once. Memory that changes home (a Pool chunk stolen
// by another stream, half of a FixedSize list, an Arena superblock taken
// from the global arena) is reusable by the new home only after it waits
// on an event recorded on the old one (orderAfter, eventcache.go), which
// never blocks the host. What each resource moves, and when, is its own:
// that is its allocation policy.
//
// Every operation looks its stream's state up, while states are created
// once per stream and dropped rarely. So the table is copy-on-write: a
// lookup is an atomic load and, among up to streamScan streams, a scan of
// an array of IDs (else a map read); adding or dropping a state, serialized
// by mu, publishes a new table. The IDs sit in the table itself, not only
// in the states: reading each state's ID would read the cache line of its
// mutex, which its own goroutine writes on every operation, and with 4 or
// 8 busy streams that false sharing made every Pool pair about ten times
// slower. (sync.Map would box the uint64 key on every lookup.)
//
// Invariants: a published table is never modified; at most one state per
// stream ID is published at any time; all lists the states in the order
// their streams were first seen, so that a resource that walks its streams
// (to steal, to release) does so in the same order on every run.

package mr

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// streamScan is the number of streams up to which lookup scans an array
// instead of hashing.
const streamScan = 8

type streamTable[T any] struct {
	mu  sync.Mutex
	cur atomic.Pointer[streamList[T]]
}

// streamList is one published table: list[i] is the state of the
// stream whose ID is keys[i].
type streamList[T any] struct {
	ids  [streamScan]uint64 // keys[:streamScan], inline for the scan
	keys []uint64
	list []*T
	byID map[uint64]*T
}

// lookup returns the state of stream id, or nil.
func (t *streamTable[T]) lookup(id uint64) *T {
	l := t.cur.Load()
	if l == nil {
		return nil
	}
	if n := len(l.list); n <= streamScan {
		for i, x := range l.ids[:n] {
			if x == id {
				return l.list[i]
			}
		}
		return nil
	}
	return l.byID[id]
}

// get returns the state of stream id, creating it with mk if there is
// none. mk runs under the table's lock, before the new state is published.
func (t *streamTable[T]) get(id uint64, mk func() *T) *T {
	if v := t.lookup(id); v != nil {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.lookup(id); v != nil {
		return v
	}
	v := mk()
	var keys []uint64
	var list []*T
	if l := t.cur.Load(); l != nil {
		keys, list = l.keys, l.list
	}
	t.publish(append(slices.Clip(keys), id), append(slices.Clip(list), v))
	return v
}

// drop unpublishes the state of stream id if it is v.
func (t *streamTable[T]) drop(id uint64, v *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.cur.Load()
	if l == nil {
		return
	}
	i := slices.Index(l.keys, id)
	if i < 0 || l.list[i] != v {
		return
	}
	t.publish(slices.Delete(slices.Clone(l.keys), i, i+1), slices.Delete(slices.Clone(l.list), i, i+1))
}

// publish makes keys and list, which the caller built afresh, the table.
// Called with t.mu.
func (t *streamTable[T]) publish(keys []uint64, list []*T) {
	l := &streamList[T]{keys: keys, list: list, byID: make(map[uint64]*T, len(list))}
	copy(l.ids[:], keys)
	for i, id := range keys {
		l.byID[id] = list[i]
	}
	t.cur.Store(l)
}

// all returns the published states in the order their streams were first
// seen (the slice must not be modified).
func (t *streamTable[T]) all() []*T {
	if l := t.cur.Load(); l != nil {
		return l.list
	}
	return nil
}

// streamState is the head of a per-stream state that a resource drops
// from its table on Release (FixedSize, Arena): the stream, the mutex that
// guards the state, and whether it was dropped.
type streamState struct {
	s    gpu.Stream
	mu   sync.Mutex
	dead bool // dropped from the table: look the stream up again
}

// lockLive locks the state and reports whether it is still published;
// if it was dropped meanwhile it unlocks it and returns false, and the
// caller looks the stream up again, so that it never works on a state that
// a Release has forgotten. FixedSize and Arena each loop over get and
// lockLive themselves: a generic loop would call lockLive through its
// type's dictionary, an indirect call on every operation (7 more
// instructions a call, measured on the FixedSize pair).
func (h *streamState) lockLive() bool {
	h.mu.Lock()
	if h.dead {
		h.mu.Unlock()
		return false
	}
	return true
}
