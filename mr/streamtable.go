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
// once per stream and dropped rarely. So lookups read a published index
// (an atomic load and, among up to streamScan streams, a scan of an array
// of IDs; else a probe of an open-addressing table at most half full, each
// ID beside its state) and
// take no lock. The table is not a Go map: hashing a key and matching its
// group cost a Pool pair on 16 streams a fifth of its time. The IDs sit in the index
// itself, not only in the states: reading each state's ID would read the
// cache line of its mutex, which its own goroutine writes on every
// operation, and with 4 or 8 busy streams that false sharing made every
// Pool pair about ten times slower. (sync.Map would box the uint64 key on
// every lookup.)
//
// Building an index costs O(streams), so a state added to a table of more
// than streamScan goes first into recent, a map under mu, and the index is
// rebuilt only once lookups have found states in recent as many times as
// the table has states (as sync.Map promotes its dirty map): a program
// with a hundred thousand streams pays O(1) per stream, amortized, and a
// stream's first few operations take mu. Dropping states rebuilds the
// index at once (Release drops many in one call, dropIf).
//
// Invariants: a published index is never modified; every state is in the
// published index or in recent (or both), at most one per stream ID; the
// order list holds every state in the order their streams were first
// seen, so that a resource that walks its streams (to steal, to release)
// does so in the same order on every run, and a published order list is
// never modified either (appends go beyond its length; drops copy).

package mr

import (
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// streamScan is the number of streams up to which lookup scans an array
// instead of hashing.
const streamScan = 8

type streamTable[T any] struct {
	cur   atomic.Pointer[streamIndex[T]] // lookups without a lock
	order atomic.Pointer[[]*T]           // every state, in order of first use
	// nrecent is len(recent), readable without mu, so that a lookup of a
	// stream the table does not hold takes no lock when recent is empty.
	nrecent atomic.Int64

	mu     sync.Mutex
	ids    []uint64 // ids[i] is the stream of (*order)[i]
	recent map[uint64]*T
	misses int // lookups served from recent since cur was built
}

// streamIndex is one published index.
type streamIndex[T any] struct {
	// first is the first stream's ID and state, side by side at the
	// start, for first's check, which every request of a resource's only
	// stream makes: on one cache line (an index is 192 bytes, a size
	// class whose objects the Go heap places at multiples of 192 from a
	// page; TestStreamIndexFirstLine checks it), where the check read
	// ids[0] and small[0], 64 bytes apart, on two. A call whose caches
	// the host's work evicted (the C ABI inside PyTorch) misses on each
	// line it touches.
	first indexSlot[T]
	n     int
	// The first min(n, streamScan) IDs and their states (the first
	// stream's also when n > streamScan, for lookup's inline check).
	ids   [streamScan]uint64
	small [streamScan]*T
	// When n > streamScan: slots[i].id is 0 or the ID whose state is
	// slots[i].v; an ID's home slot is its Fibonacci hash's top bits, and
	// linear probing from there reaches it before any empty slot. Each ID
	// sits beside its state, so that a lookup among many streams, whose
	// slot is seldom in cache, waits for one cache line, not two. zero is
	// the state of a stream whose ID is 0, which no backend hands out.
	slots []indexSlot[T]
	shift uint
	zero  *T
}

// indexSlot is one slot of a streamIndex's table.
type indexSlot[T any] struct {
	id uint64
	v  *T
}

// first returns the state of the table's first stream if id is its ID,
// else nil: the only stream of most resources, checked without a call
// (the call to lookup cost a Pool pair on one stream a fifth of its
// instructions). Callers fall back to lookup.
func (t *streamTable[T]) first(id uint64) *T {
	if l := t.cur.Load(); l != nil && l.first.id == id {
		return l.first.v
	}
	return nil
}

// lookup returns the state of stream id, or nil.
func (t *streamTable[T]) lookup(id uint64) *T {
	if v := t.cur.Load().find(id); v != nil {
		return v
	}
	if t.nrecent.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.recent[id]
	if v != nil {
		t.misses++
		if t.misses >= len(t.ids) {
			t.publishLocked()
		}
	}
	return v
}

// find looks id up in the index l (which may be nil).
func (l *streamIndex[T]) find(id uint64) *T {
	if l == nil {
		return nil
	}
	if l.n <= streamScan {
		for i, x := range l.ids[:l.n] {
			if x == id {
				return l.small[i]
			}
		}
		return nil
	}
	if id == 0 {
		return l.zero
	}
	mask := len(l.slots) - 1
	for i := int((id * 0x9E3779B97F4A7C15) >> l.shift); ; i = (i + 1) & mask {
		switch s := &l.slots[i]; s.id {
		case id:
			return s.v
		case 0:
			return nil
		}
	}
}

// get returns the state of stream id, creating it with mk if there is
// none. mk runs under the table's lock, before the new state is visible.
func (t *streamTable[T]) get(id uint64, mk func() *T) *T {
	if v := t.lookup(id); v != nil {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v := t.cur.Load().find(id); v != nil {
		return v
	}
	if v := t.recent[id]; v != nil {
		return v
	}
	v := mk()
	t.ids = append(t.ids, id)
	var list []*T
	if o := t.order.Load(); o != nil {
		list = *o
	}
	list = append(list, v)
	t.order.Store(&list)
	if len(t.ids) <= streamScan {
		t.publishLocked() // cheap, and small tables stay lock-free
		return v
	}
	if t.recent == nil {
		t.recent = make(map[uint64]*T)
	}
	t.recent[id] = v
	t.nrecent.Store(int64(len(t.recent)))
	return v
}

// drop forgets the state of stream id if it is v.
func (t *streamTable[T]) drop(id uint64, v *T) {
	t.dropIf(func(x *T) bool { return x == v })
}

// dropIf forgets every state for which drop returns true, in one pass, and
// returns how many it dropped. drop runs under the table's lock.
func (t *streamTable[T]) dropIf(drop func(*T) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.order.Load()
	if o == nil {
		return 0
	}
	list := make([]*T, 0, len(*o))
	ids := make([]uint64, 0, len(t.ids))
	for i, v := range *o {
		if drop(v) {
			delete(t.recent, t.ids[i])
			continue
		}
		list = append(list, v)
		ids = append(ids, t.ids[i])
	}
	n := len(*o) - len(list)
	if n == 0 {
		return 0
	}
	t.ids = ids
	t.order.Store(&list)
	t.publishLocked()
	return n
}

// publishLocked builds and publishes the index of every state, and empties
// recent. Called with t.mu.
func (t *streamTable[T]) publishLocked() {
	var list []*T
	if o := t.order.Load(); o != nil {
		list = *o
	}
	l := &streamIndex[T]{n: len(list)}
	copy(l.ids[:], t.ids)
	copy(l.small[:], list)
	if len(list) > 0 {
		l.first = indexSlot[T]{t.ids[0], list[0]}
	}
	if l.n > streamScan {
		size := 1 << log2(4*l.n-1) // a power of two, at least 2n
		l.slots = make([]indexSlot[T], size)
		l.shift = uint(64 - log2(size))
		mask := size - 1
		for j, id := range t.ids {
			if id == 0 {
				l.zero = list[j]
				continue
			}
			i := int((id * 0x9E3779B97F4A7C15) >> l.shift)
			for l.slots[i].id != 0 {
				i = (i + 1) & mask
			}
			l.slots[i] = indexSlot[T]{id, list[j]}
		}
	}
	t.cur.Store(l)
	clear(t.recent)
	t.nrecent.Store(0)
	t.misses = 0
}

// all returns every state in the order their streams were first seen
// (the slice must not be modified).
func (t *streamTable[T]) all() []*T {
	if o := t.order.Load(); o != nil {
		return *o
	}
	return nil
}

// each calls fn with every stream ID and its state, in the order the
// streams were first seen, under the table's lock (fn must not call back
// into the table).
func (t *streamTable[T]) each(fn func(id uint64, v *T)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, v := range t.all() {
		fn(t.ids[i], v)
	}
}

// len is the number of states.
func (t *streamTable[T]) len() int { return len(t.all()) }

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
