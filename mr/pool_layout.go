// The layout of a Pool: its chunks and the blocks that tile each one, with
// their states, for the summary (chunks, free bytes, the largest free
// block), out-of-memory errors and memory snapshots (the segments and
// blocks PyTorch's memory_viz draws).
//
// Layout takes Pool.mu, then each stream's mutex in turn, and copies what
// it needs: the chunks do not move meanwhile (growth, steals and releases
// take Pool.mu) and each chunk's blocks are guarded by its home's mutex.
// A block's state can change between two streams' turns (a cross-stream
// free makes a block of another stream's chunk pending), so under
// concurrent operations the layout is exact per stream and the totals
// may mix moments; with no operation running it is exact.

package mr

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/streamalloc/streamalloc/gpu"
)

// BlockState is what a block of a Pool chunk is doing.
type BlockState uint8

const (
	// BlockFree: free, reusable by the chunk's home stream at once.
	BlockFree BlockState = iota
	// BlockLive: handed out and not freed.
	BlockLive
	// BlockPending: freed on another stream than the chunk's home;
	// reusable by the home after it waits on that stream.
	BlockPending
	// BlockCached: freed on the home and kept whole for the next request
	// of its size (the pool's quick cache); free for that purpose.
	BlockCached
)

func (s BlockState) String() string {
	switch s {
	case BlockFree:
		return "free"
	case BlockLive:
		return "live"
	case BlockPending:
		return "pending"
	case BlockCached:
		return "cached"
	}
	return "BlockState(" + strconv.Itoa(int(s)) + ")"
}

// BlockLayout is one block of a chunk.
type BlockLayout struct {
	Ptr       gpu.DevicePtr
	Size      int // bytes the block spans (a multiple of Alignment)
	Requested int // bytes asked for, while live; else 0
	State     BlockState
	Stream    uint64 // pending: the stream that freed it; else 0
}

// ChunkLayout is one chunk a Pool holds from its upstream, whose blocks
// tile it. A growable chunk (pool_vgrow.go) is listed as one ChunkLayout
// per run of mapped memory in its range: the holes between them hold no
// memory.
type ChunkLayout struct {
	Base   gpu.DevicePtr
	Size   int
	Stream uint64 // the ID of the chunk's home stream
	Small  bool   // serves requests of at most 256 KiB only
	Blocks []BlockLayout
}

// PoolLayout is a Pool's chunks in address order, with totals.
type PoolLayout struct {
	Chunks []ChunkLayout
	// Bytes and count of blocks per state (indexed by BlockState).
	Bytes  [4]uint64
	Blocks [4]int
	// LargestFree is the largest free or cached block: the largest
	// request the pool can serve without growing, stealing or absorbing.
	LargestFree uint64
}

// Reserved is the bytes of all chunks.
func (l PoolLayout) Reserved() uint64 {
	var n uint64
	for _, b := range l.Bytes {
		n += b
	}
	return n
}

// Layout returns the pool's chunks and blocks (see the file comment for
// what it guarantees while other goroutines use the pool).
func (p *Pool) Layout() PoolLayout {
	p.mu.Lock()
	defer p.mu.Unlock()
	var l PoolLayout
	for _, st := range p.streams.all() {
		st.lock()
		for _, c := range st.homed {
			cl := ChunkLayout{Base: c.base, Size: c.size, Stream: st.id, Small: c.small}
			if c.limit > 0 {
				cl.Size = 0 // the runs of mapped blocks, below
			}
			for b := c.first; b != nil; b = b.next {
				if b.state == blockUnmapped {
					// A growable chunk's address space with no memory:
					// the run before it, if any, is a chunk of its own.
					if len(cl.Blocks) > 0 {
						l.Chunks = append(l.Chunks, cl)
					}
					cl = ChunkLayout{Base: b.end(), Stream: st.id}
					continue
				}
				if c.limit > 0 {
					cl.Size += b.size
				}
				bl := BlockLayout{Ptr: b.ptr, Size: b.size}
				switch b.state {
				case blockLive:
					bl.State, bl.Requested = BlockLive, b.req
				case blockPending:
					bl.State = BlockPending
					if b.freedBy != nil {
						bl.Stream = b.freedBy.id
					}
				case blockCached:
					bl.State = BlockCached
				default:
					bl.State = BlockFree
				}
				cl.Blocks = append(cl.Blocks, bl)
				l.Bytes[bl.State] += uint64(bl.Size)
				l.Blocks[bl.State]++
				if (bl.State == BlockFree || bl.State == BlockCached) && uint64(bl.Size) > l.LargestFree {
					l.LargestFree = uint64(bl.Size)
				}
			}
			if len(cl.Blocks) > 0 || c.limit == 0 {
				l.Chunks = append(l.Chunks, cl)
			}
		}
		st.mu.Unlock()
	}
	slices.SortFunc(l.Chunks, func(a, b ChunkLayout) int { return cmp.Compare(a.Base, b.Base) })
	return l
}
