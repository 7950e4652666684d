// The fast slot of a pool stream: one block freed on its home, which the
// next request of the same size on that stream takes back, and whose free
// puts it back, each with one compare-and-swap and no lock.
//
// Why. A pair served from the quick cache takes the stream's mutex twice,
// and on the H100 machine's host (KVM on a 2.1 GHz Xeon) an uncontended
// lock and unlock cost 17-34 ns, a compare-and-swap 13-14 ns and an
// atomic add 9-10 ns (two leases): the two mutexes were 40% of an 85 ns
// pair in a CPU profile. The
// repeated pair (a layer's activations, a workspace, a staging buffer) is
// the commonest pattern a caching allocator sees, so the pool serves its
// last freed block with one atomic operation per call instead of two.
//
// How. The slot is a state word (fstate) with the block's address (fptr)
// and descriptor (fblock) beside it. The word holds a tag (empty, cached:
// the block may be taken, live: it was taken and not freed), the request
// size the block was last handed out for (the fast path serves exactly
// that size again, up to 1 MiB), an arming epoch and the number of fast
// allocations since the slot was armed. Allocate, on a known stream,
// loads the word and, if it is cached for its size, swaps it to live; the
// free of the slot's address with that size swaps it back to cached. A
// compare-and-swap that succeeds proves the word did not change since it
// was loaded, so the address read in between belongs to the same arming
// (every arming stores the address before the word, with a new epoch).
//
// The mutex side. Everything else keeps to the stream's mutex, and every
// holder of it takes it with lock, which first settles the slot: it swaps
// the word to empty and files the block as the locked code expects to
// find it, a live block in the live map (with its request counted as used,
// as markLive does) or a cached one in the quick cache, and adds the fast
// allocations to the stream's counters. So, under the mutex, the slot is
// empty and every invariant of pool_stream.go and pool_quick.go holds as
// if the fast path did not exist; the fast path, finding the word empty
// or changed, falls back to the mutex. A free on the block's home arms the
// slot again (arm) when it is empty: the block is counted as cached, as
// quickPut counts it, and the stream is listed dirty, so that Usage, which
// visits the dirty streams under their mutexes, settles it.
//
// What it keeps exact. Used and its peak: the fast path only returns to
// levels the locked path already counted. While one stream uses the pool
// an allocation flushes any rise into the total, and the block was live
// at its request size with the stream's other blocks as they are now (any
// change to those goes through the mutex, which settles the slot); with
// several streams, a slot is armed only if the stream's unflushed change
// plus the block stays within the quantum, so PeakUsed keeps its bound.
// Counters: a fast allocation is counted in the word (at most
// fastGenMax before the path falls back to the mutex, which adds them to
// the stream's counters). Bad frees: a free of the slot's address with
// another size, or of any other address, or of the block while it is
// cached, takes the mutex and gets the error it gets without the slot.
//
// Armed only with the block the stream handed out last (st.last): the
// pattern the slot serves is a pair, and a free of an older block (blocks
// freed in another order than they were allocated, random churn) would
// otherwise arm and settle the slot at every operation, a compare-and-swap
// and two stores more than the quick cache costs. Not armed either: with a
// ReleaseThreshold (a free of a chunk's last live block
// must decide whether to give the chunk back), for requests above
// fastMaxReq, or when the stream's unflushed used bytes would pass the
// quantum.
//
// The epoch has 33 bits: a compare-and-swap could succeed on a word that
// was settled and re-armed with the same epoch only if a goroutine stalled
// between its two loads while the slot was re-armed 2^33 times, each
// through the mutex.

package mr

import "github.com/streamalloc/streamalloc/gpu"

const (
	fastTagBits   = 2
	fastReqBits   = 21 // requests up to fastMaxReq
	fastGenBits   = 8
	fastEpochBits = 64 - fastTagBits - fastReqBits - fastGenBits

	fastEmpty  = 0
	fastCached = 1
	fastLive   = 2
	fastTag    = 1<<fastTagBits - 1

	fastReqShift   = fastTagBits
	fastGenShift   = fastReqShift + fastReqBits
	fastEpochShift = fastGenShift + fastGenBits

	// fastMaxReq is the largest request the fast slot serves: the pool's
	// usedQuantum, so that a live fast block keeps PeakUsed within its
	// bound.
	fastMaxReq = usedQuantum
	fastGenMax = 1<<fastGenBits - 1
	fastGenOne = 1 << fastGenShift
	fastTagReq = 1<<fastGenShift - 1 // the tag and request bits
	fastGenAll = fastGenMax << fastGenShift
	fastLiveOf = fastLive - fastCached // added to a cached word to make it live
)

func fastReq(v uint64) int    { return int(v>>fastReqShift) & (1<<fastReqBits - 1) }
func fastGen(v uint64) uint64 { return v >> fastGenShift & fastGenMax }

// fastAllocate takes the slot's block for a request of size bytes, and
// returns its address, or 0 if the slot cannot serve it.
//
// One comparison checks the tag and the request size: a size of
// fastReqBits or more has bits above the mask and never matches.
func (st *poolStream) fastAllocate(size int, owner uint32) gpu.DevicePtr {
	v := st.fstate.Load()
	if v&fastTagReq != uint64(size)<<fastReqShift|fastCached || v&fastGenAll == fastGenAll || st.fowner.Load() != owner {
		return 0
	}
	ptr := st.fptr.Load()
	if !st.fstate.CompareAndSwap(v, v+fastLiveOf+fastGenOne) {
		return 0
	}
	return gpu.DevicePtr(ptr)
}

// fastFree puts the slot's block back if ptr is its address and size
// the request it was handed out for, and reports whether it did.
func (st *poolStream) fastFree(ptr gpu.DevicePtr, size int, owner uint32) bool {
	v := st.fstate.Load()
	if v&fastTagReq != uint64(size)<<fastReqShift|fastLive || st.fptr.Load() != uint64(ptr) || st.fowner.Load() != owner {
		return false
	}
	return st.fstate.CompareAndSwap(v, v-fastLiveOf)
}

// lock takes the stream's mutex, settles its fast slot and, if a walker
// parked the stream, lists it for the walkers again (pool_walk.go). Every
// holder of st.mu takes it this way.
//
// The three checks are one test: on a busy stream none of them holds, and
// lockSettle, which does the work, is not called.
func (st *poolStream) lock() {
	st.mu.Lock()
	if st.fstate.Load() != fastEmpty || st.parked || !st.lfStale {
		st.lockSettle()
	}
}

// lockSettle is what lock does when the fast slot is armed, the stream is
// parked or its largest free block is not listed as stale. Called with
// st.mu.
//
//go:noinline
func (st *poolStream) lockSettle() {
	if st.fstate.Load() != fastEmpty {
		st.settle()
	}
	if st.parked {
		st.unpark()
	}
	if !st.lfStale {
		st.markLFStale()
	}
}

// settle empties the fast slot: its block goes where the locked code
// expects it, and its fast allocations into the stream's counters. Called
// with st.mu.
//
//go:noinline
func (st *poolStream) settle() {
	var v uint64
	for {
		v = st.fstate.Load()
		if v == fastEmpty {
			return
		}
		if st.fstate.CompareAndSwap(v, fastEmpty) {
			break
		}
	}
	b := st.fblock
	st.fblock = nil
	// fptr keeps the address: it is read only with a word of its arming.
	// Every fast allocation was a quick hit. The block was counted as
	// cached when the slot was armed.
	n := fastGen(v)
	st.stats.quickHits += n
	b.c.cached--
	if v&fastTag == fastLive {
		st.stats.allocs += n - 1 // markLive counts the last one
		st.markLive(b, fastReq(v), b.owner)
		return
	}
	st.stats.allocs += n
	st.quickPut(b)
}

// arm puts b, the block the stream handed out last (st.last), which was
// live for req bytes and is in no list now (unlive has run), in the empty
// fast slot, if the slot may hold it, and reports whether it did. The
// caller checks b == st.last, so that the free of any other block (random
// churn) makes no call. Called with st.mu.
func (st *poolStream) arm(b *poolBlock, req int) bool {
	if req > fastMaxReq || st.pool.opts.ReleaseThreshold != 0 || st.unflushed+int64(req) > usedQuantum {
		return false
	}
	b.state = blockCached
	b.c.cached++
	st.fepoch++
	st.fblock = b
	if st.fptr.Load() != uint64(b.ptr) {
		st.fptr.Store(uint64(b.ptr))
	}
	if st.fowner.Load() != b.owner {
		st.fowner.Store(b.owner)
	}
	st.fstate.Store(st.fepoch<<fastEpochShift | uint64(req)<<fastReqShift | fastCached)
	if !st.dirty {
		st.markDirty() // so that Usage settles it (pool_walk.go)
	}
	return true
}
