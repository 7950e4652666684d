// Pool: a stream-ordered suballocator over any upstream Resource.
//
// The pool takes memory from its upstream in chunks and cuts them into
// blocks. Its design follows from one goal: a request that the calling
// stream's own free memory can serve costs no driver call, no Go
// allocation and no lock that another stream takes on its own hot path.
//
// Streams. Every stream that uses the pool gets a poolStream, found by
// Stream.ID in a table that lookups read without a lock (streamtable.go,
// pool_stream.go); the slow paths visit only the streams that can matter
// to them (pool_walk.go). Every chunk has one home stream; its
// blocks, free, live or pending, are guarded by the home's mutex alone, so
// a stream splits and coalesces its own chunks without touching anyone
// else's lock.
//
// Size classes, chosen by replaying PyTorch traces (pool_trace_test.go):
//
//   - small requests (at most 256 KiB) are served from 2 MiB small chunks,
//     so that long-lived small blocks never pin a large chunk;
//   - mid-sized requests (up to ChunkSize/2) split blocks of ChunkSize
//     chunks, best fit;
//   - big requests (from ChunkSize/2 up) get a chunk of their own size
//     (rounded up to 2 MiB) and later reuse a free block only if it is at
//     most 1/8 (or 2 MiB) larger: a big block carved from a much bigger
//     one would pin the rest of it for as long as it lives, which is most
//     of what fragments a caching allocator. With SplitBig, a big request
//     that nothing else serves splits a larger free block rather than
//     grow (pool_grow.go).
//
// Invariants:
//
//   - Every block, and so every pointer handed out, is aligned to
//     Alignment: chunks come aligned from upstream (the pool checks) and
//     block sizes are multiples of Alignment. A request of n bytes takes a
//     block of n rounded up to Alignment (or a little more, for a big
//     request that reuses a block within its slack).
//   - A block is on exactly one list of its chunk's home: a tlsf (free),
//     the live map (live), or the pending list of the stream that freed it
//     (pending). Free blocks never neighbour each other: they coalesce,
//     but only within one chunk and only when both are free, that is owned
//     by the same (home) stream.
//   - A small chunk holds only blocks of small requests, a large chunk
//     only blocks of mid-sized and big ones.
//
// Cross-stream reuse. A block freed on its chunk's home is free at once:
// later work on that stream runs after the free. A block freed on another
// stream F is pending: the home may reuse it only after it waits on an
// event recorded on F after the free. The pool never records one event per
// free; when the home's free blocks cannot serve a request it absorbs all
// of its pending blocks, one event per freeing stream. A stream that still
// cannot be served steals a whole chunk without live blocks from another
// stream: it waits on one event recorded on the old home (and one per
// stream with pending blocks in the chunk), then the chunk is its own.
// Chunks with live blocks never move, which is what keeps the live blocks
// of a chunk in its home's live map. A stream's working chunks (those its
// last small and large allocations came from) are taken only when memory
// is short (MaxSize or the upstream refused a growth): a busy stream's
// chunk is idle between its pairs, and taking it would only make that
// stream take another, so streams would pass chunks around instead of
// each growing to its own.
//
// Growth and release. When neither its lists nor a steal serve a request,
// the stream grows the pool by a chunk (see the size classes; at least
// InitialSize the first time). Idle chunks (no live block) are cached, but
// the pool never sets a new high-water mark of reserved memory while it
// holds any: before a growth that would, it releases idle chunks, largest
// first, until the growth fits under the old mark or none is left (it
// keeps InitialSize; it keeps other streams' working chunks only in a
// pool with MaxSize or more than 64 streams, releaseBeforeGrowth in
// pool_grow.go). So the peak of reserved memory is reached only with
// every chunk in use, which is what keeps it close to the peak of live
// memory. ReservedSlack moves that mark up to a share above the peak of
// used bytes where the high-water mark is lower: idle chunks are then kept
// through growths that stay under it. Before it fails with out of
// memory (from upstream, or MaxSize), it steals even working chunks, then
// releases every idle chunk and tries once more. Release gives every idle
// chunk back; ReleaseThreshold does the same whenever a free leaves a
// chunk idle while the pool reserves more than the threshold, and caps
// growth like the high-water mark does. An upstream free is enqueued on
// the chunk's home, after the home waits on every stream that freed one of
// its pending blocks, so it runs after all the chunk's frees; the pool
// itself never waits for the device there (an upstream whose free is
// synchronous, like Direct, does).
//
// Quick cache. A block freed on its home is not coalesced at once: it is
// kept whole in the stream's quick cache for the next request of its size,
// so that an alloc/free pair touches no tlsf (pool_quick.go). The cache is
// flushed into the tlsf before the pool steals, grows, releases or fails.
//
// Locks: Pool.mu serializes the slow paths (growth, steal, release) and is
// taken before any stream's mutex; a goroutine never holds two streams'
// mutexes at once.

package mr

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	// poolSmallMax is the largest request served from small chunks.
	poolSmallMax = 256 << 10
	// poolSmallChunk is the size of a small chunk.
	poolSmallChunk = 2 << 20
	// poolGranularity is what large chunks are rounded up to.
	poolGranularity = 2 << 20
	// DefaultPoolChunkSize is the default PoolOptions.ChunkSize.
	DefaultPoolChunkSize = 8 << 20
	// usedQuantum is how far a stream's used bytes may drift from the
	// pool-wide total (which drives PeakUsed) before it adds its change,
	// when several streams share the pool.
	usedQuantum = 1 << 20
	// poolMaxRequest is the largest request a Pool can serve: a chunk is a
	// multiple of poolGranularity, and a larger request could not be
	// rounded up to one in an int. Larger requests are out of memory, as
	// at every resource (no upstream could hold them).
	poolMaxRequest = math.MaxInt &^ (poolGranularity - 1)
)

// PoolOptions configure a Pool. The zero value is a pool that grows by
// DefaultPoolChunkSize, has no limit but its upstream's, and keeps idle
// chunks until it would otherwise raise its high-water mark, or Release is
// called.
type PoolOptions struct {
	// InitialSize is reserved, as one chunk, by the first request that
	// needs memory (on its stream), and kept: the pool releases idle
	// chunks below it only on Release, MaxSize or ReleaseThreshold.
	// Zero: none.
	InitialSize int
	// MaxSize bounds the bytes reserved from upstream. Zero: no bound.
	MaxSize int
	// ChunkSize is the least a growth for a large request reserves; a
	// request larger than that gets a chunk of its own, rounded up to
	// 2 MiB. Zero: DefaultPoolChunkSize.
	ChunkSize int
	// ReleaseThreshold: when a free leaves a chunk idle while the pool
	// reserves more than ReleaseThreshold bytes, idle chunks are given
	// back until it does not, or none is left. Zero: never on a free.
	ReleaseThreshold int
	// SplitBig lets a big request (ChunkSize/2 and up) that no free
	// block within its slack serves, and no steal, take the
	// best-fitting larger free block of its stream, split, before the
	// pool grows. For programs whose steps repeat with tensors of
	// changing sizes (training with varied sequence lengths, or any
	// step whose sizes do not recur within 1/8): each step is then
	// served from the memory earlier steps reserved, where without it
	// the pool gives back idle chunks of the sizes it does not need now
	// and grows chunks of those it does, every step (see "Growth and
	// release"). The price is placement: a big block cut from a larger
	// one pins the rest of that chunk while it lives, so a program
	// whose big requests keep changing without repeating (a server of
	// varied lengths) can reserve much more with it (pool_grow.go gives
	// the figures). False: off.
	SplitBig bool
	// SplitGiantAtMark, with SplitBig, lets a big request of a rounded
	// size that came to the pool's slow path before take a free block of
	// a giant chunk (one of at least 1/16 of the high-water mark of
	// reserved bytes, which SplitBig keeps for requests of half its size)
	// where growing for it would first give idle chunks back. A program
	// whose steps cycle through arrays of a few scales (the CuPy
	// workload of scripts/torch-bench.py) then stops giving back the
	// chunks of one scale to grow those of another every step. It
	// moves other programs' reserved bytes both ways (pool_giant.go
	// gives the figures), hence off by default. Over a Grower it does
	// nothing (growth in place has no giant chunks). True without
	// SplitBig: ErrInvalidValue.
	SplitGiantAtMark bool
	// MappedSlack applies over an upstream that grows in place (Grower,
	// such as Virtual): free granules that the pool would decommit
	// before a commit, under the high-water rule, stay mapped while it
	// maps at most its peak of used bytes and a margin, and the margin
	// grows, up to MappedSlack times that peak, by each commit that
	// moves memory within the peak rather than adds to it
	// (pool_vslack.go). A training loop whose steps place their tensors
	// differently then stops committing and decommitting in every step.
	// Zero: no margin (the high-water mark of reserved bytes alone);
	// negative, NaN or above 1: ErrInvalidValue.
	MappedSlack float64
	// ReservedSlack lets a growth over chunks keep idle chunks, where
	// the high-water rule would give them back first, as long as the
	// pool reserves at most (1+ReservedSlack) times its peak of used
	// bytes so far (Usage.PeakUsed) after the growth: the release before
	// a growth gives idle chunks back only down to max(high-water mark,
	// (1+ReservedSlack) x peak used) less the growth. So the high-water
	// mark of reserved bytes passes (1+ReservedSlack) times peak used
	// only at a growth that finds no idle chunk left to give back, as
	// without the option. A loop whose steps need chunks of other sizes
	// at their peak then keeps them from step to step, where they fit in
	// that share, rather than free them (a cuMemFree waits for the
	// device) and allocate them again; the price is up to that share of
	// the peak of used bytes held idle. GPT-2 training grows chunks of
	// 3-12% of its peak there, so a slack of a few percent leaves its
	// churn as it is (BENCHMARKS.md). Over an upstream that grows in
	// place (Grower) it applies only to small chunks (MappedSlack is the
	// margin there). With several streams the peak of used bytes may be
	// off by up to 1 MiB a stream (Usage). Zero: the high-water mark
	// alone; negative, NaN or above 1: ErrInvalidValue.
	ReservedSlack float64
	// PackHoles applies over an upstream that grows in place (Grower)
	// and never refuses a commit (a Virtual with WaitForDecommits), where
	// the pool places blocks by predicted lifetime (pool_lifetime.go; the
	// registry's pool_vmm, and pool_vmm_holes with this option). A
	// request of more than 256 KiB and less than a granule (2 MiB) first
	// takes a free piece it fills exactly beside a block that keeps its
	// granule mapped, among the stream's last 16 filed free blocks;
	// blocks of growable chunks are not kept in the quick cache; and a
	// request predicted short-lived never falls back to a free block of
	// the long-lived range (pool_vhole.go). It lowers the peak of mapped
	// memory where pairs of sub-granule blocks leave half-empty granules:
	// on the simulator llama-generate-h100 goes from 1.0289 to 1.0086 of
	// peak live and resnet50-amp from 1.0096 to 1.0050, and both
	// ResNet-50 traces, gpt-b, compile and GPT-2 go lower, while
	// torch-serve-varlen-b rises from 1.0107 to 1.0178 and oom-h100 from
	// 1.0009 to 1.0011 (BENCHMARKS.md, "Holes in pinned granules"). The
	// price is time: a pair served from the pool's lists goes through the
	// tlsf instead of the quick cache, about twice as slow at 1.5 MiB
	// (66 to 120 ns on the development machine), 4 MiB about 20% and
	// random churn about 38% slower, hence off by default; and it
	// commits and decommits more often (1.1-7 times the commits on the
	// recorded traces: a request predicted short-lived commits in its
	// short range rather than take a free block of the long one).
	// HolesKeepPair gives the pair its cost back. Over chunks, or a Grower
	// without the lifetime placement, it does nothing. False: off.
	PackHoles bool
	// HolesKeepPair refines PackHoles, which it requires (without it,
	// NewPool fails with ErrInvalidValue): a block of a growable chunk
	// freed on its home while it is the block the stream handed out last
	// (a pair's block: allocated, freed, asked for again) stays whole in
	// the quick cache, as without PackHoles, where PackHoles alone files
	// it free; every other such block is filed free as with PackHoles.
	// And SmallAtPeak, which PackHoles alone turns off, applies
	// (pool_vpair.go). A pair served from the pool's lists then costs what
	// it costs without PackHoles. On the simulator, with SmallAtPeak (the
	// registry's pool_vmm_holes_pair), llama-generate-h100 goes from
	// 1.0289 of peak live (pool_vmm) to 1.0086, compile, oom and
	// resnet50-amp lower, cupy-cycle, cuda-graph and torch-train-gpt-b
	// stay at pool_vmm's figures, and torch-serve-varlen-b rises from
	// 1.0107 to 1.0178 (one granule, as with PackHoles), the two-stream
	// pipeline, gpt2-train and ResNet-50 through the C ABI by a granule
	// each (BENCHMARKS.md, "Holes at the pair's cost"). False: PackHoles
	// as documented above.
	HolesKeepPair bool
	// SmallAtPeak applies over a Grower (memory mapped in place) and does
	// nothing with PackHoles set unless HolesKeepPair is: a small request
	// (256 KiB or less) that would grow a small chunk, and with it raise
	// the pool's high-water mark, takes a free piece of its stream's growable chunks that holds
	// it (a good fit), memory already mapped, instead (pool_vpeak.go).
	// Over a Grower that never refuses a commit (a Virtual with
	// WaitForDecommits, where the pool places by lifetime) it acts after
	// the release before the growth: on the simulator it takes
	// cupy-cycle-h100 from 1.0333 of peak live to 1.0285, cuda-graph-h100
	// from 1.0309 to 1.0253 and torch-train-gpt-b from 1.0308 to 1.0295,
	// both ResNet-50 traces and GPT-2 through the C ABI lower, but
	// oom-h100 from 1.0009 to 1.0013, one granule more at a peak of 9 GiB
	// (BENCHMARKS.md, "Small requests at a peak"), and keeps every
	// recorded trace within 1.03: the registry's pool_vmm sets it. Over a
	// Grower that refuses commits at addresses still being decommitted
	// (a Virtual without WaitForDecommits) it acts before the release, so
	// that the growth of a small chunk never gives memory back first, and
	// such a growth keeps MappedSlack's margin as a commit does:
	// replaying autoregressive generation recorded on an H100 it ends the
	// small chunks released at one step's peak and grown back, with a
	// decommit, at the next (no device call after the third of 15 steps,
	// where the pool committed 5.2 times a step), and lowers the peak
	// (1.0406-1.0474 of peak live to 1.0361 with MappedSlack), but raises
	// the two-stream pipeline trace and resnet50-amp by a granule or two
	// (BENCHMARKS.md, "Generation's commits and small chunks"). It runs on
	// the growth path only: a pair served from the pool's lists costs
	// what it did. False: off.
	SmallAtPeak bool
}

// Pool is a stream-ordered suballocator over an upstream Resource. It
// implements Resource, UsageReporter and Releaser, and is safe for
// concurrent use by many goroutines on many streams. Stats counts how it
// served requests and what its slow paths did.
type Pool struct {
	upstream Resource
	dev      gpu.Device
	opts     PoolOptions

	// closed and the stream table's index, which every request reads,
	// side by side (TestPoolHotLines).
	closed  atomic.Bool
	streams streamTable[poolStream]

	chunks spanIndex[*poolChunk] // changed under mu

	// mu serializes growth, steals and releases; taken before any
	// stream's mutex.
	mu    sync.Mutex
	grown bool // the first growth (InitialSize) happened
	// margin is the mapped bytes above the peak of used bytes that a
	// commit keeps (PoolOptions.MappedSlack, pool_vslack.go).
	margin int
	// slowOwner is the Owner of the request allocateSlow serves.
	slowOwner uint32
	usage     usageMeter // reserved and its peak; peakUsed of the flushed total
	wide      poolWideStats
	// usedSum is written by every allocation while one stream uses the
	// pool; keep it off the line of the fields the hot path only reads.
	_           [64]byte
	usedSum     atomic.Int64
	usedQuantum atomic.Int64
	_           [64]byte

	// The streams the slow paths visit (pool_walk.go), under aux, a leaf
	// lock taken under a stream's mutex; forgotten holds the counters of
	// streams Release forgot, under mu; streamSeq numbers the streams,
	// under the stream table's lock.
	aux       sync.Mutex
	dirty     []*poolStream
	cands     candTree // pool_candtree.go
	parked    candTree
	lfStale   []*poolStream // pool_largest.go
	forgotten poolStreamStats
	streamSeq uint64
	// The streams by their largest free or cached block
	// (pool_largest.go), under mu.
	lfHeap []*poolStream

	tune poolTune

	// Growth in place over a Grower upstream (pool_vgrow.go), under mu.
	grower     Grower
	vgrow      map[*poolStream]*poolChunk
	vgrowShort map[*poolStream]*poolChunk
	lifetimes  bool // place by predicted lifetime (pool_lifetime.go)
	vlist      []*poolChunk
	growLimit  int
	// spans is grower if it gives memory back in pieces: decommits take
	// only the spans of free blocks it says give all their memory back.
	spans piecewiseGrower
	// spare is where a commit is about to place a request: releaseIdle
	// keeps its chunk, and decommitFree the free blocks it overlaps.
	spare poolPlace
	// seen is the sizes of big requests that reached the slow path,
	// with SplitGiantAtMark (pool_giant.go); nil without. Under mu.
	seen *poolSeenSizes
}

// poolTune holds the pool's sizing constants; tests vary them to measure
// their effect on fragmentation.
type poolTune struct {
	smallMax    int // largest request served from small chunks
	smallChunk  int // size of a small chunk
	granularity int // large chunks are a multiple of this
	bigMin      int // requests from this size up get chunks of their own size...
	bigSlack    int // ...and reuse a free block only if it exceeds them by at most size>>bigSlack
}

// slack is how much larger than rounded a free block may be and still
// serve it: unlimited for small and mid-sized requests, which split
// blocks, and a fraction for big ones, which would otherwise pin the rest
// of a larger block while they live.
func (p *Pool) slack(rounded int) int {
	if rounded < p.tune.bigMin {
		return maxAlignable
	}
	return max(rounded>>p.tune.bigSlack, p.tune.granularity)
}

var defaultPoolTune = poolTune{smallMax: poolSmallMax, smallChunk: poolSmallChunk, granularity: poolGranularity, bigSlack: 3}

// NewPool returns a pool over upstream. It reserves nothing until the
// first request (InitialSize is reserved then, on that request's stream).
func NewPool(upstream Resource, opts PoolOptions) (*Pool, error) {
	if upstream == nil {
		return nil, fmt.Errorf("pool: nil upstream: %w", gpu.ErrInvalidValue)
	}
	if opts.InitialSize < 0 || opts.MaxSize < 0 || opts.ChunkSize < 0 || opts.ReleaseThreshold < 0 {
		return nil, fmt.Errorf("pool: negative option in %+v: %w", opts, ErrInvalidSize)
	}
	if !(opts.MappedSlack >= 0 && opts.MappedSlack <= 1) {
		return nil, fmt.Errorf("pool: MappedSlack %v outside [0, 1]: %w", opts.MappedSlack, gpu.ErrInvalidValue)
	}
	if !(opts.ReservedSlack >= 0 && opts.ReservedSlack <= 1) {
		return nil, fmt.Errorf("pool: ReservedSlack %v outside [0, 1]: %w", opts.ReservedSlack, gpu.ErrInvalidValue)
	}
	if opts.SplitGiantAtMark && !opts.SplitBig {
		return nil, fmt.Errorf("pool: SplitGiantAtMark without SplitBig: %w", gpu.ErrInvalidValue)
	}
	if opts.HolesKeepPair && !opts.PackHoles {
		return nil, fmt.Errorf("pool: HolesKeepPair without PackHoles: %w", gpu.ErrInvalidValue)
	}
	if opts.InitialSize > poolMaxRequest || opts.ChunkSize > poolMaxRequest {
		return nil, fmt.Errorf("pool: InitialSize %d or ChunkSize %d above %d: %w", opts.InitialSize, opts.ChunkSize, poolMaxRequest, ErrInvalidSize)
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultPoolChunkSize
	}
	opts.ChunkSize = poolRoundUp(opts.ChunkSize, poolGranularity)
	if opts.MaxSize > 0 && opts.InitialSize > opts.MaxSize {
		return nil, fmt.Errorf("pool: InitialSize %d above MaxSize %d: %w", opts.InitialSize, opts.MaxSize, ErrInvalidSize)
	}
	p := &Pool{upstream: upstream, dev: upstream.Device(), opts: opts, tune: defaultPoolTune}
	p.tune.bigMin = max(opts.ChunkSize/2, p.tune.smallMax+Alignment)
	if opts.SplitGiantAtMark {
		p.seen = new(poolSeenSizes)
	}
	if g, ok := upstream.(Grower); ok {
		p.useGrower(g)
	}
	return p, nil
}

// tooLarge is the error of a request above poolMaxRequest: out of memory,
// without a growth.
//
//go:noinline
func (p *Pool) tooLarge(size int, s gpu.Stream) error {
	u := p.Usage()
	return &OutOfMemoryError{Resource: "pool", Requested: size, Stream: s.ID(),
		Reserved: u.Reserved, Used: u.Used, Limit: uint64(p.opts.MaxSize),
		Err: fmt.Errorf("more than %d bytes, the largest chunk a pool can hold", poolMaxRequest)}
}

// Device is the upstream's device.
func (p *Pool) Device() gpu.Device { return p.dev }

// Options returns the options in effect (defaults filled in).
func (p *Pool) Options() PoolOptions { return p.opts }

// Allocate returns size bytes aligned to Alignment, usable by work
// enqueued on s after the call. Served from s's own free blocks it takes
// only s's lock and makes no driver call; otherwise it absorbs blocks
// other streams freed, steals an idle chunk, or grows (pool.go).
func (p *Pool) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	// The hot path (see hot) is written out here and in AllocateOwned,
	// Deallocate and DeallocateOwned, so that a request the fast slot
	// serves makes one call into the pool: a shared body cost a pair a
	// tenth of its instructions. uint(size-1) < poolMaxRequest is 0 <
	// size <= poolMaxRequest.
	if s != nil && uint(size-1) < poolMaxRequest {
		id := s.ID()
		st := p.streams.first(id)
		if st == nil {
			st = p.streams.lookup(id)
		}
		if st != nil && st.hot() && !p.closed.Load() {
			if ptr := st.fastAllocate(size, 0); ptr != 0 {
				return ptr, nil // pool_fast.go
			}
			return p.allocateLocked(st, size, 0)
		}
	}
	return p.allocateChecked(size, s, 0)
}

// OwnersChecked reports true: the pool checks every free exactly and
// keeps the owner of every allocation (owner.go).
func (p *Pool) OwnersChecked() bool { return true }

// AllocateOwned is Allocate, recording o as the memory's owner: only
// DeallocateOwned with o frees it (owner.go).
func (p *Pool) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if s != nil && uint(size-1) < poolMaxRequest {
		id := s.ID()
		st := p.streams.first(id)
		if st == nil {
			st = p.streams.lookup(id)
		}
		if st != nil && st.hot() && !p.closed.Load() {
			if ptr := st.fastAllocate(size, o.id); ptr != 0 {
				return ptr, nil
			}
			return p.allocateLocked(st, size, o.id)
		}
	}
	return p.allocateChecked(size, s, o.id)
}

// hot reports whether a request on st, the pool's state of the stream
// the request names, may skip the checks of the checked paths: the
// capture gate covers the stream and no capture is in progress, so the
// stream is not capturing (gpu/capturegate.go; a stream ID names one
// stream, so st.gated holds for it). A stream the pool knows was checked
// when it was added (IDs are never reused), so the hot path skips the
// device comparison too (args.go).
func (st *poolStream) hot() bool { return st.gated && !gpu.CapturesActive() }

// allocateChecked is Allocate for a request the hot path does not take:
// a stream the pool does not know yet (or nil, or of another device), a
// capturing stream, a size out of range, or a closed pool.
func (p *Pool) allocateChecked(size int, s gpu.Stream, owner uint32) (gpu.DevicePtr, error) {
	var st *poolStream
	if s != nil {
		st = p.streams.lookup(s.ID())
	}
	if st == nil || !st.gated || gpu.CapturesActive() {
		// A request on a capturing stream becomes part of the graph
		// (capture.go).
		if id := gpu.CaptureID(s); id != 0 {
			return captureAllocate(p.ownerClient(owner), id, size, s)
		}
	}
	if st == nil {
		if err := checkStream("pool", opAllocate, p.dev, s); err != nil {
			return 0, err
		}
	}
	if size <= 0 || size > poolMaxRequest {
		// Zero, negative, or larger than any chunk: checked off the hot
		// path (args.go).
		if zero, err := checkAllocSize("pool", size); zero || err != nil {
			return 0, err
		}
		return 0, p.tooLarge(size, s)
	}
	if p.closed.Load() {
		return 0, fmt.Errorf("pool: allocate: %w", ErrClosed)
	}
	if st != nil {
		if ptr := st.fastAllocate(size, owner); ptr != 0 {
			return ptr, nil // pool_fast.go
		}
	} else {
		st = p.streamOf(s)
	}
	return p.allocateLocked(st, size, owner)
}

// allocateLocked serves a request on st that the fast slot did not: from
// st's own memory under its mutex, else through allocateSlow.
func (p *Pool) allocateLocked(st *poolStream, size int, owner uint32) (gpu.DevicePtr, error) {
	rounded := alignUp(size)
	st.lock()
	// An error from absorb leaves blocks pending; the slow path reports
	// it if it cannot serve the request some other way.
	b, _ := st.serve(rounded)
	if b != nil {
		st.markLive(b, size, owner)
		st.mu.Unlock()
		return b.ptr, nil
	}
	st.mu.Unlock()
	return p.allocateSlow(st, size, rounded, owner)
}

// Deallocate frees p, which Allocate returned for size bytes, in stream
// order on s. Freed on the stream that owns its chunk, the block is
// reusable at once; freed on another stream, it is reusable by the owner
// after an event wait, which the owner enqueues when it needs the memory.
func (p *Pool) Deallocate(ptr gpu.DevicePtr, size int, s gpu.Stream) error {
	// Written out as in Allocate.
	if s != nil && ptr != 0 && size >= 0 {
		id := s.ID()
		st := p.streams.first(id)
		if st == nil {
			st = p.streams.lookup(id)
		}
		if st != nil && st.hot() {
			if st.fastFree(ptr, size, 0) {
				return nil // pool_fast.go
			}
			return p.deallocateLocked(st, ptr, size, s, 0)
		}
	}
	return p.deallocateChecked(ptr, size, s, 0)
}

// DeallocateOwned is Deallocate of memory that AllocateOwned gave o. A
// live pointer of another owner (Allocate's included) is refused with an
// error matching ErrUnknownPointer, and nothing changes.
func (p *Pool) DeallocateOwned(ptr gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if s != nil && ptr != 0 && size >= 0 {
		id := s.ID()
		st := p.streams.first(id)
		if st == nil {
			st = p.streams.lookup(id)
		}
		if st != nil && st.hot() {
			if st.fastFree(ptr, size, o.id) {
				return nil
			}
			return p.deallocateLocked(st, ptr, size, s, o.id)
		}
	}
	return p.deallocateChecked(ptr, size, s, o.id)
}

// deallocateChecked is Deallocate for a free the hot path does not take:
// a stream the pool does not know (or nil, or of another device), a
// capturing stream, the null pointer or a negative size.
func (p *Pool) deallocateChecked(ptr gpu.DevicePtr, size int, s gpu.Stream, owner uint32) error {
	var st *poolStream
	if s != nil {
		st = p.streams.lookup(s.ID())
	}
	if st == nil || !st.gated || gpu.CapturesActive() { // as in Allocate
		if id := gpu.CaptureID(s); id != 0 {
			return captureDeallocate(p.ownerClient(owner), id, ptr, size, s, p.knowsFor(owner))
		}
	}
	if st == nil {
		if err := checkStream("pool", opDeallocate, p.dev, s); err != nil {
			return err
		}
	}
	if ptr == 0 || size < 0 {
		// The null pointer or a negative size: checked off the hot path
		// (args.go), which answers nil or an error.
		_, err := checkFreeArgs("pool", ptr, size)
		return err
	}
	if st == nil {
		return p.deallocateSlow(ptr, size, s, owner)
	}
	if st.fastFree(ptr, size, owner) {
		return nil // pool_fast.go
	}
	return p.deallocateLocked(st, ptr, size, s, owner)
}

// deallocateLocked frees ptr on st, a stream the pool knows, when the fast
// slot did not take it: a block live in st's own map is freed under its
// mutex; any other pointer goes to deallocateSlow.
func (p *Pool) deallocateLocked(st *poolStream, ptr gpu.DevicePtr, size int, s gpu.Stream, owner uint32) error {
	st.lock()
	if b, at := st.live.find(ptr); b != nil {
		if b.owner != owner {
			st.mu.Unlock()
			return fmt.Errorf("pool: deallocate: %w", pointerError(ptr, ErrUnknownPointer))
		}
		if b.req != size {
			req := b.req
			st.mu.Unlock()
			return poolSizeMismatch(ptr, req, size)
		}
		c := b.c
		st.live.delAt(at)
		st.unlisted(b)
		if p.opts.ReleaseThreshold == 0 || c.live > 0 {
			if b != st.last || !st.arm(b, size) {
				st.quickPut(b)
			}
			st.mu.Unlock()
			return nil
		}
		// The chunk's last live block: it may be idle now, and the
		// threshold decides whether it stays.
		st.quickFlush()
		st.putFree(b)
		idle := c.idle()
		st.mu.Unlock()
		if idle && p.usage.reserved.Load() > uint64(p.opts.ReleaseThreshold) {
			return p.trim(st)
		}
		return nil
	}
	st.mu.Unlock()
	return p.deallocateSlow(ptr, size, s, owner)
}

func poolSizeMismatch(p gpu.DevicePtr, req, size int) error {
	return fmt.Errorf("pool: deallocate: %w", sizeMismatchError(p, req, size))
}

// Usage reports the bytes reserved from upstream and the bytes handed out
// (requested sizes), with their high-water marks. Reserved and its peak
// are exact. Used is exact when no operation runs concurrently. PeakUsed
// is exact while one stream uses the pool; with several, streams add their
// changes to the pool-wide total in steps of up to 1 MiB (so that they
// share no counter on the hot path), and PeakUsed may be off by up to
// 1 MiB per stream.
//
// It costs O(streams that changed since the last call), not O(streams)
// (pool_walk.go).
func (p *Pool) Usage() Usage {
	p.flushDirty()
	u := p.usage.snapshot()
	u.Used = uint64(max(p.usedSum.Load(), 0))
	u.PeakUsed = max(u.PeakUsed, u.Used)
	return u
}

// ResetPeaks lowers the peaks of Usage to the current values.
func (p *Pool) ResetPeaks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Usage flushes every stream first, so that the total is not above
	// the new peak (addUsed relies on the peak covering every value of the
	// total).
	u := p.Usage()
	p.usage.peakReserved.Store(p.usage.reserved.Load())
	p.usage.peakUsed.Store(u.Used)
}

// Release gives every idle chunk (one with no live block) back to the
// upstream, each free enqueued on the chunk's home stream after it waits
// on the streams that freed blocks of the chunk. It does not block on
// work still running. Chunks with live blocks are kept whole; after every
// allocation has been freed, Release leaves nothing reserved.
//
// It also forgets the state of every stream that holds nothing now, so
// that a program that makes and destroys streams does not keep one for
// each (pool_walk.go).
func (p *Pool) Release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.releaseIdle(nil, 0, true)
	return errors.Join(err, p.forgetEmptyStreams())
}

// Close releases every idle chunk and the pool's cached events; later
// Allocate calls fail with ErrClosed. Deallocate keeps working, so memory
// still live can be freed; a Release after that gives it back.
func (p *Pool) Close() error {
	p.closed.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.releaseIdle(nil, 0, true)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, st := range p.streams.all() {
		st.lock()
		for _, e := range st.events {
			if err := e.Destroy(); err != nil {
				errs = append(errs, err)
			}
		}
		clear(st.events)
		st.events = st.events[:0]
		st.mu.Unlock()
	}
	return errors.Join(errs...)
}

// streamOf returns the state of s, creating it on first use.
func (p *Pool) streamOf(s gpu.Stream) *poolStream {
	return p.streams.get(s.ID(), func() *poolStream {
		if len(p.streams.all()) > 0 {
			// A second stream: streams add their used bytes to the
			// pool-wide total in steps from now on (addUsed).
			p.usedQuantum.Store(usedQuantum)
		}
		st := newPoolStream(p, s)
		p.streamSeq++
		st.seq = p.streamSeq
		return st
	})
}

// flushUsed adds a stream's change of used bytes to the pool-wide total
// and raises the peak.
func (p *Pool) flushUsed(d int64) {
	if v := p.usedSum.Add(d); v > 0 {
		raisePeak(&p.usage.peakUsed, uint64(v))
	}
}

func poolRoundUp(n, m int) int { return (n + m - 1) / m * m }
