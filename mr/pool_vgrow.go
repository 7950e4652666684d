// Growth in place: a Pool over a Grower (Virtual) keeps one growable
// chunk per stream and maps into it only what its blocks need.
//
// Over an upstream of fixed allocations the Pool's last waste at its peak
// is in its chunks: each big block's chunk rounded up to the device's
// page, and the room a chunk keeps for blocks that never come (pool.go).
// Over a Grower, a stream's mid-sized and big requests are all served from
// one growable chunk: a range of address space (the device's memory, or
// MaxSize) whose blocks tile it, mapped ones (free, live, pending, cached)
// and unmapped ones (blockUnmapped, in no list). When the stream's free
// blocks cannot serve a request, the pool commits the fewest granules that
// make room for it, next to free blocks (placeCommit): at the end of what
// is mapped as the stream grows, or in a hole. With no chunk to pin, a big
// request takes the best-fitting free block of any size (the slack of
// pool.go's size classes is off). Small requests keep their 2 MiB small
// chunks, which the upstream maps like any allocation; a stream's first
// small requests that would grow one take free blocks of other streams'
// small chunks instead (pool_vborrow.go).
//
// The high-water rule of pool.go ("Growth and release") holds for mapped
// memory: before a commit that would raise the peak of reserved (mapped)
// bytes, the pool releases idle chunks and then decommits the whole
// granules of free blocks of growable chunks, from the top of each chunk
// down (decommitFree), until the commit fits under the old peak; over an
// upstream that maps memory in pieces of several granules, only the
// granules whose pieces go back whole (DecommitSpan), so that what the
// pool counts as given back is. So the
// peak is reached only with the granules of live blocks mapped, whatever
// the holes between them, which is what brings peak mapped close to peak
// live; and memory is decommitted only when the pool would otherwise set
// a new peak, so a steady state maps and unmaps nothing. Release and
// ReleaseThreshold decommit the same way. A decommit is enqueued on the
// chunk's home stream (the free blocks are free there, so ordered before
// the home's later work), and moves no live block; the upstream unmaps the
// granules when that work completes, and until then hands their memory to
// another commit, of this stream or another, after ordering it after the
// decommit (virtual_grow.go): physical memory passes between streams'
// ranges without a host synchronization.
//
// A commit the upstream refuses with ErrGrowBlocked (addresses whose
// memory went to another commit while their decommit's work runs) is
// placed again clear of the refused addresses, and after a second refusal
// above every address the chunk ever committed (poolChunk.top), where the
// upstream cannot refuse it: a stream whose range was decommitted whole
// and handed to others meets a long run of such addresses. Whether a
// commit is refused depends on how far the device has got with the
// decommit's work, so over such an upstream the same requests can give
// different layouts and peaks from run to run; a Virtual with
// WaitForDecommits refuses none (it waits on the host for that work
// instead), and the pool's layout then follows from its requests alone. A request the
// growable chunk cannot place (its range is full) starts a new growable
// chunk; one that the upstream cannot reserve a range for falls back to a
// chunk of the ordinary kind, which is never decommitted, only released
// whole. Out of memory goes the usual way (pool_grow.go).
//
// Invariants, under Pool.mu: vlist holds every growable chunk the pool
// holds; vgrow[st], if set, is one of them, the chunk st commits into
// (while st is its home), and vgrowShort[st] likewise the one st commits
// its predicted short-lived blocks into, a chunk with short set (kept
// apart by lifetime, pool_lifetime.go). A growable chunk's blocks tile [base,
// base+limit), which is its size and its index span; an unmapped block
// starts and ends on granule boundaries and is changed only under Pool.mu
// (and its home's mutex); mapped is the bytes of its other blocks, which
// is what the chunk counts in the pool's reserved bytes (held). An
// upstream that gives memory back in pieces (Virtual) is asked which part
// of a free block a decommit gives back whole (DecommitSpan) under the
// home's mutex: the lock order is Pool.mu, a stream's mutex, then the
// upstream's, which never calls back into the Pool.

package mr

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// poolGrowAttempts bounds the commits one request makes when other
// goroutines on its stream take the committed memory first.
const poolGrowAttempts = 8

// useGrower sets the pool up for an upstream that grows in place.
func (p *Pool) useGrower(g Grower) {
	p.grower = g
	p.vgrow = make(map[*poolStream]*poolChunk)
	p.vgrowShort = make(map[*poolStream]*poolChunk)
	p.lifetimes = poolLifetimes && neverBlocks(g)
	gran := g.GrowGranularity()
	limit := int(min(p.dev.Properties().TotalMemory, uint64(poolMaxRequest/2)))
	if p.opts.MaxSize > 0 {
		limit = min(limit, p.opts.MaxSize)
	}
	p.growLimit = max(poolRoundUp(limit, gran), gran)
	p.spans, _ = g.(piecewiseGrower)
	// No chunk to pin: big requests split the best-fitting free block.
	p.tune.bigMin = math.MaxInt
}

// held is what c counts in the pool's reserved bytes: its size, or for a
// growable chunk what is mapped of it. Caller holds its home's mutex or
// p.mu.
func (c *poolChunk) held() int {
	if c.limit > 0 {
		return c.mapped
	}
	return c.size
}

// growableOf returns the growable chunk st commits into, adopting one it
// homes (stolen from another stream) if it has none. Caller holds p.mu.
func (p *Pool) growableOf(st *poolStream, short bool) *poolChunk {
	m := p.vgrow
	if short {
		m = p.vgrowShort
	}
	if c := m[st]; c != nil && c.home.Load() == st {
		return c
	}
	delete(m, st)
	st.lock()
	defer st.mu.Unlock()
	for _, c := range st.homed {
		if c.limit > 0 && c.short == short {
			m[st] = c
			return c
		}
	}
	return nil
}

// growInPlace serves a request that is not small by committing granules
// of st's growable chunk, or by starting one. Caller holds p.mu.
func (p *Pool) growInPlace(st *poolStream, size, rounded int) (gpu.DevicePtr, error) {
	gran := p.grower.GrowGranularity()
	var errs []error
	var blocked []poolSpan // addresses the upstream could not commit yet
	st.lock()
	short := st.life != nil && st.life.short(rounded)
	st.mu.Unlock()
	bins := &st.large
	if short {
		bins = &st.largeShort
	}
	for range poolGrowAttempts {
		c := p.growableOf(st, short)
		if c == nil {
			break
		}
		st.lock()
		st.quickFlush()
		// After two refusals, commit only addresses never mapped: the
		// refused ones may be the start of a long run of addresses whose
		// memory went elsewhere (a range its stream left idle and the
		// pool decommitted whole).
		fresh := len(blocked) >= 2
		pl, ok := c.placeCommit(rounded, gran, blocked, fresh)
		st.mu.Unlock()
		if !ok {
			break // the range is full: start another
		}
		// Make room elsewhere: the blocks the request will use keep
		// their memory. Decommits beside them may have merged their
		// unmapped neighbours: place the request again.
		if err := p.makeRoom(st, pl.n, pl); err != nil {
			return 0, err
		}
		st.lock()
		pl, ok = c.placeCommit(rounded, gran, blocked, fresh)
		st.mu.Unlock()
		if !ok {
			break
		}
		u, off, n := pl.u, pl.off, pl.n
		if err := p.grower.Commit(c.base, off, n, st.s); err != nil {
			if errors.Is(err, ErrGrowBlocked) {
				// Its memory went to another range's commit and is
				// still mapped here until the decommit's work
				// completes: place the request elsewhere in the
				// range, clear of these addresses.
				errs = append(errs, err)
				at := c.base + gpu.DevicePtr(off)
				blocked = append(blocked, poolSpan{at, at + gpu.DevicePtr(n)})
				continue
			}
			return 0, fmt.Errorf("pool: commit %d bytes in chunk %#x: %w", n, uint64(c.base), err)
		}
		p.wide.inPlace++
		p.usage.addReserved(n)
		st.lock()
		st.commitBlock(u, c.base+gpu.DevicePtr(off), n)
		b := st.take(bins, rounded)
		if b != nil {
			st.markLive(b, size, p.slowOwner)
		}
		st.mu.Unlock()
		if b != nil {
			return b.ptr, nil
		}
		// Another goroutine on st took the memory first: it stays free
		// in the chunk; commit again.
	}
	g := poolRoundUp(rounded, gran)
	if err := p.makeRoom(st, g, poolPlace{}); err != nil {
		return 0, err
	}
	ptr, err := p.newGrowable(st, g, size, rounded, short)
	if err == nil {
		return ptr, nil
	}
	// No range for it (the address space may be exhausted where the
	// device is not): a chunk of the ordinary kind.
	ptr, cerr := p.newChunk(st, poolRoundUp(rounded, p.tune.granularity), false, size, rounded)
	if cerr != nil {
		return 0, errors.Join(append(errs, err, cerr)...)
	}
	return ptr, nil
}

// makeRoom releases idle memory, as grow does, so that a growth of n bytes
// raises neither the high-water mark of reserved memory nor crosses
// ReleaseThreshold or MaxSize while the pool holds idle memory; it fails
// with errPoolLimit if MaxSize leaves no room for n bytes. Caller holds
// p.mu. It leaves alone the chunk of place and the free blocks the
// placed request overlaps (place.u nil: none).
func (p *Pool) makeRoom(st *poolStream, n int, place poolPlace) error {
	target := max(p.mappedHighWater(n)-n, p.opts.InitialSize)
	if p.opts.ReleaseThreshold > 0 {
		target = min(target, p.opts.ReleaseThreshold-n)
	}
	if p.opts.MaxSize > 0 {
		target = min(target, p.opts.MaxSize-n)
	}
	if int(p.usage.reserved.Load()) > target {
		p.spare = place
		_, err := p.releaseBeforeGrowth(st, max(target, 0))
		p.spare = poolPlace{}
		if err != nil {
			return err
		}
	}
	if p.opts.MaxSize > 0 && n > p.opts.MaxSize-int(p.usage.reserved.Load()) {
		return errPoolLimit
	}
	return nil
}

// poolPlace is where a commit places a request: the granules [off, off+n)
// (offsets from the chunk's base) of unmapped block u are committed, and
// the request will lie at [lo, hi), on them and on the free blocks beside
// u.
type poolPlace struct {
	u      *poolBlock
	off, n int
	lo, hi gpu.DevicePtr
}

// overlaps reports whether block b is one the placed request will use.
func (pl poolPlace) overlaps(b *poolBlock) bool {
	return pl.u != nil && b.c == pl.u.c && b.ptr < pl.hi && b.end() > pl.lo
}

// outside returns the granules [a, z) of block b that the placed request
// does not use: all of b's whole granules if the request does not overlap
// b, else those above the request, or if there are none those below it.
func (pl poolPlace) outside(b *poolBlock, gran int) (a, z gpu.DevicePtr) {
	a, z = poolRoundUpPtr(b.ptr, gran), b.end()&^gpu.DevicePtr(gran-1)
	if !pl.overlaps(b) {
		return a, z
	}
	if above := max(a, poolRoundUpPtr(pl.hi, gran)); z > above {
		return above, z
	}
	return a, min(z, pl.lo&^gpu.DevicePtr(gran-1))
}

// poolSpan is the addresses [lo, hi).
type poolSpan struct{ lo, hi gpu.DevicePtr }

// placeCommit finds where in growable chunk c a request of rounded bytes
// costs the fewest granules to commit: an unmapped block, with the free
// blocks on either side of it; the request lies at the start of the free
// bytes before it, or ends at the end of the free bytes after it. Ties go
// to the lowest address. The granules it commits overlap none of skip,
// addresses the upstream could not commit (ErrGrowBlocked): a request
// that would is placed just after or just before them instead; if fresh,
// the granules it commits lie above c.top, where the upstream never
// mapped anything. ok is false if no unmapped block can hold it so.
// Caller holds the home's mutex.
func (c *poolChunk) placeCommit(rounded, gran int, skip []poolSpan, fresh bool) (pl poolPlace, ok bool) {
	size := gpu.DevicePtr(rounded)
	top := c.base + gpu.DevicePtr(c.top)
	for b := c.first; b != nil; b = b.next {
		if b.state != blockUnmapped {
			continue
		}
		lo, hi := b.ptr, b.end() // what may be committed
		before, after := lo, hi  // the free bytes around it
		if f := b.prev; f != nil && f.state == blockFree {
			before = f.ptr
		}
		if f := b.next; f != nil && f.state == blockFree {
			after = f.end()
		}
		if int(after-before) < rounded {
			continue
		}
		places := [][2]gpu.DevicePtr{{before, before + size}, {after - size, after}}
		if fresh && top >= lo && top < hi {
			places = append(places, [2]gpu.DevicePtr{top, top + size})
		}
		for _, x := range skip {
			if x.hi > lo && x.lo < hi {
				places = append(places, [2]gpu.DevicePtr{x.hi, x.hi + size})
				if x.lo >= size {
					places = append(places, [2]gpu.DevicePtr{x.lo - size, x.lo})
				}
			}
		}
		for _, r := range places {
			if r[0] < before || r[1] > after {
				continue
			}
			a := max(lo, r[0]&^gpu.DevicePtr(gran-1))
			z := min(hi, poolRoundUpPtr(r[1], gran))
			if z <= a || fresh && a < top || slices.ContainsFunc(skip, func(x poolSpan) bool { return x.hi > a && x.lo < z }) {
				continue
			}
			if k := int(z - a); !ok || k < pl.n || k == pl.n && r[0] < pl.lo {
				pl, ok = poolPlace{u: b, off: int(a - c.base), n: k, lo: r[0], hi: r[1]}, true
			}
		}
	}
	return pl, ok
}

func poolRoundUpPtr(p gpu.DevicePtr, m int) gpu.DevicePtr {
	return (p + gpu.DevicePtr(m) - 1) &^ gpu.DevicePtr(m-1)
}

// commitBlock files the n bytes at at, inside unmapped block u and just
// committed, as a free block, coalesced with its free neighbours. Caller
// holds st.mu, st u's chunk's home.
func (st *poolStream) commitBlock(u *poolBlock, at gpu.DevicePtr, n int) {
	mid := st.cutBlock(u, at, n)
	u.c.mapped += n
	u.c.top = max(u.c.top, int(at-u.c.base)+n)
	st.putFree(mid)
}

// cutBlock splits block b, in no list, so that [at, at+n), inside it, is a
// block of its own, which it returns, in no list; the pieces before and
// after keep b's state, and a free one is filed in the tlsf. Caller holds
// st.mu.
func (st *poolStream) cutBlock(b *poolBlock, at gpu.DevicePtr, n int) *poolBlock {
	if at > b.ptr {
		head := b
		b = st.newBlock()
		b.ptr, b.size, b.c, b.state = at, int(head.end()-at), head.c, head.state
		b.prev, b.next = head, head.next
		if head.next != nil {
			head.next.prev = b
		}
		head.next = b
		head.size = int(at - head.ptr)
		if head.state == blockFree {
			st.binsOf(head.c).insert(head)
		}
	}
	if rest := b.size - n; rest > 0 {
		tail := st.newBlock()
		tail.ptr, tail.size, tail.c, tail.state = at+gpu.DevicePtr(n), rest, b.c, b.state
		tail.prev, tail.next = b, b.next
		if b.next != nil {
			b.next.prev = tail
		}
		b.next = tail
		b.size = n
		if tail.state == blockFree {
			st.binsOf(tail.c).insert(tail)
		}
	}
	return b
}

// newGrowable starts a growable chunk with g bytes committed, homed at
// st, the one st commits into from now on, and serves the request from it
// (if size > 0). Caller holds p.mu.
func (p *Pool) newGrowable(st *poolStream, g, size, rounded int, short bool) (gpu.DevicePtr, error) {
	gran := p.grower.GrowGranularity()
	limit := p.growLimit
	if short {
		limit = max(limit/poolShortShare/gran*gran, gran)
	}
	limit = max(limit, g)
	ptr, err := p.grower.AllocateGrowable(g, limit, st.s)
	if err != nil {
		return 0, fmt.Errorf("pool: grow by %d bytes: %w", g, err)
	}
	if ptr%Alignment != 0 || ptr%gpu.DevicePtr(p.grower.GrowGranularity()) != 0 {
		err := fmt.Errorf("pool: grow by %d bytes: upstream returned misaligned %#x: %w", g, uint64(ptr), gpu.ErrInvalidValue)
		return 0, errors.Join(err, p.upstream.Deallocate(ptr, limit, st.s))
	}
	p.grown = true
	p.wide.growths++
	c := &poolChunk{base: ptr, size: limit, limit: limit, mapped: g, top: g, short: short}
	p.chunks.add(c.base, c.size, c)
	p.vlist = append(p.vlist, c)
	if short {
		p.vgrowShort[st] = c
	} else {
		p.vgrow[st] = c
	}
	p.usage.addReserved(g)
	st.lock()
	defer st.mu.Unlock()
	b := st.newBlock()
	b.ptr, b.size, b.c, b.state = ptr, limit, c, blockUnmapped
	c.first = b
	st.addHomed(c)
	b = st.cutBlock(b, ptr, g)
	st.putFree(b)
	if size == 0 {
		return 0, nil
	}
	b = st.split(st.binsOf(c), b, rounded)
	st.markLive(b, size, p.slowOwner)
	return b.ptr, nil
}

// forgetGrowable drops released chunk c from the growable lists. Caller
// holds p.mu.
func (p *Pool) forgetGrowable(c *poolChunk) {
	if i := slices.Index(p.vlist, c); i >= 0 {
		p.vlist = slices.Delete(p.vlist, i, i+1)
	}
	for st, x := range p.vgrow {
		if x == c {
			delete(p.vgrow, st)
		}
	}
	for st, x := range p.vgrowShort {
		if x == c {
			delete(p.vgrowShort, st)
		}
	}
}

// decommitFree gives back the whole granules of the free blocks of
// growable chunks, from the highest address of each chunk down, until the
// pool reserves at most keep bytes (keep <= 0: all of them). It returns
// the bytes given back. Caller holds p.mu.
func (p *Pool) decommitFree(keep int) (int, error) {
	gran := p.grower.GrowGranularity()
	var errs []error
	released := 0
	for _, c := range slices.Clone(p.vlist) {
		if keep > 0 && int(p.usage.reserved.Load()) <= keep {
			break
		}
		o := c.home.Load()
		if o == nil || gpu.Capturing(o.s) {
			continue
		}
		o.lock()
		if c.home.Load() != o {
			o.mu.Unlock()
			continue
		}
		o.quickFlush()
		// Cut the granules out under o's mutex: unmapped, they are in no
		// list, and o's own allocations and frees leave them alone.
		var cuts []*poolBlock
		reserved := int(p.usage.reserved.Load())
		for b := c.last(); b != nil && (keep <= 0 || reserved > keep); {
			prev := b.prev
			a, z := p.spare.outside(b, gran)
			if b.state == blockFree && z > a && p.spans != nil {
				lo, hi := p.spans.DecommitSpan(c.base, int(a-c.base), int(z-a))
				a, z = c.base+gpu.DevicePtr(lo), c.base+gpu.DevicePtr(hi)
			}
			if b.state == blockFree && z > a {
				o.binsOf(c).remove(b)
				mid := o.cutBlock(b, a, int(z-a))
				mid.state = blockUnmapped
				c.mapped -= mid.size
				reserved -= mid.size
				cuts = append(cuts, mid)
			}
			b = prev
		}
		o.mu.Unlock()
		for _, x := range cuts {
			if err := p.grower.Decommit(c.base, int(x.ptr-c.base), x.size, o.s); err != nil {
				o.lock()
				c.mapped += x.size
				o.putFree(x)
				o.mu.Unlock()
				if !errors.Is(err, gpu.ErrDestroyed) && !errors.Is(err, ErrStreamCapturing) {
					// A destroyed home's chunk keeps its memory until it
					// is idle and released (upstreamFree), a capturing
					// one until the capture ends.
					errs = append(errs, fmt.Errorf("pool: decommit %d bytes of chunk %#x: %w", x.size, uint64(c.base), err))
				}
				continue
			}
			p.usage.subReserved(x.size)
			p.wide.decommits++
			released += x.size
		}
		if len(cuts) > 0 {
			o.lock()
			o.mergeUnmapped(c)
			o.mu.Unlock()
		}
	}
	return released, errors.Join(errs...)
}

// mergeUnmapped joins neighbouring unmapped blocks of c. Caller holds
// st.mu, st c's home.
func (st *poolStream) mergeUnmapped(c *poolChunk) {
	for b := c.first; b != nil; b = b.next {
		for b.state == blockUnmapped && b.next != nil && b.next.state == blockUnmapped {
			n := b.next
			b.size += n.size
			b.next = n.next
			if n.next != nil {
				n.next.prev = b
			}
			st.putSpare(n)
		}
	}
}

// last returns the last block of c. Caller holds its home's mutex.
func (c *poolChunk) last() *poolBlock {
	b := c.first
	for b.next != nil {
		b = b.next
	}
	return b
}

// addressSpace is the address space the pool's growable chunks keep.
// Caller holds p.mu.
func (p *Pool) addressSpace() uint64 {
	var n uint64
	for _, c := range p.vlist {
		n += uint64(c.limit)
	}
	return n
}
