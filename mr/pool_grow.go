// The slow paths of a Pool: steal, growth, release, and frees of memory
// that is not live on the calling stream.
//
// All of them but deallocateSlow run under Pool.mu, which orders them with
// each other (a growth never races with a release of the chunk list) and is
// always taken before a stream's mutex. They take one stream's mutex at a
// time and never hold one across an upstream call, so a slow upstream (a
// synchronous cuMemFree) never stalls another stream's hot path.
//
// Order of resort for a request the calling stream's lists cannot serve:
// absorb the blocks other streams freed into this stream's chunks; steal
// the smallest idle chunk of another stream that fits and is not that
// stream's working chunk; with SplitBig, for a big request, split the
// best-fitting larger free block of the stream (giant chunks excepted,
// splitLarger); with SplitGiantAtMark, for a big request of a size seen
// before whose growth would give back idle chunks, a free block of a
// giant chunk (splitGiantAtMark, pool_giant.go); grow (first
// releasing idle chunks, largest first, as far as needed for the growth
// not to raise the high-water mark of reserved memory, or with
// ReservedSlack not to pass (1+ReservedSlack) times the peak of used
// bytes where that is higher, nor cross MaxSize or ReleaseThreshold;
// other streams' idle working chunks too in a pool of few streams
// without MaxSize, releaseBeforeGrowth); and on out of
// memory, steal even a working chunk, else release every idle chunk and
// go through it all once more.

package mr

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// allocateSlow serves a request that st's own lists could not.
func (p *Pool) allocateSlow(st *poolStream, size, rounded int, owner uint32) (gpu.DevicePtr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowOwner = owner
	// Release may have forgotten st since the caller looked it up: a
	// chunk homed at a forgotten state would be lost to lookups.
	st.lock()
	dropped := st.dropped
	st.mu.Unlock()
	if dropped {
		st = p.streamOf(st.s)
	}
	small := rounded <= p.tune.smallMax
	// Whether a big request of this size came here before (only with
	// SplitGiantAtMark; pool_giant.go).
	repeat := !small && p.seen != nil && p.seen.note(rounded)
	var errs []error
	var upstreamErr error
	if !p.grown && p.opts.InitialSize > 0 {
		if err := p.growInitial(st); err != nil {
			// Not fatal: the request may still be served by a smaller
			// growth.
			errs = append(errs, err)
		}
	}
	for attempt := 0; ; attempt++ {
		// Another goroutine on this stream may have freed or grown.
		ptr, ok, err := p.tryOwn(st, size, rounded)
		if ok {
			return ptr, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
		stole, err := p.steal(st, rounded, small, false)
		if err != nil {
			errs = append(errs, err)
		}
		if stole {
			if ptr, ok, _ := p.tryOwn(st, size, rounded); ok {
				return ptr, nil
			}
		}
		if !small && p.opts.SplitBig {
			if ptr, ok := p.splitLarger(st, size, rounded); ok {
				return ptr, nil
			}
			if repeat && p.grower == nil {
				if ptr, ok := p.splitGiantAtMark(st, size, rounded); ok {
					return ptr, nil
				}
			}
		}
		ptr, err = p.grow(st, size, rounded, small)
		if err == nil {
			return ptr, nil
		}
		if !errors.Is(err, ErrOutOfMemory) {
			return 0, fmt.Errorf("pool: allocate %d bytes: %w", size, errors.Join(append(errs, err)...))
		}
		if !errors.Is(err, errPoolLimit) {
			upstreamErr = err
		}
		if attempt > 0 {
			break
		}
		// Out of memory: take even a chunk another stream is working
		// from; failing that, give back every idle chunk and try once
		// more.
		stole, err = p.steal(st, rounded, small, true)
		if err != nil {
			errs = append(errs, err)
		}
		if stole {
			if ptr, ok, _ := p.tryOwn(st, size, rounded); ok {
				return ptr, nil
			}
		}
		released, err := p.releaseIdle(st, 0, true)
		if err != nil {
			errs = append(errs, err)
		}
		if released == 0 {
			break
		}
	}
	u := p.Usage()
	e := &OutOfMemoryError{Resource: "pool", Requested: size, Stream: st.id,
		Reserved: u.Reserved, Used: u.Used, Limit: uint64(p.opts.MaxSize),
		LargestFree: p.largestFreeLocked(), Reason: "MaxSize reached"}
	if upstreamErr != nil {
		e.Reason = "the upstream refused to grow the pool"
		errs = append(errs, upstreamErr)
	}
	e.Err = errors.Join(errs...)
	return 0, e
}

// errPoolLimit is the reason a growth refused to cross MaxSize.
var errPoolLimit = fmt.Errorf("pool: MaxSize reached: %w", ErrOutOfMemory)

// tryOwn serves the request from st's lists, absorbing pending blocks.
func (p *Pool) tryOwn(st *poolStream, size, rounded int) (gpu.DevicePtr, bool, error) {
	st.lock()
	defer st.mu.Unlock()
	b, err := st.serve(rounded)
	if b == nil {
		return 0, false, err
	}
	st.markLive(b, size, p.slowOwner)
	return b.ptr, true, nil
}

// steal moves to st the smallest chunk of its class without live blocks
// that another stream homes and that can hold rounded bytes, and absorbs
// it: st waits on one event on the old home (and one per stream that
// freed a pending block of the chunk). Unless force is set, it leaves
// alone the chunk each stream last allocated from (its working chunk):
// taking it from a stream that is busy with it would only make that stream
// take one back, and streams would pass chunks around instead of growing
// to one each. Caller holds p.mu.
func (p *Pool) steal(st *poolStream, rounded int, small, force bool) (bool, error) {
	var after uint64
	for o := p.nextCand(0, force, nil); o != nil; o = p.nextCand(after, force, nil) { // only streams that may home an idle chunk it may take (pool_walk.go)
		after = o.seq
		if o == st || gpu.Capturing(o.s) {
			continue
		}
		o.lock()
		o.quickFlush()
		var best *poolChunk
		for _, c := range o.homed {
			// A growable chunk moves only when memory is short: its
			// memory passes to other streams by decommits instead
			// (pool_vgrow.go), and its range stays its stream's.
			if !c.inUse() && c.small == small && c.size >= rounded && c.size-rounded <= p.slack(rounded) &&
				(force || !o.isWorking(c)) && (force || c.limit == 0) && (best == nil || c.size < best.size) {
				best = c
			}
		}
		if best == nil {
			o.sortCand()
			o.mu.Unlock()
			continue
		}
		o.detach(best, nil)
		o.removeHomed(best, st)
		o.sortCand()
		o.mu.Unlock()

		p.wide.steals++
		st.lock()
		st.attach(best)
		err := st.absorb()
		st.mu.Unlock()
		if err != nil {
			return true, fmt.Errorf("pool: steal from stream %d: %w", o.id, err)
		}
		return true, nil
	}
	return false, nil
}

// poolGiantShare: with SplitBig, a chunk of at least 1/poolGiantShare of
// the pool's high-water mark of reserved bytes is a giant one, split only
// for a request of at least half its size (splitLarger).
const poolGiantShare = 16

// splitLarger serves a big request from the free block of st's large
// chunks that fits it best, whatever its size (PoolOptions.SplitBig): the
// block is split and the rest stays free in its chunk. It reports false
// if no free block is large enough.
//
// Giant chunks are kept for requests of their own scale. A model's largest
// tensors (a language model's logits, over a tenth of a step's memory)
// come back every step at the same size or close to it; if a transient
// block is cut from a giant chunk while it is free, the next giant request
// finds no block large enough, although the pool holds the bytes, and
// grows a second giant chunk above the high-water mark. Replaying the H100
// memory history of GPT-2 training over 34 steps, splitting any block
// raised peak reserved to 1.14 times peak live (1.016 without SplitBig);
// keeping giant chunks for requests of at least half their size, 1.026,
// with under two growths a step where the default pool makes 77
// (pluggable's trace_test.go). Caller holds p.mu.
func (p *Pool) splitLarger(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	giant := int(p.usage.peakReserved.Load()) / poolGiantShare
	st.lock()
	defer st.mu.Unlock()
	st.quickFlush()
	b := st.large.findFit(rounded, func(b *poolBlock) bool {
		return b.c.size < giant || rounded >= b.c.size/2
	})
	if b == nil {
		return 0, false
	}
	b = st.split(&st.large, b, rounded)
	st.markLive(b, size, p.slowOwner)
	p.wide.bigSplits++
	return b.ptr, true
}

// grow reserves a new chunk on st's stream and serves the request from it.
// Caller holds p.mu.
func (p *Pool) grow(st *poolStream, size, rounded int, small bool) (gpu.DevicePtr, error) {
	if p.grower != nil && !small {
		return p.growInPlace(st, size, rounded) // pool_vgrow.go
	}
	g := p.growthSize(rounded, small)
	// Idle chunks cannot serve this request (a steal would have taken
	// one). Keep them only as far as the growth stays under the
	// high-water mark (but keep InitialSize), the threshold and MaxSize.
	target := p.releaseTarget(g)
	inRanges := small && p.opts.SmallAtPeak && p.grower != nil && !p.lifetimes
	if inRanges {
		target = p.smallTarget(g) // MappedSlack's margin, as a commit's
	}
	reserved := int(p.usage.reserved.Load())
	if inRanges && reserved > target {
		// Mapped free room in the stream's ranges before giving memory
		// back for a small chunk (pool_vpeak.go).
		if ptr, ok := p.smallAtPeak(st, size, rounded); ok {
			return ptr, nil
		}
	}
	if reserved > target {
		if _, err := p.releaseBeforeGrowth(st, max(target, 0)); err != nil {
			return 0, err
		}
		reserved = int(p.usage.reserved.Load())
	}
	if small && p.grower != nil && st.borrows < poolBorrowMax {
		// Another stream's small chunk may have room (pool_vborrow.go).
		if ptr, ok := p.borrowSmall(st, size, rounded); ok {
			return ptr, nil
		}
	}
	if small && p.grower != nil && p.lifetimes && reserved > target {
		// A small chunk would raise the high-water mark: mapped free
		// room in the stream's growable chunks first (pool_vpeak.go;
		// over a refusing Grower that came before the release).
		if ptr, ok := p.smallAtPeak(st, size, rounded); ok {
			return ptr, nil
		}
	}
	if p.opts.MaxSize > 0 && g > p.opts.MaxSize-reserved {
		room := (p.opts.MaxSize - reserved) &^ (Alignment - 1)
		if room < rounded {
			return 0, errPoolLimit
		}
		g = room
	}
	return p.newChunk(st, g, small, size, rounded)
}

// growthSize is the size of the chunk a growth for a request of rounded
// bytes reserves (over an upstream that is not a Grower).
func (p *Pool) growthSize(rounded int, small bool) int {
	if small {
		return p.tune.smallChunk
	}
	g := poolRoundUp(rounded, p.tune.granularity)
	if rounded < p.tune.bigMin {
		g = max(p.opts.ChunkSize, g)
	}
	return g
}

// releaseTarget is the most the pool may reserve before a growth of g
// bytes: the growth first gives back idle chunks down to it
// (releaseBeforeGrowth), so as not to raise the high-water mark of
// reserved bytes, or with ReservedSlack the higher of that mark and
// (1+ReservedSlack) times the peak of used bytes (but keeping
// InitialSize), nor cross ReleaseThreshold or MaxSize. Caller holds p.mu.
func (p *Pool) releaseTarget(g int) int {
	mark := int(p.usage.peakReserved.Load())
	if s := p.opts.ReservedSlack; s > 0 {
		p.flushDirty() // pool_walk.go: the streams' unflushed used bytes
		mark = max(mark, int(math.Ceil((1+s)*float64(p.usage.peakUsed.Load()))))
	}
	target := max(mark-g, p.opts.InitialSize)
	if p.opts.ReleaseThreshold > 0 {
		target = min(target, p.opts.ReleaseThreshold-g)
	}
	if p.opts.MaxSize > 0 {
		target = min(target, p.opts.MaxSize-g)
	}
	return target
}

// growInitial reserves the InitialSize chunk, a large one, on the first
// growth. Caller holds p.mu.
func (p *Pool) growInitial(st *poolStream) error {
	p.grown = true
	g := poolRoundUp(p.opts.InitialSize, p.tune.granularity)
	if p.opts.MaxSize > 0 {
		g = min(g, p.opts.MaxSize&^(Alignment-1))
	}
	if p.grower != nil {
		if gran := p.grower.GrowGranularity(); g >= gran {
			if _, err := p.newGrowable(st, g/gran*gran, 0, 0, false); err == nil {
				return nil
			}
		}
	}
	_, err := p.newChunk(st, g, false, 0, 0)
	return err
}

// newChunk allocates g bytes from upstream on st's stream, files them as
// one free chunk homed at st and, if size > 0, serves the request from it
// under the same lock (so another goroutine on st cannot take it first).
// Caller holds p.mu.
func (p *Pool) newChunk(st *poolStream, g int, small bool, size, rounded int) (gpu.DevicePtr, error) {
	ptr, err := p.upstream.Allocate(g, st.s)
	if err != nil {
		return 0, fmt.Errorf("pool: grow by %d bytes: %w", g, err)
	}
	if ptr == 0 || ptr%Alignment != 0 {
		if ptr != 0 {
			p.upstream.Deallocate(ptr, g, st.s)
		}
		return 0, fmt.Errorf("pool: grow by %d bytes: upstream returned misaligned %#x: %w", g, uint64(ptr), gpu.ErrInvalidValue)
	}
	p.grown = true
	p.wide.growths++
	c := &poolChunk{base: ptr, size: g, small: small}
	p.chunks.add(c.base, c.size, c)
	p.usage.addReserved(g)
	st.lock()
	defer st.mu.Unlock()
	b := st.newBlock()
	b.ptr, b.size, b.c = ptr, g, c
	c.first = b
	st.addHomed(c)
	st.putFree(b)
	if size == 0 {
		return 0, nil
	}
	b = st.split(st.binsOf(c), b, rounded)
	st.markLive(b, size, p.slowOwner)
	return b.ptr, nil
}

// releaseIdle gives idle chunks back to the upstream, largest first,
// until the pool reserves at most keep bytes (keep <= 0: every idle
// chunk). Unless force is set, it keeps the working chunks of streams
// other than requester (see steal). It returns the bytes released. The free of a chunk is enqueued
// on its home, after the home waits on every other stream that freed a
// block of it; if the home was destroyed, on requester (or another stream)
// after a device synchronization. Caller holds p.mu.
func (p *Pool) releaseIdle(requester *poolStream, keep int, force bool) (int, error) {
	return p.releaseIdleOf(requester, keep, force, false)
}

// poolFewStreams is the most streams a pool may have for a growth that
// would raise the high-water mark to release other streams' idle working
// chunks first (releaseBeforeGrowth).
const poolFewStreams = 64

// releaseBeforeGrowth is releaseIdle without force for a growth that
// would raise the high-water mark of reserved memory: in a pool of at
// most poolFewStreams streams and without MaxSize it gives back other
// streams' idle working chunks too. Such a chunk is kept from steals,
// which would make its stream take another and streams pass chunks
// around (steal); but kept through a new peak it is memory no stream uses
// at the peak (a replayed three-stream pipeline held a 64 MiB one: 1.089
// of peak live, 1.018 without it), and its stream grows again only if it
// needs the memory. Those chunks sit on parked streams, which the walks
// skip (pool_walk.go): visiting them costs a growth O(streams), hence
// the bound. Under MaxSize a growth that does not fit fails over to the
// out-of-memory path instead, which steals such a chunk, memory and all,
// after an event wait (allocateSlow), where a release would give it back
// and could wait for its stream on the host (Direct). Caller holds p.mu.
func (p *Pool) releaseBeforeGrowth(requester *poolStream, keep int) (int, error) {
	return p.releaseIdleOf(requester, keep, false, p.opts.MaxSize == 0 && p.streams.len() <= poolFewStreams)
}

// releaseIdleOf is releaseIdle; with working, it also gives back the
// idle working chunks of streams other than requester, growable ones
// excepted.
func (p *Pool) releaseIdleOf(requester *poolStream, keep int, force, working bool) (int, error) {
	type cand struct {
		c    *poolChunk
		home *poolStream
	}
	var cands []cand
	var after uint64
	for o := p.nextCand(0, force || working, requester); o != nil; o = p.nextCand(after, force || working, requester) { // only streams that may home an idle chunk it may take (pool_walk.go)
		after = o.seq
		if gpu.Capturing(o.s) {
			continue // its chunks cannot be freed on it now (capture.go)
		}
		o.lock()
		o.quickFlush()
		for _, c := range o.homed {
			// An idle growable chunk keeps its range, unless forced:
			// decommitFree below gives back its memory, and the range
			// serves the stream's next growth without a new reservation.
			if !c.inUse() && (force || working || o == requester || !o.isWorking(c)) && (p.spare.u == nil || p.spare.u.c != c) && (force || c.limit == 0) {
				cands = append(cands, cand{c, o})
			}
		}
		o.sortCand()
		o.mu.Unlock()
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.c.held(), a.c.held()) })
	var errs []error
	released := 0
	gone := make(map[gpu.DevicePtr]bool)
	for _, x := range cands {
		if keep > 0 && int(p.usage.reserved.Load()) <= keep {
			break
		}
		c, o := x.c, x.home
		o.lock()
		if c.home.Load() != o || c.inUse() {
			// o's own allocations (which take no p.mu) used it since
			// the candidates were listed.
			o.mu.Unlock()
			continue
		}
		waits := o.detach(c, nil)
		var werr error
		for _, w := range waits {
			if werr = o.orderAfter(w); werr != nil {
				break
			}
		}
		if werr != nil {
			o.refile(c)
			o.mu.Unlock()
			if !errors.Is(werr, ErrStreamCapturing) { // kept until the capture ends (capture.go)
				errs = append(errs, fmt.Errorf("pool: release chunk %#x: %w", uint64(c.base), werr))
			}
			continue
		}
		// Every block of c is free and ordered before o's later work:
		// drop the descriptors, the chunk is one range now. A growable
		// chunk keeps them until the upstream took it: which of its
		// granules are mapped is in its blocks.
		growable := c.limit > 0
		if !growable {
			o.dropBlocks(c)
		}
		o.removeHomed(c, nil)
		o.mu.Unlock()

		if err := p.upstreamFree(c, o, requester); err != nil {
			o.lock()
			if growable {
				o.attach(c)
			} else {
				b := o.newBlock()
				b.ptr, b.size, b.c = c.base, c.size, c
				c.first = b
				o.addHomed(c)
				o.putFree(b)
			}
			o.mu.Unlock()
			if !errors.Is(err, ErrStreamCapturing) { // kept until the capture ends (capture.go)
				errs = append(errs, err)
			}
			continue
		}
		// Removed from the index below, all in one rebuild: until then a
		// free of an address in c finds it with no home, an unknown
		// pointer, as it is.
		gone[c.base] = true
		if growable {
			p.forgetGrowable(c)
			o.lock()
			o.dropBlocks(c)
			o.mu.Unlock()
		}
		p.usage.subReserved(c.held())
		released += c.held()
		p.wide.releases++
	}
	p.chunks.remove(gone)
	if p.grower != nil && (keep <= 0 || int(p.usage.reserved.Load()) > keep) {
		// Then the free granules of growable chunks (pool_vgrow.go).
		n, err := p.decommitFree(keep)
		released += n
		errs = append(errs, err)
	}
	return released, errors.Join(errs...)
}

// upstreamFree gives chunk c, detached from its home o, back to the
// upstream on o's stream. If o's stream was destroyed, it synchronizes the
// device (o's last work may still be running, and no event can be
// recorded on o any more) and frees on another stream the pool knows, or,
// if every one was destroyed (a program that releases its resources after
// its streams), on a stream made for the purpose (usableStream).
func (p *Pool) upstreamFree(c *poolChunk, o, requester *poolStream) error {
	err := p.upstream.Deallocate(c.base, c.size, o.s)
	if err == nil || !errors.Is(err, gpu.ErrDestroyed) {
		if err != nil {
			return fmt.Errorf("pool: release poolChunk %#x: %w", uint64(c.base), err)
		}
		return nil
	}
	if err := synchronizeDevice(p.dev); err != nil {
		return fmt.Errorf("pool: release poolChunk %#x of destroyed stream %d: %w", uint64(c.base), o.id, err)
	}
	var candidates []gpu.Stream
	if requester != nil && requester != o {
		candidates = append(candidates, requester.s)
	}
	for _, x := range p.streams.all() {
		if x != o {
			candidates = append(candidates, x.s)
		}
	}
	s, done, err := usableStream(p.dev, candidates)
	if err != nil {
		return fmt.Errorf("pool: release poolChunk %#x of destroyed stream %d: %w", uint64(c.base), o.id, err)
	}
	defer done()
	if err := p.upstream.Deallocate(c.base, c.size, s); err != nil {
		return fmt.Errorf("pool: release poolChunk %#x of destroyed stream %d: %w", uint64(c.base), o.id, err)
	}
	return nil
}

// trim releases idle chunks until the pool reserves at most
// ReleaseThreshold bytes, keeping the working chunks of streams other
// than st.
func (p *Pool) trim(st *poolStream) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.releaseIdle(st, p.opts.ReleaseThreshold, false)
	return err
}

// deallocateSlow frees ptr, which is not live on the calling stream's own
// chunks: memory of another stream's chunk (a cross-stream free), or bad
// input, which it diagnoses without changing anything.
func (p *Pool) deallocateSlow(ptr gpu.DevicePtr, size int, s gpu.Stream, owner uint32) error {
	c, _, ok := p.chunks.find(ptr)
	if !ok {
		if handled, err := freeOutsideCapture(p.ownerClient(owner), ptr, size, s); handled {
			return err
		}
		return fmt.Errorf("pool: deallocate: %w", pointerError(ptr, ErrUnknownPointer))
	}
	var from *poolStream
	for {
		h := c.home.Load()
		if h == nil {
			// Being released: it has no live block.
			return fmt.Errorf("pool: deallocate: %w", pointerError(ptr, ErrUnknownPointer))
		}
		if from == nil && h.id != s.ID() {
			// Created before h.mu is taken: creating takes the table lock.
			from = p.streamOf(s)
		}
		h.lock()
		if c.home.Load() != h {
			h.mu.Unlock()
			continue
		}
		b := h.live.get(ptr)
		if b == nil {
			err := h.diagnose(c, ptr)
			h.mu.Unlock()
			return fmt.Errorf("pool: deallocate: %w", pointerError(ptr, err))
		}
		if b.owner != owner {
			h.mu.Unlock()
			return fmt.Errorf("pool: deallocate: %w", pointerError(ptr, ErrUnknownPointer))
		}
		if b.req != size {
			req := b.req
			h.mu.Unlock()
			return poolSizeMismatch(ptr, req, size)
		}
		if h.id == s.ID() {
			h.freeOwn(b)
		} else {
			h.freeForeign(b, from)
		}
		idle := c.idle()
		h.mu.Unlock()
		if idle && p.opts.ReleaseThreshold > 0 && p.usage.reserved.Load() > uint64(p.opts.ReleaseThreshold) {
			return p.trim(h)
		}
		return nil
	}
}

// dropBlocks recycles the descriptors of c, released or about to be, all
// of whose blocks are detached. Caller holds st.mu.
func (st *poolStream) dropBlocks(c *poolChunk) {
	for b := c.first; b != nil; {
		next := b.next
		st.putSpare(b)
		b = next
	}
	c.first, c.pending = nil, 0
}
