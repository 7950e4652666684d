// The sizes of live allocations whose host frees without a size (CuPy's
// free function takes only the pointer): a map split over shards by
// address, so that threads freeing different pointers rarely share a lock.

package pluggable

import "sync"

const sizeShards = 16

type sizeTable struct {
	shards [sizeShards]struct {
		mu sync.Mutex
		m  map[uintptr]uint64
		_  [40]byte // keep shards on separate cache lines
	}
}

func (t *sizeTable) shard(p uintptr) int { return int((p >> 8) % sizeShards) }

func (t *sizeTable) put(p uintptr, size uint64) {
	sh := &t.shards[t.shard(p)]
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[uintptr]uint64)
	}
	sh.m[p] = size
	sh.mu.Unlock()
}

// take removes p and returns its size, or false if p is not there.
func (t *sizeTable) take(p uintptr) (uint64, bool) {
	sh := &t.shards[t.shard(p)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	size, ok := sh.m[p]
	if ok {
		delete(sh.m, p)
	}
	return size, ok
}
