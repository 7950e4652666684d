// Chunks and blocks of a Pool.
//
// A chunk is one allocation from the pool's upstream. It is cut into
// blocks that tile it exactly: first, then each block's next, in address
// order, with no gap and no overlap. A block is live (handed out), free
// (filed in its home stream's tlsf, reusable by that stream at once),
// cached (freed on its home and kept whole in the home's quick cache for a
// request of its size, pool_quick.go) or pending (freed on another stream
// than the chunk's home, filed in the home's pending list for that stream,
// reusable only after the home waits on an event recorded on the freeing
// stream).
//
// Every chunk has one home stream at a time (chunk.home). All of its
// blocks, and its counters, are guarded by the home's mutex; that is what
// lets a stream split and coalesce without any lock but its own. The home
// changes only while the chunk has no live or cached block (a steal or a
// release), under the old home's mutex, so the live blocks of a chunk are
// always in its home's live map. home is nil while a chunk is being
// released.
//
// Pool.chunks, a spanIndex (spanindex.go), holds every chunk, changed
// under Pool.mu when the pool grows or releases; Deallocate reads it
// without a lock to find the chunk of a pointer that is not live on the
// calling stream.

package mr

import (
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

type poolBlockState uint8

const (
	blockFree poolBlockState = iota
	blockLive
	blockPending
	blockCached   // in the home's quick cache (pool_quick.go)
	blockUnmapped // a growable chunk's address space with no memory (pool_vgrow.go)
)

// block is a piece of a chunk. Descriptors are recycled through the spare
// list of a poolStream, so the hot path allocates no Go memory.
//
// The fields that coalescing reads of a neighbour and that a tlsf reads of
// the blocks it scans or unlinks (state, class, size, links) come first,
// in 48 bytes: of a free, most of a descriptor's cache misses are on
// neighbours and list members, and with those fields together some
// descriptors of a batch (80 bytes each) serve them from one cache line
// instead of two: half of a batch that starts on a line (the first, of
// 4), one in four of a larger one, which the heap places 8 or 56 bytes
// past a line (after its header). c lies on the second line of most.
type poolBlock struct {
	state  poolBlockState
	handed bool   // ptr was handed out by Allocate (for diagnose)
	fl, sl uint8  // free: the tlsf class it is filed in (set by insert)
	owner  uint32 // live: the Owner it was handed out to (owner.go)
	size   int    // a multiple of Alignment

	prev, next   *poolBlock // neighbours in c, by address
	lprev, lnext *poolBlock // links in a tlsf class, a pending list or the spare list

	ptr gpu.DevicePtr
	req int // the size asked for, while live
	c   *poolChunk
	// freedBy is, for a pending block, the stream the free was enqueued
	// on (and, for a block of a chunk between detach and refile, the
	// stream it waits for); nil in every other state, so that a free
	// need not write it.
	freedBy *poolStream
}

func (b *poolBlock) end() gpu.DevicePtr { return b.ptr + gpu.DevicePtr(b.size) }

// chunk is one upstream allocation.
type poolChunk struct {
	// Guarded by home.mu. The counters that every allocation and free of
	// the home change, and small, which they read, come first, within 32
	// bytes: one cache line, not two, for each chunk a free or an
	// allocation touches (random churn over 160 chunks: 11% fewer L1
	// misses in cachegrind than with them after the other fields).
	live   int  // live blocks
	cached int  // blocks in the home's quick cache
	small  bool // serves requests of at most poolSmallMax bytes only
	short  bool // a growable chunk for short-lived blocks (pool_lifetime.go)

	base gpu.DevicePtr
	size int // bytes allocated from upstream (and given back with Deallocate)
	// limit is the address space of a growable chunk (pool_vgrow.go),
	// equal to size; 0 for a chunk of fixed size. mapped is the bytes of
	// a growable chunk's blocks that are not unmapped, guarded by
	// home.mu and changed under Pool.mu too. top is the offset past the
	// highest granule a growable chunk ever committed, guarded likewise:
	// the upstream never mapped its addresses above top, so a commit
	// there cannot find them still mapped (ErrGrowBlocked).
	limit, mapped, top int

	home atomic.Pointer[poolStream]

	// Guarded by home.mu.
	first   *poolBlock
	pending int // pending blocks
	homeIdx int // index in home.homed

	// Every pair of the home changes live and cached. Chunks of different
	// streams are often allocated one after the other (each stream's first
	// growth), so without this line of padding two streams' pairs would
	// write one cache line.
	_ [cacheLine]byte
}

// idle reports whether no block of c is live, pending or cached, which
// means c is one free block (free neighbours always coalesce). Caller
// holds home.mu.
func (c *poolChunk) idle() bool { return c.live == 0 && c.pending == 0 && c.cached == 0 }

// inUse reports whether a block of c is live or cached: such a chunk
// cannot change home or be released. Caller holds home.mu.
func (c *poolChunk) inUse() bool { return c.live != 0 || c.cached != 0 }

// class is 0 for a small chunk, 1 for a large one.
func (c *poolChunk) class() int {
	if c.small {
		return 0
	}
	return 1
}
