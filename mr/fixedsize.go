// FixedSize: blocks of one size, carved from chunks of an upstream
// resource, handed out and taken back in O(1).
//
// Each stream has its own free list (a stack of blocks) under its own
// mutex, so a pair served from the list of its stream takes no lock other
// streams contend for, makes no driver call, and allocates no Go memory.
// The stream-ordered rules are a pool's:
//
//   - A block freed on s goes on s's list and may be handed to the next
//     request on s at once: later work on s runs after the free.
//   - A block allocated on s1 and freed on s2 is first ordered: an event
//     recorded on s1 is waited on by s2 before the block joins s2's list,
//     since work on s1 may still use it. (An event from the resource's
//     cache; see async.go for the three approaches and why this one.)
//   - When s's list is empty, s steals half of another stream t's list
//     after waiting on an event recorded on t: one event per steal, not
//     per block. Only when no list has a block does the resource grow by
//     one chunk from the upstream, allocated on s.
//
// Release returns to the upstream every chunk whose blocks are all free:
// it takes them off the lists, makes one stream X wait on every other
// stream that held some of them, and frees the chunks on X.
//
// Invariants:
//   - Every block of every chunk in the index is in exactly one of: live
//     (state > 0, the size asked for, owner = its allocation's stream), on
//     exactly one free list, or in transit in one goroutine (a steal, a
//     grow, a free being ordered, a release).
//   - state is 0 for a block never handed out, freedState once freed; a
//     free of a block in state 0 is an unknown pointer, in freedState a
//     double free.
//   - A free claims its block by a compare-and-swap of state, so of two
//     racing frees exactly one wins; a free that then fails to order puts
//     the state back.
//   - No goroutine holds two stream mutexes at once, except Release, which
//     takes them all in ID order while no other Release runs.
//   - Usage: Reserved is chunks × chunk size, Used the sizes asked for by
//     live allocations.

package mr

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// FixedSizeOptions configure a FixedSize resource.
type FixedSizeOptions struct {
	// BlockSize is the size of every block, rounded up to Alignment.
	// Zero means 1 MiB.
	BlockSize int
	// BlocksPerChunk is how many blocks one upstream allocation holds.
	// Zero means 128.
	BlocksPerChunk int
}

// freedState marks a block that was handed out and freed.
const freedState = -1

// FixedSize is a resource of blocks of one size. Requests of at most
// BlockSize bytes get a whole block; larger ones are refused with an
// *OutOfMemoryError whose Limit is the block size. It is safe for
// concurrent use.
type FixedSize struct {
	name      string
	up        Resource
	dev       gpu.Device
	blockSize int
	perChunk  int
	chunkSize int

	chunks  spanIndex[*fsChunk]
	streams streamTable[fsStream]
	events  eventCache
	usage   usageMeter
	// meter is &usage, or, for the bins of a Binning, the Binning's
	// meter: one set of counters per operation, whoever reports them.
	meter     *usageMeter
	releaseMu sync.Mutex // one Release (or Close) at a time

	// donors are the streams that may have free blocks to spare, in the
	// order they came to have some: steal takes from the first that has,
	// rather than walking every stream (a program whose thousands of
	// streams each take blocks once would pay O(streams) per refill). A
	// stream queues itself when its list becomes non-empty (offer); fsStream
	// .queued says whether it is queued. stealMu is a leaf lock, taken under
	// a stream's mutex; it guards donors and queued.
	stealMu sync.Mutex
	donors  []*fsStream
}

type fsChunk struct {
	base  gpu.DevicePtr
	state []atomic.Int64
	owner []*fsStream
}

type fsBlock struct {
	c *fsChunk
	i int
}

type fsStream struct {
	streamState
	free   []fsBlock
	queued bool // in FixedSize.donors; guarded by FixedSize.stealMu
}

// offer queues st, whose list has blocks, as a donor. Called with st.mu.
func (r *FixedSize) offer(st *fsStream) {
	r.stealMu.Lock()
	if !st.queued {
		st.queued = true
		r.donors = append(r.donors, st)
	}
	r.stealMu.Unlock()
}

// nextDonor takes the first queued donor off the queue, or returns nil.
func (r *FixedSize) nextDonor() *fsStream {
	r.stealMu.Lock()
	defer r.stealMu.Unlock()
	if len(r.donors) == 0 {
		return nil
	}
	v := r.donors[0]
	r.donors[0] = nil
	r.donors = r.donors[1:]
	if len(r.donors) == 0 {
		r.donors = nil // let the backing array go
	}
	v.queued = false
	return v
}

// NewFixedSize returns a FixedSize resource that takes its chunks from
// upstream. Negative options fail with ErrInvalidSize.
func NewFixedSize(upstream Resource, opts FixedSizeOptions) (*FixedSize, error) {
	return newFixedSize("fixedsize", upstream, opts)
}

func newFixedSize(name string, upstream Resource, opts FixedSizeOptions) (*FixedSize, error) {
	if upstream == nil {
		return nil, fmt.Errorf("%s: nil upstream: %w", name, gpu.ErrInvalidHandle)
	}
	bs, n := opts.BlockSize, opts.BlocksPerChunk
	if bs == 0 {
		bs = 1 << 20
	}
	if n == 0 {
		n = 128
	}
	if bs < 0 || n < 0 || bs > maxAlignable || alignUp(bs) > maxAlignable/n {
		return nil, fmt.Errorf("%s: block size %d, %d blocks per chunk: %w", name, opts.BlockSize, opts.BlocksPerChunk, ErrInvalidSize)
	}
	bs = alignUp(bs)
	dev := upstream.Device()
	r := &FixedSize{
		name: name, up: upstream, dev: dev,
		blockSize: bs, perChunk: n, chunkSize: bs * n,
		events: newEventCache(dev),
	}
	r.meter = &r.usage
	return r, nil
}

// BlockSize is the size of every block.
func (r *FixedSize) BlockSize() int { return r.blockSize }

// Device is the upstream's device.
func (r *FixedSize) Device() gpu.Device { return r.dev }

// Usage reports the chunks held from upstream (Reserved) and the bytes
// asked for by live allocations (Used).
func (r *FixedSize) Usage() Usage { return r.meter.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (r *FixedSize) ResetPeaks() { r.meter.resetPeaks() }

// lockStream returns s's state, locked.
func (r *FixedSize) lockStream(s gpu.Stream) *fsStream {
	for {
		st := r.streams.get(s.ID(), func() *fsStream { return &fsStream{streamState: streamState{s: s}} })
		if st.lockLive() {
			return st
		}
	}
}

func (b fsBlock) ptr(bs int) gpu.DevicePtr { return b.c.base + gpu.DevicePtr(b.i*bs) }

// Allocate returns a block for a request of at most BlockSize bytes; a
// larger request is out of memory for this resource (Limit: BlockSize).
func (r *FixedSize) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc(r.name, r.dev, size, s); zero || err != nil {
		return 0, err
	}
	if size > r.blockSize {
		// Like RMM's bad_alloc: this resource cannot serve it, whatever
		// it holds; a fallback or binning layer above may.
		u := r.meter.snapshot()
		return 0, &OutOfMemoryError{Resource: r.name, Requested: size, Stream: s.ID(),
			Reserved: u.Reserved, Used: u.Used, Limit: uint64(r.blockSize),
			Reason: "larger than the block size"}
	}
	if id := gpu.CaptureID(s); id != 0 {
		return captureAllocate(r.captureClient(), id, size, s)
	}
	st := r.lockStream(s)
	var b fsBlock
	n := len(st.free)
	if n > 0 {
		b = st.free[n-1]
		st.free = st.free[:n-1]
	}
	st.mu.Unlock()
	if n == 0 {
		var err error
		if b, err = r.refill(st, size, s); err != nil {
			return 0, err
		}
	}
	b.c.owner[b.i] = st
	b.c.state[b.i].Store(int64(size))
	r.meter.addUsed(size)
	return b.ptr(r.blockSize), nil
}

// refill finds a block for s when its list is empty: by stealing from
// another stream, else by growing. Extra blocks go on s's list.
func (r *FixedSize) refill(st *fsStream, size int, s gpu.Stream) (fsBlock, error) {
	batch, err := r.steal(st)
	if err != nil {
		return fsBlock{}, fmt.Errorf("%s: allocate %d bytes: %w", r.name, size, err)
	}
	if batch == nil {
		if batch, err = r.grow(size, s); err != nil {
			return fsBlock{}, err
		}
	}
	b := batch[len(batch)-1]
	if rest := batch[:len(batch)-1]; len(rest) > 0 {
		st := r.lockStream(s)
		st.free = append(st.free, rest...)
		r.offer(st)
		st.mu.Unlock()
	}
	return b, nil
}

// steal takes half the free list of some other stream t, after making s
// wait on an event recorded on t. It returns nil if no list has a block.
// It visits the queued donors (see FixedSize.donors) and drops those whose
// list is empty; a donor with blocks left, or one it skips (its own
// stream, one under capture), is queued again behind the others.
func (r *FixedSize) steal(st *fsStream) ([]fsBlock, error) {
	var skipped []*fsStream
	defer func() {
		for _, v := range skipped {
			v.mu.Lock()
			if len(v.free) > 0 && !v.dead {
				r.offer(v)
			}
			v.mu.Unlock()
		}
	}()
	for {
		v := r.nextDonor()
		if v == nil {
			return nil, nil
		}
		if v == st {
			skipped = append(skipped, v)
			continue
		}
		v.mu.Lock()
		n := len(v.free)
		if n == 0 || v.dead {
			v.mu.Unlock()
			continue
		}
		if gpu.Capturing(v.s) {
			v.mu.Unlock()
			skipped = append(skipped, v)
			continue
		}
		take := (n + 1) / 2
		batch := slices.Clone(v.free[n-take:])
		clear(v.free[n-take:])
		v.free = v.free[:n-take]
		if len(v.free) > 0 {
			r.offer(v)
		}
		v.mu.Unlock()
		if err := r.events.order(st.s, v.s); err != nil {
			back := r.lockStream(v.s)
			back.free = append(back.free, batch...)
			r.offer(back)
			back.mu.Unlock()
			return nil, fmt.Errorf("steal from stream %d: %w", v.s.ID(), err)
		}
		return batch, nil
	}
}

// grow allocates a chunk from the upstream on s and returns its blocks,
// the first one last (handed out first).
func (r *FixedSize) grow(size int, s gpu.Stream) ([]fsBlock, error) {
	base, err := r.up.Allocate(r.chunkSize, s)
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			u := r.meter.snapshot()
			return nil, &OutOfMemoryError{Resource: r.name, Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Reason: "the upstream refused a chunk", Err: err}
		}
		return nil, fmt.Errorf("%s: grow by %d bytes: %w", r.name, r.chunkSize, err)
	}
	c := &fsChunk{base: base, state: make([]atomic.Int64, r.perChunk), owner: make([]*fsStream, r.perChunk)}
	r.chunks.add(base, r.chunkSize, c)
	r.meter.addReserved(r.chunkSize)
	batch := make([]fsBlock, r.perChunk)
	for i := range batch {
		batch[i] = fsBlock{c: c, i: r.perChunk - 1 - i}
	}
	return batch, nil
}

// Deallocate frees p in stream order on s; the block is reusable on s at
// once and on other streams after an event wait.
func (r *FixedSize) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree(r.name, r.dev, p, size, s); null || err != nil {
		return err
	}
	if id := gpu.CaptureID(s); id != 0 {
		return captureDeallocate(r.captureClient(), id, p, size, s, r.knows)
	}
	b, err := r.block(p)
	if err != nil {
		if handled, ferr := freeOutsideCapture(r.captureClient(), p, size, s); handled {
			return ferr
		}
		return fmt.Errorf("%s: deallocate: %w", r.name, err)
	}
	state := &b.c.state[b.i]
	for {
		cur := state.Load()
		switch {
		case cur == 0:
			return fmt.Errorf("%s: deallocate: %w", r.name, pointerError(p, ErrUnknownPointer))
		case cur == freedState:
			return fmt.Errorf("%s: deallocate: %w", r.name, pointerError(p, ErrDoubleFree))
		case cur != int64(size):
			return fmt.Errorf("%s: deallocate: %w", r.name, sizeMismatchError(p, int(cur), size))
		}
		if state.CompareAndSwap(cur, freedState) {
			break
		}
	}
	if owner := b.c.owner[b.i]; owner.s.ID() != s.ID() {
		if err := r.events.order(s, owner.s); err != nil {
			state.Store(int64(size))
			return fmt.Errorf("%s: deallocate %#x: %w", r.name, uint64(p), err)
		}
	}
	st := r.lockStream(s)
	st.free = append(st.free, b)
	if len(st.free) == 1 {
		r.offer(st)
	}
	st.mu.Unlock()
	r.meter.subUsed(size)
	return nil
}

// block finds the block that starts at p.
func (r *FixedSize) block(p gpu.DevicePtr) (fsBlock, error) {
	c, base, ok := r.chunks.find(p)
	if !ok || int(p-base)%r.blockSize != 0 {
		return fsBlock{}, pointerError(p, ErrUnknownPointer)
	}
	return fsBlock{c: c, i: int(p-base) / r.blockSize}, nil
}

// liveSize returns the size p was allocated with, if p is a live block of
// this resource (for Binning's size-mismatch diagnosis).
func (r *FixedSize) liveSize(p gpu.DevicePtr) (int, bool) {
	b, err := r.block(p)
	if err != nil {
		return 0, false
	}
	if v := b.c.state[b.i].Load(); v > 0 {
		return int(v), true
	}
	return 0, false
}

// Release returns every chunk whose blocks are all free to the upstream,
// in stream order, without blocking the host. It also forgets the state of
// streams whose lists are empty.
func (r *FixedSize) Release() error {
	r.releaseMu.Lock()
	defer r.releaseMu.Unlock()

	all := r.streams.all()
	states := make([]*fsStream, 0, len(all))
	for _, st := range all {
		states = append(states, st)
	}
	slices.SortFunc(states, func(a, b *fsStream) int { return cmp.Compare(a.s.ID(), b.s.ID()) })
	for _, st := range states {
		st.mu.Lock()
	}
	freeBlocks := make(map[*fsChunk]int)
	for _, st := range states {
		for _, b := range st.free {
			freeBlocks[b.c]++
		}
	}
	release := make(map[gpu.DevicePtr]bool)
	var chunks []*fsChunk
	for c, n := range freeBlocks {
		if n == r.perChunk {
			release[c.base] = true
			chunks = append(chunks, c)
		}
	}
	// held[i] is how many blocks of released chunks states[i] held.
	held := make([]int, len(states))
	for i, st := range states {
		if len(release) > 0 {
			st.free = slices.DeleteFunc(st.free, func(b fsBlock) bool {
				if release[b.c.base] {
					held[i]++
					return true
				}
				return false
			})
		}
		if len(st.free) == 0 {
			st.dead = true
		}
	}
	r.streams.dropIf(func(st *fsStream) bool { return st.dead })
	if len(release) > 0 {
		r.chunks.remove(release)
	}
	for _, st := range states {
		st.mu.Unlock()
	}
	if len(chunks) == 0 {
		return nil
	}

	// Order one stream X after every stream that held blocks of the
	// chunks, then free them all on X. X is the holder with the most
	// blocks that was not destroyed (or a new stream if all were).
	var holders []gpu.Stream
	for _, i := range heldOrder(held) {
		holders = append(holders, states[i].s)
	}
	xs, done, err := usableStream(r.dev, holders)
	if err != nil {
		r.restore(chunks, holders[0])
		return fmt.Errorf("%s: release: %w", r.name, err)
	}
	defer done()
	var errs []error
	for _, h := range holders {
		if err := r.events.order(xs, h); err != nil {
			r.restore(chunks, xs)
			return fmt.Errorf("%s: release: %w", r.name, err)
		}
	}
	for _, c := range chunks {
		if err := r.up.Deallocate(c.base, r.chunkSize, xs); err != nil {
			r.restore([]*fsChunk{c}, xs)
			errs = append(errs, err)
			continue
		}
		r.meter.subReserved(r.chunkSize)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: release: %w", r.name, err)
	}
	return nil
}

// heldOrder returns the indexes i with held[i] > 0, most held first.
func heldOrder(held []int) []int {
	var idx []int
	for i, n := range held {
		if n > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return held[b] - held[a] })
	return idx
}

// restore puts chunks that could not be released back: indexed again,
// their blocks on s's list. Their blocks are free and ordered before s.
func (r *FixedSize) restore(chunks []*fsChunk, s gpu.Stream) {
	for _, c := range chunks {
		r.chunks.add(c.base, r.chunkSize, c)
	}
	st := r.lockStream(s)
	for _, c := range chunks {
		for i := range r.perChunk {
			st.free = append(st.free, fsBlock{c: c, i: i})
		}
	}
	r.offer(st)
	st.mu.Unlock()
}

// Close releases everything cached and destroys the cached events. It
// fails if allocations are still live (their chunks stay held: free them
// and Close again).
func (r *FixedSize) Close() error {
	if err := r.Release(); err != nil {
		return err
	}
	if n := r.chunks.len(); n != 0 {
		return fmt.Errorf("%s: close: %d chunks still hold live blocks", r.name, n)
	}
	return r.events.Close()
}
