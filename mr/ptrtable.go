// ptrTable: the live allocations an adaptor has seen, with a value of the
// adaptor's choosing per allocation (the stream for statistics, the stack
// for tracking, the upstream block for alignment).
//
// Every adaptor keeps one, so that a free of a pointer it never handed out,
// a double free and a free with the wrong size are refused with a typed
// error before they reach the wrapped resource, and are never counted.
//
// The table is split into shards by a hash of the address, each with its
// own mutex: goroutines that free different pointers rarely contend.
//
// Invariants:
//   - A pointer is in at most one shard's map (its own).
//   - take runs the caller's free function under the shard's lock and
//     removes the pointer only if it succeeds. So of two racing frees of one
//     pointer exactly one reaches the upstream; a failed free leaves the
//     entry as it was; and an allocation that gets the same address back
//     from the upstream cannot be recorded (insert takes the same lock)
//     before the free's own bookkeeping (a log line, a counter) is done.
//     That keeps an adaptor's log and counters in the order the upstream
//     handed the memory out.
//   - Each shard remembers the last freedRing pointers it freed, to tell a
//     double free (ErrDoubleFree) from a pointer never seen
//     (ErrUnknownPointer). An older double free reads as an unknown
//     pointer, never the reverse; a pointer handed out again is live and
//     the ring is not consulted for it.

package mr

import (
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	ptrShards = 64
	freedRing = 32
)

// ptrRecord is one live allocation: its size and the adaptor's value.
type ptrRecord[V any] struct {
	size int
	v    V
}

type ptrShard[V any] struct {
	mu    sync.Mutex
	live  map[gpu.DevicePtr]ptrRecord[V]
	freed [freedRing]gpu.DevicePtr
	next  int
}

type ptrTable[V any] struct {
	shards [ptrShards]ptrShard[V]
}

func (t *ptrTable[V]) shard(p gpu.DevicePtr) *ptrShard[V] {
	// Allocations are aligned, so the low bits say nothing; a Fibonacci
	// multiply spreads the high ones over the shard index.
	return &t.shards[(uint64(p)*0x9E3779B97F4A7C15)>>(64-6)]
}

// insert records p as live with size and v. If then is not nil it runs
// under the shard's lock after the record is made (a log line that must
// not overtake the free of the same address). If p was already recorded
// (the upstream handed out an address the adaptor believes live, which
// only happens if the memory was freed around the adaptor) the old record
// is replaced and returned.
func (t *ptrTable[V]) insert(p gpu.DevicePtr, size int, v V, then func()) (old ptrRecord[V], replaced bool) {
	sh := t.shard(p)
	sh.mu.Lock()
	if sh.live == nil {
		sh.live = make(map[gpu.DevicePtr]ptrRecord[V])
	}
	old, replaced = sh.live[p]
	sh.live[p] = ptrRecord[V]{size: size, v: v}
	if then != nil {
		then()
	}
	sh.mu.Unlock()
	return old, replaced
}

// take checks that p is live with the given size and calls free with its
// value under the shard's lock. If free returns nil, p is removed and its
// value returned; if free fails, p stays live and free's error is
// returned unchanged. A pointer that is not live, or is live with another
// size, gives an error matching ErrDoubleFree, ErrUnknownPointer or
// ErrSizeMismatch, and free is not called.
func (t *ptrTable[V]) take(p gpu.DevicePtr, size int, free func(v V) error) (V, error) {
	sh := t.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, ok := sh.live[p]
	if !ok {
		var zero V
		for _, f := range sh.freed {
			if f == p {
				return zero, fmt.Errorf("pointer %#x: %w", uint64(p), ErrDoubleFree)
			}
		}
		return zero, fmt.Errorf("pointer %#x: %w", uint64(p), ErrUnknownPointer)
	}
	if r.size != size {
		return r.v, fmt.Errorf("pointer %#x of %d bytes freed as %d: %w", uint64(p), r.size, size, ErrSizeMismatch)
	}
	if free != nil {
		if err := free(r.v); err != nil {
			return r.v, err
		}
	}
	delete(sh.live, p)
	sh.freed[sh.next] = p
	sh.next = (sh.next + 1) % freedRing
	return r.v, nil
}

// lookup returns p's record without changing anything.
func (t *ptrTable[V]) lookup(p gpu.DevicePtr) (ptrRecord[V], bool) {
	sh := t.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, ok := sh.live[p]
	return r, ok
}

// each calls fn for every live allocation, one shard at a time under that
// shard's lock (fn must not call back into the table).
func (t *ptrTable[V]) each(fn func(p gpu.DevicePtr, size int, v V)) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for p, r := range sh.live {
			fn(p, r.size, r.v)
		}
		sh.mu.Unlock()
	}
}

// count returns the number of live allocations and their bytes.
func (t *ptrTable[V]) count() (n int, bytes uint64) {
	t.each(func(_ gpu.DevicePtr, size int, _ V) {
		n++
		bytes += uint64(size)
	})
	return n, bytes
}
