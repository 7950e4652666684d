// The per-stream state of a Pool: everything the hot path touches.
//
// A poolStream owns the chunks whose home it is, and with them their
// blocks: tlsf indexes of free blocks (one for small chunks, one for
// large ones, and over a Grower one for the growable chunks of predicted
// short-lived blocks, pool_lifetime.go), a map of live blocks by address,
// and, per other stream, a list of pending blocks that the other stream
// freed. Its mutex guards all of that; a goroutine on another stream takes
// it only on a slow path (a free of memory allocated here, a steal, a
// release), never to serve its own requests. So goroutines that each have
// a stream never contend.
//
// Invariants, under mu:
//   - a block of a chunk homed here is in exactly one of: small, large or
//     largeShort, the index binsOf names for its chunk (free), live
//     (live), quick[:nquick] (cached), pendingLists[i] with
//     from == freedBy (pending);
//   - no two neighbouring blocks of a chunk are both free (free blocks
//     coalesce as soon as they become free; a cached block is not free);
//   - used is the sum of req over the live blocks; pendingBytes the sum of
//     size over the pending ones;
//   - homed[c.homeIdx] == c for every chunk homed here.
//
// Block descriptors and events are recycled through per-stream free lists
// (spare, events), so that in steady state no operation allocates.

package mr

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	// poolSpareBatch is the most block descriptors a stream allocates at
	// once when its spare list runs dry: the first batch is
	// poolSpareFirst, and each next one twice the last, so that a stream
	// with a block or two costs little.
	poolSpareBatch = 64
	poolSpareFirst = 4
	// maxStreamEvents bounds the events a stream keeps for reuse.
	poolStreamEvents = 4
	// freedRing is how many freed pointers a stream remembers.
	poolFreedRing = 16
)

// pendingList holds the blocks of chunks homed at one stream that another
// stream (from) freed: reusable by the home once it waits on an event
// recorded on from after the frees.
type poolPending struct {
	from  *poolStream
	head  *poolBlock
	bytes int
}

type poolStream struct {
	// Layout: the fields every request reads or writes come first, on
	// the state's first four cache lines (with the heap's 8-byte header
	// before an object of this size; TestPoolHotLines checks them): the
	// fast path's (gated and the fast slot's words) and the locked
	// path's flags and cache count; the counters a served request
	// writes; the quick cache; the live map and the spare descriptors;
	// then, on a fifth, life and the working chunks, which every served
	// request reads. A call whose caches the host's work evicted (the C ABI inside
	// PyTorch) misses on each line it touches.
	mu sync.Mutex // taken with lock, which settles the fast slot
	// gated: the capture gate covers s (gpu.CaptureGated), so requests
	// skip asking it for its capture while no capture is in progress.
	gated bool
	// pool_walk.go: listed in Pool.dirty; listed in Pool.parked
	// (parked). pool_largest.go: listed in Pool.lfStale (under mu).
	dirty, parked, lfStale bool
	// pool_vhole.go: the pool packs holes (PoolOptions.PackHoles over a
	// Grower with the lifetime placement; set once, at creation).
	// pool_vpair.go: with packHoles, the block handed out last is still
	// cached whole when it is freed (PoolOptions.HolesKeepPair; set once).
	packHoles, keepPair bool

	// The fast slot (pool_fast.go): fstate, fptr and fowner are read and
	// swapped without mu; fblock and fepoch change under mu.
	fowner atomic.Uint32 // the owner of fptr's block, read with it
	fstate atomic.Uint64
	fptr   atomic.Uint64
	pool   *Pool
	nquick int // pool_quick.go

	// last is the block the stream handed out last (markLive), the one
	// arm accepts.
	last *poolBlock
	// used is the sum of req over live blocks; unflushed is what it
	// changed by since this stream last added to the pool-wide total
	// (Pool.usedSum, which drives PeakUsed).
	used      int64
	unflushed int64
	freedPos  uint            // the next slot of freed
	stats     poolStreamStats // pool_stats.go

	quick      [poolQuick]*poolBlock // pool_quick.go
	live       ptrMap
	spare      *poolBlock
	life       *poolLife // pool_lifetime.go; nil unless over a Grower
	spareBatch int       // descriptors newBlock allocated last time

	id uint64
	// working holds the chunks the last small and large allocations came
	// from; other streams leave them alone unless memory is short. Every
	// allocation reads it (markLive), so it shares the line of life, which
	// markLive and unlisted read too, rather than one of its own.
	working [2]*poolChunk
	fblock  *poolBlock
	fepoch  uint64
	s       gpu.Stream

	small, large tlsf
	largeShort   tlsf // free blocks of short-lived growable chunks
	pendingLists []poolPending
	pendingBytes int
	homed        []*poolChunk
	events       []gpu.Event
	// freed remembers the last pointers freed from this stream's chunks,
	// to tell a double free from an unknown pointer (diagnose).
	freed [poolFreedRing]gpu.DevicePtr

	// pool_walk.go: listed in Pool.cands or Pool.parked (cand),
	// forgotten by Release; seq orders the streams as the pool first saw
	// them.
	cand, dropped bool
	seq           uint64
	// The tree of Pool.cands or Pool.parked st is in, and its links
	// there (pool_candtree.go), under Pool.aux.
	tree   uint8
	cl, cr *poolStream
	// pool_largest.go: the largest block filed and the place in
	// Pool.lfHeap, plus one (under Pool.mu).
	lf, lfAt int
	// pool_vborrow.go: the small blocks this stream took from other
	// streams' small chunks (under Pool.mu).
	borrows int
	// pool_vhole.go: the free blocks of growable chunks filed lately,
	// where a request smaller than a granule may fill a hole.
	holes    [poolHoles]*poolBlock
	holesPos int

	_ [64]byte // keep the next stream's mutex off this cache line
}

func newPoolStream(p *Pool, s gpu.Stream) *poolStream {
	st := &poolStream{id: s.ID(), s: s, pool: p, gated: gpu.CaptureGated(s)}
	if p.lifetimes {
		st.life = new(poolLife) // pool_lifetime.go
		st.packHoles = p.opts.PackHoles
		st.keepPair = p.opts.PackHoles && p.opts.HolesKeepPair
	}
	return st
}

func (st *poolStream) binsOf(c *poolChunk) *tlsf {
	if c.small {
		return &st.small
	}
	if c.short {
		return &st.largeShort
	}
	return &st.large
}

// newBlock returns a zeroed descriptor from the spare list.
func (st *poolStream) newBlock() *poolBlock {
	if st.spare == nil {
		st.spareBatch = min(max(2*st.spareBatch, poolSpareFirst), poolSpareBatch)
		bs := make([]poolBlock, st.spareBatch)
		for i := range bs[:len(bs)-1] {
			bs[i].lnext = &bs[i+1]
		}
		st.spare = &bs[0]
	}
	b := st.spare
	st.spare = b.lnext
	b.lnext = nil
	return b
}

func (st *poolStream) putSpare(b *poolBlock) {
	*b = poolBlock{lnext: st.spare}
	st.spare = b
}

// serve takes a block for a request of rounded bytes from the stream's
// own memory, in order of cost: the quick cache; the tlsf, after the cache
// is flushed into it (a miss means the run of repeated sizes ended); the
// tlsf after the blocks other streams freed are absorbed (one event per
// freeing stream). The block is not yet marked live. It returns nil if
// none serves, and absorb's error, which leaves the blocks of the streams
// it could not wait on pending.
func (st *poolStream) serve(rounded int) (*poolBlock, error) {
	if st.nquick > 0 { // an empty cache (an allocation after one) costs no call
		if b := st.quickTake(rounded); b != nil {
			st.stats.quickHits++
			return b, nil
		}
		st.quickFlush()
	}
	t := &st.large
	if rounded <= st.pool.tune.smallMax {
		t = &st.small
	} else if st.life != nil && st.life.short(rounded) {
		t = &st.largeShort
	}
	if st.packHoles && t != &st.small { // PoolOptions.PackHoles, pool_vhole.go
		if b := st.takeHole(t, rounded); b != nil {
			return b, nil
		}
	}
	// take, written out: the common case costs no call of its own.
	if b := t.find(rounded); b != nil && b.size-rounded <= st.pool.slack(rounded) {
		return st.split(t, b, rounded), nil
	}
	if t == &st.largeShort && !st.packHoles { // as takeFrom, without its call
		if b := st.take(&st.large, rounded); b != nil {
			return b, nil
		}
	}
	if st.pendingBytes == 0 {
		return nil, nil
	}
	err := st.absorb()
	return st.takeFrom(t, rounded), err
}

// takeFrom is take from t and, if t is the index of the short-lived
// chunks, then from the long-lived ones': a request predicted short-lived
// takes a free block of either rather than a commit (pool_lifetime.go),
// unless the pool packs holes (PoolOptions.PackHoles), which keeps it in
// the short chunks (pool_vhole.go).
func (st *poolStream) takeFrom(t *tlsf, rounded int) *poolBlock {
	if b := st.take(t, rounded); b != nil || t != &st.largeShort || st.packHoles {
		return b
	}
	return st.take(&st.large, rounded)
}

// take removes from bins a free block of at least rounded bytes, splits off
// what it does not need, and returns it (still marked free), or nil.
func (st *poolStream) take(t *tlsf, rounded int) *poolBlock {
	b := t.find(rounded)
	if b == nil || b.size-rounded > st.pool.slack(rounded) {
		return nil
	}
	return st.split(t, b, rounded)
}

// split takes free block b (of at least rounded bytes) out of t, files
// what it does not need as a new free block, and returns it.
func (st *poolStream) split(t *tlsf, b *poolBlock, rounded int) *poolBlock {
	t.remove(b)
	if rest := b.size - rounded; rest > 0 {
		r := st.newBlock()
		r.ptr = b.ptr + gpu.DevicePtr(rounded)
		r.size = rest
		r.c = b.c
		r.state = blockFree
		r.prev, r.next = b, b.next
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		b.size = rounded
		t.insert(r)
	}
	return b
}

// markLive hands b out for a request of req bytes.
func (st *poolStream) markLive(b *poolBlock, req int, owner uint32) {
	b.state = blockLive
	b.owner = owner
	b.handed = true
	b.req = req
	st.last = b
	st.stats.allocs++
	if c := b.c; st.working[c.class()] != c {
		st.working[c.class()] = c
	}
	st.live.put(b.ptr, b)
	b.c.live++
	if st.addUsed(req) {
		st.usedFlush(req)
	}
	if st.life != nil {
		st.life.handed(b, req, b.c.limit > 0)
	}
}

// putFree marks b (in no list, freedBy nil) free, coalesces it with its
// free neighbours and files the result.
func (st *poolStream) putFree(b *poolBlock) {
	b.state = blockFree
	t := st.binsOf(b.c)
	if n := b.next; n != nil && n.state == blockFree {
		t.remove(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
		st.putSpare(n)
	}
	if p := b.prev; p != nil && p.state == blockFree {
		t.remove(p)
		p.size += b.size
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		st.putSpare(b)
		b = p
	}
	t.insert(b)
	if st.packHoles && b.c.limit > 0 {
		st.noteHole(b) // pool_vhole.go
	}
}

// unlive takes live block b out of the live map and the counters.
func (st *poolStream) unlive(b *poolBlock) {
	st.live.del(b.ptr)
	st.unlisted(b)
}

// unlisted counts live block b, out of the live map now, out of the
// stream's counters.
func (st *poolStream) unlisted(b *poolBlock) {
	st.freed[st.freedPos%poolFreedRing] = b.ptr
	st.freedPos++
	if st.life != nil && b.c.limit > 0 {
		st.life.freed(b)
	}
	b.c.live--
	if b.c.live == 0 && !st.cand {
		st.markCand()
	}
	if st.addUsed(-b.req) {
		st.usedFlush(-b.req)
	}
	b.req = 0
}

// freeOwn frees live block b on the home stream itself: reusable at once.
func (st *poolStream) freeOwn(b *poolBlock) {
	st.unlive(b)
	st.putFree(b)
}

// freeForeign frees live block b on stream from, another stream than the
// home: b becomes pending until the home is ordered after from.
func (st *poolStream) freeForeign(b *poolBlock, from *poolStream) {
	st.unlive(b)
	st.stats.crossFrees++
	st.addPending(b, from)
}

// addPending files b (in no list) as pending, freed by from.
func (st *poolStream) addPending(b *poolBlock, from *poolStream) {
	b.state = blockPending
	b.freedBy = from
	b.c.pending++
	st.pendingBytes += b.size
	var pl *poolPending
	for i := range st.pendingLists {
		if st.pendingLists[i].from == from {
			pl = &st.pendingLists[i]
			break
		}
	}
	if pl == nil {
		st.pendingLists = append(st.pendingLists, poolPending{from: from})
		pl = &st.pendingLists[len(st.pendingLists)-1]
	}
	b.lprev, b.lnext = nil, pl.head
	if pl.head != nil {
		pl.head.lprev = b
	}
	pl.head = b
	pl.bytes += b.size
}

// removePending takes pending block b out of its list.
func (st *poolStream) removePending(b *poolBlock) {
	for i := range st.pendingLists {
		pl := &st.pendingLists[i]
		if pl.from != b.freedBy {
			continue
		}
		if b.lprev != nil {
			b.lprev.lnext = b.lnext
		} else {
			pl.head = b.lnext
		}
		if b.lnext != nil {
			b.lnext.lprev = b.lprev
		}
		b.lprev, b.lnext = nil, nil
		pl.bytes -= b.size
		break
	}
	b.c.pending--
	st.pendingBytes -= b.size
}

// absorb makes the blocks other streams freed reusable here: for each
// freeing stream, one event recorded on it and waited on by this stream
// covers all of its blocks. On an error, the blocks of that stream stay
// pending and the others are absorbed.
func (st *poolStream) absorb() error {
	var errs []error
	kept := st.pendingLists[:0]
	for _, pl := range st.pendingLists {
		if pl.head == nil {
			continue
		}
		if err := st.orderAfter(pl.from); err != nil {
			errs = append(errs, err)
			kept = append(kept, pl)
			continue
		}
		for b := pl.head; b != nil; {
			next := b.lnext
			b.lprev, b.lnext = nil, nil
			b.freedBy = nil
			b.c.pending--
			st.pendingBytes -= b.size
			st.putFree(b)
			b = next
		}
	}
	clear(st.pendingLists[len(kept):])
	st.pendingLists = kept
	return errors.Join(errs...)
}

// orderAfter makes work enqueued on this stream from now on run after the
// work enqueued on from so far (orderAfter in eventcache.go), with an event
// of this stream's own cache, guarded by its mutex, rather than the
// resource-wide gpu.EventCache that FixedSize and Arena share: absorbing
// another stream's frees then takes no lock that other streams take. If
// this stream was destroyed (a release on behalf of a stream gone, or an
// adopted wrapper forgotten), it can wait on nothing, and it synchronizes
// the device instead, which orders all that follows after from's work.
func (st *poolStream) orderAfter(from *poolStream) error {
	if from == st {
		return nil
	}
	if err := captureOrderable(st.s, from.s); err != nil {
		return err
	}
	var e gpu.Event
	if n := len(st.events); n > 0 {
		e = st.events[n-1]
		st.events[n-1] = nil
		st.events = st.events[:n-1]
	} else {
		var err error
		if e, err = st.pool.dev.NewEvent(false); err != nil {
			return fmt.Errorf("new event: %w", err)
		}
	}
	waited, err := orderAfter(st.pool.dev, e, st.s, from.s)
	if waited {
		st.stats.waits++
	} else if errors.Is(err, gpu.ErrDestroyed) { // this stream, the waiter
		if err = synchronizeDevice(st.pool.dev); err != nil {
			err = fmt.Errorf("synchronize for destroyed stream %d: %w", st.id, err)
		}
	}
	if len(st.events) < poolStreamEvents {
		st.events = append(st.events, e)
	} else {
		e.Destroy()
	}
	return err
}

// addUsed adds d to the stream's used bytes, and reports whether the
// stream must then call usedFlush: when the change since the last flush
// reaches the pool's quantum, or the stream is not listed dirty. With a
// quantum of 0 (one stream), an allocation flushes whenever the total
// could reach a new peak, and a free never does: the total is exact
// whenever it matters for the peak. An allocation that leaves unflushed at
// or below 0 does not flush: the stream's used bytes are then at most what
// the total already counts, and every value the total took was raised
// into the peak (ResetPeaks flushes first), so no new peak is possible.
// A pair of the same size so costs no atomic add at all.
//
// It makes no call, so that it inlines into markLive and unlisted; the
// callers call usedFlush when it reports true.
func (st *poolStream) addUsed(d int) bool {
	st.used += int64(d)
	u := st.unflushed + int64(d)
	st.unflushed = u
	q := st.pool.usedQuantum.Load()
	return (d > 0 && u > 0 && u >= q) || (q > 0 && u <= -q) || (u != 0 && !st.dirty)
}

// usedFlush adds the stream's unflushed change to the pool-wide total
// when addUsed(d) said it reaches the quantum, and lists the stream dirty
// if a change is left unflushed.
//
//go:noinline
func (st *poolStream) usedFlush(d int) {
	q := st.pool.usedQuantum.Load()
	if (d > 0 && st.unflushed > 0 && st.unflushed >= q) || (q > 0 && st.unflushed <= -q) {
		st.pool.flushUsed(st.unflushed)
		st.unflushed = 0
	}
	if st.unflushed != 0 && !st.dirty {
		st.markDirty() // pool_walk.go
	}
}

// isWorking reports whether c is one of the stream's working chunks.
func (st *poolStream) isWorking(c *poolChunk) bool { return st.working[c.class()] == c }

// addHomed makes this stream the home of c, whose blocks the caller files.
func (st *poolStream) addHomed(c *poolChunk) {
	c.homeIdx = len(st.homed)
	st.homed = append(st.homed, c)
	c.home.Store(st)
	if c.live == 0 && !st.cand {
		st.markCand() // pool_walk.go
	}
}

// removeHomed forgets c, which stays with home set to next.
func (st *poolStream) removeHomed(c *poolChunk, next *poolStream) {
	if st.working[c.class()] == c {
		st.working[c.class()] = nil
	}
	last := st.homed[len(st.homed)-1]
	st.homed[c.homeIdx] = last
	last.homeIdx = c.homeIdx
	st.homed[len(st.homed)-1] = nil
	st.homed = st.homed[:len(st.homed)-1]
	if st.packHoles && c.limit > 0 {
		st.forgetHoles(c) // pool_vhole.go
	}
	c.home.Store(next)
}

// detach takes every block of c, which must have no live block, out of
// this stream's free and pending lists. It returns the streams whose frees
// the blocks still wait for (this stream for the free blocks, the freeing
// stream for the pending ones), in waits, and leaves the blocks marked
// pending with freedBy set accordingly. The caller then moves c with
// removeHomed.
func (st *poolStream) detach(c *poolChunk, waits []*poolStream) []*poolStream {
	for b := c.first; b != nil; b = b.next {
		switch b.state {
		case blockUnmapped:
			continue // no memory: nothing to wait for
		case blockFree:
			st.binsOf(c).remove(b)
			b.state = blockPending
			b.freedBy = st
			c.pending++
		case blockPending:
			st.removePending(b)
			c.pending++ // removePending counted it out of the chunk too
		}
		waits = appendStream(waits, b.freedBy)
	}
	return waits
}

// attach makes this stream the home of c, detached from another stream,
// and files its blocks (refile).
func (st *poolStream) attach(c *poolChunk) {
	st.addHomed(c)
	st.refile(c)
}

// refile files the blocks of c, all marked pending by detach: a block
// freed by this stream is free at once, the others are pending on their
// freeing stream until absorb.
func (st *poolStream) refile(c *poolChunk) {
	c.pending = 0
	for b := c.first; b != nil; {
		next := b.next
		from := b.freedBy
		if b.state == blockUnmapped {
			// No memory, in no list.
		} else if from == st {
			b.freedBy = nil
			st.putFree(b)
		} else {
			b.lprev, b.lnext = nil, nil
			st.addPending(b, from)
		}
		b = next
	}
}

func appendStream(list []*poolStream, st *poolStream) []*poolStream {
	for _, x := range list {
		if x == st {
			return list
		}
	}
	return append(list, st)
}

// diagnose explains why ptr, in chunk c homed here, is not live: a double
// free if it lies in free or pending memory and was handed out and freed
// (it is remembered as freed, or a block that was handed out starts
// there), an unknown pointer otherwise.
func (st *poolStream) diagnose(c *poolChunk, ptr gpu.DevicePtr) error {
	b := c.first
	for b != nil && b.end() <= ptr {
		b = b.next
	}
	if b == nil || b.state == blockLive {
		return ErrUnknownPointer
	}
	if b.ptr == ptr && b.handed {
		return ErrDoubleFree
	}
	for _, f := range st.freed {
		if f == ptr {
			return ErrDoubleFree
		}
	}
	return ErrUnknownPointer
}
