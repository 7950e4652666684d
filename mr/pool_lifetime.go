// Lifetime-aware placement for a Pool that grows in place: blocks that
// will die soon go to a growable chunk of their own, apart from the
// blocks that stay.
//
// Over a Grower the pool's peak of mapped memory is its live blocks
// rounded out to whole granules: free granules are decommitted before a
// new peak (pool_vgrow.go), so what remains is each run of live blocks'
// partial first and last granule. A training step allocates its
// activations, which live until the backward pass, interleaved with
// temporaries that die a few requests later; with one range per stream
// they lie side by side, and at the peak each activation sits alone
// between decommitted holes, pinning the free end of its last granule
// (replaying resnet50-amp, 67 MiB over 55 runs). Placed apart, the
// activations form a few long runs and the temporaries' range is mostly
// decommitted.
//
// The pool sees only the request stream, so it predicts. PyTorch's steps
// repeat, and a request is recognised, without call sites, by its size
// and the sizes of the two requests its stream made before it (a
// layer's sequence of tensors). Each stream keeps, per such signature,
// whether its last block was freed within poolShortLife later requests
// of the stream (its lifetime, on the stream's own clock of requests
// served through its mutex): such a signature is short; one whose last
// block outlived that, or which has not been seen, is long.
// A request predicted short takes free blocks from the short chunks'
// index (poolStream.largeShort) first, then from the long ones' (so a
// free block is never passed over for a commit), and commits granules of
// its stream's short chunk; every other request of the large class goes
// the usual way. With PoolOptions.PackHoles it takes free blocks of the
// short chunks only, and commits when none fits (pool_vhole.go). The signature table has a fixed size (collisions only
// blur predictions), so a server of ever-new sizes costs no more memory.
//
// A short chunk keeps 1/poolShortShare of the address space a long one
// does: its blocks are few at any time, and address space is finite. The
// simulated H100 has 512 GiB of it, of which Virtual reserves 160 GiB for
// its other allocations; with short ranges of the long ones' size, the
// four streams of three-stream-h100 ran out of it and their requests
// fell back to fixed chunks (1.14 of peak live), with 1/4 too. A short
// request that does not fit starts another short chunk, as a long one
// does.
//
// Measured on every trace (BENCHMARKS.md, "Lifetime-aware placement"):
// the largest drops are on the training traces (resnet50-amp 1.0221 to
// 1.0096), and no trace holds more; without the fallback to long free
// blocks the worst trace (cuda-graph) drops further but the serving
// trace gains a granule.
//
// Invariants, under the stream's mutex: life is nil unless the pool has
// a Grower; born holds exactly the live blocks of growable chunks that
// were handed out through markLive, with the clock and signature of
// that moment; a block of a chunk with short set is filed in largeShort
// when free, and in large otherwise.

package mr

import "github.com/streamalloc/streamalloc/gpu"

const (
	// poolShortLife: a block freed before its stream served this many
	// more requests is short-lived.
	poolShortLife = 16
	// poolShortShare: a short chunk's address space is the long one's
	// over this.
	poolShortShare = 16
	// poolLifeTable is the number of signatures a stream remembers (a
	// power of two), one bit each: 2 KiB per stream that allocates from
	// a growable chunk. With 1,024 the collisions of the generation
	// trace's many sizes cost it 2 MiB at its peak.
	poolLifeTable = 16384
)

// poolLifetimes turns the placement on; tests turn it off to compare.
var poolLifetimes = true

// unblockedGrower is a Grower whose Commit never fails with
// ErrGrowBlocked (a Virtual with WaitForDecommits).
type unblockedGrower interface{ neverBlocks() bool }

// neverBlocks reports whether g never refuses a commit with
// ErrGrowBlocked: only over such a Grower does the Pool place by
// lifetime. Over one that refuses, a commit of addresses whose memory a
// decommit handed to another range is refused until the device completes
// the decommit's work, and with a short and a long range per stream
// memory passes between ranges more often: replaying torch-train-gpt-b,
// the refusing Virtual went from 1.0308 on every run to 1.0308-1.0373.
func neverBlocks(g Grower) bool {
	u, ok := g.(unblockedGrower)
	return ok && u.neverBlocks()
}

// poolLife is a stream's lifetime predictor.
type poolLife struct {
	clock uint64 // requests served through markLive
	prev  [2]int // the rounded sizes of the last two of them
	// Bit h of shortSig: the last block of signature h that was freed
	// was short-lived. Allocated with born, at the first growable block.
	shortSig *[poolLifeTable / 64]uint64
	born     map[gpu.DevicePtr]poolBirth
}

// poolBirth is when a live block was handed out, and its signature.
type poolBirth struct {
	clock uint64
	sig   uint32
}

// sig is the signature of a request of rounded bytes now.
func (l *poolLife) sig(rounded int) uint32 {
	h := uint64(rounded)
	h = h*0x9e3779b97f4a7c15 ^ uint64(l.prev[0])
	h = h*0x9e3779b97f4a7c15 ^ uint64(l.prev[1])
	h *= 0x9e3779b97f4a7c15
	return uint32(h>>32) & (poolLifeTable - 1)
}

// short predicts whether a request of rounded bytes, made now, will be
// short-lived: its signature's last block was.
func (l *poolLife) short(rounded int) bool {
	if l.shortSig == nil {
		return false
	}
	h := l.sig(rounded)
	return l.shortSig[h/64]&(1<<(h%64)) != 0
}

// handed records that b was handed out for req bytes; growable says b
// is in a growable chunk, whose blocks' lifetimes are measured.
func (l *poolLife) handed(b *poolBlock, req int, growable bool) {
	rounded := alignUp(req)
	if growable {
		if l.shortSig == nil {
			l.shortSig = new([poolLifeTable / 64]uint64)
			l.born = make(map[gpu.DevicePtr]poolBirth)
		}
		l.born[b.ptr] = poolBirth{l.clock, l.sig(rounded)}
	}
	l.clock++
	l.prev[1], l.prev[0] = l.prev[0], rounded
}

// freed records that live block b was freed: its signature learns
// whether it was short-lived.
func (l *poolLife) freed(b *poolBlock) {
	if l.born == nil {
		return
	}
	bt, ok := l.born[b.ptr]
	if !ok {
		return
	}
	delete(l.born, b.ptr)
	bit := uint64(1) << (bt.sig % 64)
	if l.clock-bt.clock <= poolShortLife {
		l.shortSig[bt.sig/64] |= bit
	} else {
		l.shortSig[bt.sig/64] &^= bit
	}
}
