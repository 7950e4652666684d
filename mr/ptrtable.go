// ptrTable: the live allocations a resource or an adaptor has handed out,
// each with its size and a value of the owner's choosing (the allocating
// stream for the driver-backed resources, the stream's counters for
// statistics, the call stack for tracking, the upstream block for
// alignment), and a memory of recent frees.
//
// Every resource that does not carve memory itself (Direct, Managed, Async,
// the large allocations of Arena and Binning, Pinned) keeps one, and so does
// every adaptor over an upstream that does not check owners (owner.go) or
// that needs a record per allocation (Tracking, Aligned, Stats per stream),
// so that a free of a pointer it never handed out, a double free
// and a free with the wrong size are refused with a typed error before
// they reach the driver (where they are undefined behaviour) or the wrapped
// resource, and are never counted.
//
// Sharding. The table is split into 64 shards by a Fibonacci hash of the
// address, each with its own mutex: the lock a pair takes is one of 64,
// chosen by address, never one lock for the whole resource, so goroutines
// that free different pointers rarely contend.
//
// Within a shard, the live allocations are an open-addressing hash table
// (ptrSlots: linear probing over a power-of-two array, indexed by the
// hash bits below the shard's, deletion by backward shift, so there are no
// tombstones), not a Go map: an insert and a delete of a map cost an
// adaptor's pair about four times what the rest of it costs, and a map
// emptied by a delete draws a random number to reseed its hash.
//
// Padding. Every shard ends with a whole cache line of padding. A table
// lives inside its owner's struct at whatever offset, so rounding a shard
// up to a multiple of the line would not keep two shards off one line; a
// full line between the last word of one shard (its memory of frees,
// written by every free) and the first of the next (its mutex) does,
// whatever the alignment. Without it, frees on two goroutines that hash to
// neighbouring shards would pass one line back and forth between cores.
//
// Memory of frees. Each shard remembers the last freedRing pointers freed
// from it, in a ring: a pointer that is not live and is in the ring is a
// double free (ErrDoubleFree), one that is not is unknown
// (ErrUnknownPointer). A ring rather than a set with a bound: it costs no
// allocation and no hashing on a free, its memory is fixed (32 pointers a
// shard, 2048 a table), and what it forgets is always the oldest free, so
// the answer to a bad free does not depend on map iteration order. A
// double free further back than that reads as an unknown pointer, never
// the reverse: still a typed error that changes nothing. A pointer handed
// out again is live and the ring is not consulted for it.
//
// Two ways to free. An adaptor calls take(p, size, free), which runs free
// (the upstream's Deallocate) under the shard's lock and removes p only if
// it succeeds: of two racing frees of p exactly one reaches the upstream,
// a failed free leaves p live, and an allocation that gets p back from the
// upstream cannot be recorded (insert takes the same lock) before the
// free's own bookkeeping (a log line, a counter) is done, which keeps an
// adaptor's log and counters in the order the upstream handed the memory
// out. A resource calls take(p, size, nil), which claims p at once, then
// frees with no lock held (a driver call, a synchronization of streams, an
// upstream free that may block) and calls restore if that fails: a slow
// free then never stalls the other frees of its shard, and a resource has
// no log whose order the lock would keep. Between take and restore a
// racing free of p reads as a double free.
//
// Invariants: a pointer is in at most one shard's table (its own); a
// failed take changes nothing. In a shard's table, keys are non-zero (0
// marks an empty slot), every key is reachable from its home slot without
// crossing an empty slot, and the table is at most 3/4 full; it grows (the
// only time it allocates) by doubling and never shrinks, like a Go map.

package mr

import (
	"sync"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	ptrShardBits = 6
	ptrShards    = 1 << ptrShardBits
	freedRing    = 32
	// cacheLine is the size of a cache line on amd64 and arm64 servers.
	cacheLine = 64
	// ptrSlotsMin is the size of a shard's table when it first holds an
	// allocation.
	ptrSlotsMin = 8
)

// address is the type of a table's keys: a device pointer, or a host
// address (Pinned).
type address interface{ ~uint64 | ~uintptr }

// ptrRecord is one live allocation: its size and the owner's value.
type ptrRecord[V any] struct {
	size int
	v    V
}

type ptrShard[K address, V any] struct {
	mu    sync.Mutex
	live  ptrSlots[K, V]
	next  int // where the next free goes in freed
	freed [freedRing]K
	_     [cacheLine]byte // see the file comment
}

type ptrTable[K address, V any] struct {
	shards [ptrShards]ptrShard[K, V]
}

// ptrHash spreads an address over 64 bits: allocations are aligned, so
// the low bits say nothing, and a Fibonacci multiply moves the rest into
// the high ones. The top ptrShardBits choose the shard, the bits below
// them the home slot in the shard's table.
func ptrHash[K address](p K) uint64 { return uint64(p) * 0x9E3779B97F4A7C15 }

func (t *ptrTable[K, V]) shard(p K) *ptrShard[K, V] {
	return &t.shards[t.shardIndex(p)]
}

// shardIndex is the index of p's shard, for owners that keep something
// per shard beside the table, guarded by the shard's lock (changed in
// insert's then or take's free, read in underShard).
func (t *ptrTable[K, V]) shardIndex(p K) int { return int(ptrHash(p) >> (64 - ptrShardBits)) }

// underShard runs fn under the lock of shard i.
func (t *ptrTable[K, V]) underShard(i int, fn func()) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	fn()
}

// insert records p as live with size and v. If then is not nil it runs
// under the shard's lock after the record is made (a log line that must
// not overtake the free of the same address). If p was already recorded
// (the upstream handed out an address the owner believes live, which only
// happens if the memory was freed around it) the old record is replaced
// and returned.
func (t *ptrTable[K, V]) insert(p K, size int, v V, then func()) (old ptrRecord[V], replaced bool) {
	sh := t.shard(p)
	sh.mu.Lock()
	old, replaced = sh.live.put(p, ptrRecord[V]{size: size, v: v})
	if then != nil {
		then()
	}
	sh.mu.Unlock()
	return old, replaced
}

// take checks that p is live with the given size and calls free (if not
// nil) with its value under the shard's lock. If free returns nil, or is
// nil, p is removed and its value returned; if free fails, p stays live and
// free's error is returned unchanged. A pointer that is not live, or is
// live with another size, gives an error matching ErrDoubleFree,
// ErrUnknownPointer or ErrSizeMismatch, and free is not called.
func (t *ptrTable[K, V]) take(p K, size int, free func(v V) error) (V, error) {
	sh := t.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.live.find(p)
	if i < 0 {
		var zero V
		return zero, sh.unknown(p)
	}
	r := sh.live.slots[i].r
	if r.size != size {
		return r.v, sizeMismatchError(gpu.DevicePtr(p), r.size, size)
	}
	if free != nil {
		if err := free(r.v); err != nil {
			return r.v, err
		}
		// free ran under the lock: p is still in slot i.
	}
	sh.live.delAt(i)
	sh.freed[sh.next] = p
	sh.next = (sh.next + 1) % freedRing
	return r.v, nil
}

// unknown is the error of a free of p, which is not live: a double free if
// p is among the shard's recent frees. Called with sh.mu.
func (sh *ptrShard[K, V]) unknown(p K) error {
	for _, f := range sh.freed {
		if f == p {
			return pointerError(gpu.DevicePtr(p), ErrDoubleFree)
		}
	}
	return pointerError(gpu.DevicePtr(p), ErrUnknownPointer)
}

// restore makes p live again with size and v after take(p, size, nil)
// claimed it and the owner's free then failed.
func (t *ptrTable[K, V]) restore(p K, size int, v V) { t.insert(p, size, v, nil) }

// lookup returns p's record without changing anything.
func (t *ptrTable[K, V]) lookup(p K) (ptrRecord[V], bool) {
	sh := t.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.live.find(p); i >= 0 {
		return sh.live.slots[i].r, true
	}
	return ptrRecord[V]{}, false
}

// each calls fn for every live allocation, one shard at a time under that
// shard's lock (fn must not call back into the table).
func (t *ptrTable[K, V]) each(fn func(p K, size int, v V)) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, s := range sh.live.slots {
			if s.key != 0 {
				fn(s.key, s.r.size, s.r.v)
			}
		}
		sh.mu.Unlock()
	}
}

// count returns the number of live allocations and their bytes.
func (t *ptrTable[K, V]) count() (n int, bytes uint64) {
	t.each(func(_ K, size int, _ V) {
		n++
		bytes += uint64(size)
	})
	return n, bytes
}

// ptrSlots is the hash table of one shard: open addressing with linear
// probing over a power-of-two array, home slots taken from the hash bits
// just below the shard's. The zero value is empty.
type ptrSlots[K address, V any] struct {
	slots []ptrSlot[K, V]
	n     int  // keys in slots
	shift uint // 64 - log2(len(slots))
}

type ptrSlot[K address, V any] struct {
	key K
	r   ptrRecord[V]
}

func (m *ptrSlots[K, V]) home(k K) int {
	return int((ptrHash(k) << ptrShardBits) >> m.shift)
}

// find returns the slot of k, or -1.
func (m *ptrSlots[K, V]) find(k K) int {
	if m.n == 0 || k == 0 {
		return -1
	}
	mask := len(m.slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		switch m.slots[i].key {
		case k:
			return i
		case 0:
			return -1
		}
	}
}

// put sets k's record and returns the one it replaces, if any.
func (m *ptrSlots[K, V]) put(k K, r ptrRecord[V]) (old ptrRecord[V], replaced bool) {
	if (m.n+1)*4 > len(m.slots)*3 {
		m.grow()
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for ; m.slots[i].key != 0; i = (i + 1) & mask {
		if m.slots[i].key == k {
			old = m.slots[i].r
			m.slots[i].r = r
			return old, true
		}
	}
	m.slots[i] = ptrSlot[K, V]{key: k, r: r}
	m.n++
	return old, false
}

// delAt empties slot i, which holds a key, and moves later keys of its
// probe run back into the hole unless that would put them before their
// home slot.
func (m *ptrSlots[K, V]) delAt(i int) {
	mask := len(m.slots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		k := m.slots[j].key
		if k == 0 {
			break
		}
		// The key at j may move to i iff i lies cyclically in [home, j).
		if h := m.home(k); (j-h)&mask >= (j-i)&mask {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = ptrSlot[K, V]{}
	m.n--
}

func (m *ptrSlots[K, V]) grow() {
	old := m.slots
	size := max(ptrSlotsMin, 2*len(old))
	// A line of spare capacity after the slots keeps the next object on
	// the heap, often another shard's slots, off the line of the last
	// ones: goroutines on different streams write different shards at
	// once.
	m.slots = make([]ptrSlot[K, V], size, size+(cacheLine+int(unsafe.Sizeof(ptrSlot[K, V]{}))-1)/int(unsafe.Sizeof(ptrSlot[K, V]{})))
	m.shift = uint(64 - log2(size))
	m.n = 0
	mask := size - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := m.home(s.key)
		for m.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = s
		m.n++
	}
}
