// liveTable: the pointers a driver-backed resource (direct, async,
// managed) has handed out, so that bad frees are rejected with a typed
// error before they reach the driver, where they would be undefined
// behaviour.
//
// The table is split into shards by a hash of the address, each with its
// own mutex, so goroutines on different streams rarely contend: the lock a
// pair takes is one of liveShards, chosen by address, never one lock for
// the whole resource.
//
// Invariants: a pointer is in at most one shard's live map (its own). take
// removes a pointer atomically, so of two racing frees of one pointer
// exactly one succeeds; a failed take changes nothing. Each shard also
// remembers up to maxFreedPerShard pointers that were freed and not handed
// out again, to tell a double free (ErrDoubleFree) from a pointer never
// seen (ErrUnknownPointer); when that memory is full an arbitrary old entry
// is forgotten, so an old double free may be reported as an unknown
// pointer, never the reverse.

package mr

import (
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	liveShards       = 64
	maxFreedPerShard = 256
)

// liveEntry is what a resource remembers about one live allocation.
type liveEntry struct {
	size   int
	stream gpu.Stream // the allocation's stream
	graph  uint64     // the capture that allocated it (a graph allocation), or 0
}

type liveShard struct {
	mu    sync.Mutex
	live  map[gpu.DevicePtr]liveEntry
	freed map[gpu.DevicePtr]struct{}
	_     [40]byte // keep shards on separate cache lines
}

type liveTable struct {
	shards [liveShards]liveShard
}

func (t *liveTable) shard(p gpu.DevicePtr) *liveShard {
	// Fibonacci hashing: allocations are aligned, so the low bits carry
	// no information; the multiply spreads the high ones.
	return &t.shards[(uint64(p)*0x9E3779B97F4A7C15)>>(64-6)]
}

// insert records p as live.
func (t *liveTable) insert(p gpu.DevicePtr, e liveEntry) {
	sh := t.shard(p)
	sh.mu.Lock()
	if sh.live == nil {
		sh.live = make(map[gpu.DevicePtr]liveEntry)
	}
	sh.live[p] = e
	delete(sh.freed, p)
	sh.mu.Unlock()
}

// take removes p, which must be live with the given size, and returns its
// entry. Errors match ErrUnknownPointer, ErrDoubleFree or ErrSizeMismatch
// and leave the table as it was.
func (t *liveTable) take(p gpu.DevicePtr, size int) (liveEntry, error) {
	sh := t.shard(p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.live[p]
	if !ok {
		if _, freed := sh.freed[p]; freed {
			return liveEntry{}, fmt.Errorf("pointer %#x: %w", uint64(p), ErrDoubleFree)
		}
		return liveEntry{}, fmt.Errorf("pointer %#x: %w", uint64(p), ErrUnknownPointer)
	}
	if e.size != size {
		return liveEntry{}, fmt.Errorf("pointer %#x of %d bytes freed as %d: %w", uint64(p), e.size, size, ErrSizeMismatch)
	}
	delete(sh.live, p)
	if sh.freed == nil {
		sh.freed = make(map[gpu.DevicePtr]struct{})
	}
	if len(sh.freed) >= maxFreedPerShard {
		for old := range sh.freed {
			delete(sh.freed, old)
			break
		}
	}
	sh.freed[p] = struct{}{}
	return e, nil
}

// lookup returns p's entry if p is live.
func (t *liveTable) lookup(p gpu.DevicePtr) (liveEntry, bool) {
	sh := t.shard(p)
	sh.mu.Lock()
	e, ok := sh.live[p]
	sh.mu.Unlock()
	return e, ok
}

// restore undoes a take whose free then failed: p is live again.
func (t *liveTable) restore(p gpu.DevicePtr, e liveEntry) { t.insert(p, e) }

// count returns the number of live pointers and their bytes.
func (t *liveTable) count() (n int, bytes uint64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.live)
		for _, e := range sh.live {
			bytes += uint64(e.size)
		}
		sh.mu.Unlock()
	}
	return n, bytes
}
