// The driver's stream-ordered memory pools (cuMemAllocAsync and friends).
//
// A pool reserves chunks of device memory in whole 32 MiB units (one chunk
// per growth, rounded up from the request) and carves blocks from them,
// 256-byte aligned, best fit. A freed block remembers the free operations
// it depends on (at most one per stream, the latest). Neighbouring free
// blocks coalesce when all their frees are due, or when their frees are
// all still pending on the same streams (at the free, or later in
// settleLocked); a block whose free is pending stays apart from free
// neighbours whose frees are due, so it does not make them wait for that
// free too.
//
// A free is due when it has completed or nothing that takes time comes
// before it on its stream (op.due): the card completes such a free
// microseconds after it is enqueued, and treating it as complete keeps
// the model's decisions independent of when the simulator's goroutines
// get to run it, so that a replay without kernels gives the same figures
// on every run. "Completed" below means due.
//
// Both rules are the driver's, measured on an H100 (driver 580): a request
// of up to 32 MiB grows a pool by 32 MiB and one of 33 MiB by 64 MiB;
// thirty-two 1 MiB allocations fit in one growth; a 1 MiB block freed on a
// stream still busy leaves the rest of its 32 MiB usable at once by
// another stream's allocations, at the next addresses; and eight 4 MiB
// blocks freed in scrambled order on a busy stream serve a 32 MiB request
// on that stream from their own chunk. (Not modelled: the driver maps
// growths contiguously, so one allocation may span the end of one growth
// and the next, and it spaces blocks under 512 bytes 512 bytes apart.)
// A block may go to an allocation on stream S when every dependency F is
//
//   - on S itself (stream order: reuse at once), or
//   - already known to the host to be complete (Synchronize/Query), or
//   - ordered before S's next operation by event waits, when
//     PoolReuseFollowEventDependencies is set, or
//   - complete, when PoolReuseAllowOpportunistic is set (the allocation
//     is then ordered after the free), or
//   - pending, when PoolReuseAllowInternalDependencies is set: the
//     allocation then waits for F on the stream (an inserted dependency).
//
// Blocks that need no inserted wait are preferred; then the pool grows;
// inserted waits are the last resort before out-of-memory.
//
// Reserved memory above the release threshold goes back to the device at
// synchronization points (stream, event and device Synchronize), as on the
// card; TrimTo releases down to a target. Only whole idle chunks (one free
// block whose frees have completed) are released.
//
// Used memory counts blocks (requests rounded up to 256 bytes); reserved
// counts chunks. All pool state is guarded by Device.mu.

package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// poolGranule is what a pool grows by: requests are rounded up to it.
const poolGranule = 32 << 20

type memPool struct {
	dev       *Device
	isDefault bool
	raw       uintptr // the simulator's raw handle (foreign.go)
	foreign   bool    // made by NewRawMemPool: users see adopted wrappers
	managed   bool    // made by NewManagedPool: its chunks are managed memory

	destroyed                                bool
	followEvents, opportunistic, internalDep bool
	threshold                                uint64
	reserved, reservedHigh, used, usedHigh   uint64
	chunks                                   []*chunk
	free                                     *block // list of free blocks (fprev, fnext)
	// apart holds every free block whose next neighbour is free too (kept
	// apart because their frees could not coalesce yet), and perhaps
	// blocks that no longer are: settleLocked visits these, not every
	// block of every chunk, so an allocation costs O(free blocks), not
	// O(blocks) (a million live blocks made each one walk a million).
	apart map[*block]struct{}
}

type chunk struct {
	seg   *segment
	first *block
}

type block struct {
	pool       *memPool
	chunk      *chunk
	addr, size uint64
	free       bool
	deps       []*op  // free operations to be ordered after (free blocks)
	prev, next *block // neighbours in the chunk, by address
	fprev      *block // free blocks: neighbours in the pool's free list
	fnext      *block
}

// listFree and unlistFree maintain the pool's list of free blocks, which
// allocation searches.
func (p *memPool) listFree(b *block) {
	b.fprev, b.fnext = nil, p.free
	if p.free != nil {
		p.free.fprev = b
	}
	p.free = b
}

func (p *memPool) unlistFree(b *block) {
	if b.fprev != nil {
		b.fprev.fnext = b.fnext
	} else {
		p.free = b.fnext
	}
	if b.fnext != nil {
		b.fnext.fprev = b.fprev
	}
	b.fprev, b.fnext = nil, nil
}

func newMemPool(d *Device, isDefault bool) *memPool {
	return &memPool{dev: d, isDefault: isDefault, raw: newRaw(), followEvents: true, opportunistic: true, internalDep: true}
}

var _ gpu.MemPool = (*memPool)(nil)

func (p *memPool) Device() gpu.Device { return p.dev }

// DefaultMemPool returns the device's default pool.
func (d *Device) DefaultMemPool() (gpu.MemPool, error) {
	if err := d.inject(OpDeviceGetDefaultMemPool); err != nil {
		return nil, err
	}
	return d.defPool, nil
}

// NewMemPool creates a pool of device memory.
func (d *Device) NewMemPool() (gpu.MemPool, error) {
	if err := d.inject(OpMemPoolCreate); err != nil {
		return nil, err
	}
	p := newMemPool(d, false)
	d.mu.Lock()
	d.pools = append(d.pools, p)
	d.mu.Unlock()
	d.foreign.addPool(p)
	return p, nil
}

// pool resolves a gpu.MemPool of this device for call.
func (d *Device) pool(call string, gp gpu.MemPool) (*memPool, error) {
	if a, ok := gp.(*adoptedPool); ok && a != nil {
		return d.adoptedPool(call, a)
	}
	if hp, ok := gp.(*hostMemPool); ok && hp != nil {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "the pool is located on the host")
	}
	p, ok := gp.(*memPool)
	if gp == nil || (ok && p == nil) {
		return nil, wrap(call, fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	}
	if !ok {
		return nil, wrap(call, fmt.Errorf("pool of another backend (%T): %w", gp, gpu.ErrWrongDevice))
	}
	if p.dev != d {
		return nil, wrap(call, fmt.Errorf("pool of %v used on %v: %w", p.dev, d, gpu.ErrWrongDevice))
	}
	return p, nil
}

// MallocAsync is cuMemAllocAsync from the device's current pool (the
// default pool unless SetCurrentMemPool changed it).
func (d *Device) MallocAsync(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return d.mallocAsync(OpMallocAsync, size, nil, s)
}

// MallocFromPoolAsync is cuMemAllocFromPoolAsync.
func (d *Device) MallocFromPoolAsync(size int, gp gpu.MemPool, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := d.pool(OpMallocFromPoolAsync.String(), gp)
	if err != nil {
		return 0, err
	}
	return d.mallocAsync(OpMallocFromPoolAsync, size, p, s)
}

func (d *Device) mallocAsync(which Op, size int, p *memPool, gs gpu.Stream) (gpu.DevicePtr, error) {
	call := which.String()
	s, err := d.stream(call, gs)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p == nil {
		p = d.currentPoolLocked()
	}
	if p.destroyed {
		return 0, wrap(call, fmt.Errorf("pool: %w", gpu.ErrDestroyed))
	}
	if err := d.inject(which); err != nil {
		return 0, err
	}
	if err := d.checkSize(call, size); err != nil {
		return 0, err
	}
	capturing := s.cs.capt.Load() != nil
	if !capturing {
		if err := d.unsafeCall(call); err != nil {
			return 0, err
		}
	}
	d.reapLocked()
	s.mu.Lock()
	defer s.mu.Unlock()
	if capturing {
		return d.captureAllocLocked(call, s, size)
	}
	b, waits, acquires, err := p.allocLocked(call, s, uint64(size))
	if err != nil {
		return 0, err
	}
	for _, f := range waits {
		s.joinLocked(f.vc())
	}
	for _, f := range acquires {
		s.joinLocked(f.vc())
	}
	s.enqueueLocked(&op{kind: opAlloc, name: call, waits: waits, acquires: acquires})
	d.allocs[b.addr] = &allocation{ptr: b.addr, size: uint64(size), kind: allocPool, blk: b}
	return gpu.DevicePtr(b.addr), nil
}

// usable reports whether free block b may go to stream s, and which frees
// the allocation must wait for or acquire.
func (p *memPool) usable(b *block, s *stream, host vclock) (ok bool, waits, acquires []*op) {
	deps := s.deps // host order already joined by nextDepsLocked
	for _, f := range b.deps {
		switch {
		case f.s == s, host.get(f.s.id) >= f.seq:
		case p.followEvents && deps.get(f.s.id) >= f.seq:
		case p.opportunistic && f.due():
			acquires = append(acquires, f)
		case p.internalDep:
			waits = append(waits, f)
		default:
			return false, nil, nil
		}
	}
	return true, waits, acquires
}

// allocLocked finds or makes a block of at least size bytes for s.
func (p *memPool) allocLocked(call string, s *stream, size uint64) (b *block, waits, acquires []*op, err error) {
	need := roundUp(size, align)
	p.settleLocked()
	s.nextDepsLocked()
	host := p.dev.b.host.Load().vc
	var best, bestWait *block
	var bestAcq, bestWaits, bestWaitAcq []*op
	for x := p.free; x != nil; x = x.fnext {
		if x.size < need {
			continue
		}
		ok, w, a := p.usable(x, s, host)
		switch {
		case !ok:
		case len(w) == 0:
			if best == nil || x.size < best.size || (x.size == best.size && x.addr < best.addr) {
				best, bestAcq = x, a
			}
		default:
			if bestWait == nil || x.size < bestWait.size || (x.size == bestWait.size && x.addr < bestWait.addr) {
				bestWait, bestWaits, bestWaitAcq = x, w, a
			}
		}
	}
	if best == nil {
		if c, err := p.growLocked(call, need); err == nil {
			best, bestAcq = c.first, nil
		} else if bestWait == nil {
			return nil, nil, nil, err
		} else {
			best, bestAcq, waits = bestWait, bestWaitAcq, bestWaits
		}
	}
	p.carveLocked(best, need)
	return best, waits, bestAcq, nil
}

// growLocked reserves a chunk for a request of need bytes.
func (p *memPool) growLocked(call string, need uint64) (*chunk, error) {
	size := roundUp(need, poolGranule)
	seg, err := p.dev.mapLocked(call, size, size)
	if err != nil && size > roundUp(need, bigAlign) {
		// Not measured on the card: near the device's capacity the
		// model grows by the request rounded to 2 MiB, the mapping
		// granularity, rather than fail for want of a whole granule.
		size = roundUp(need, bigAlign)
		seg, err = p.dev.mapLocked(call, size, size)
	}
	if err != nil {
		return nil, err
	}
	if p.managed {
		seg.res = newResidency(seg.size)
	}
	c := &chunk{seg: seg}
	c.first = &block{pool: p, chunk: c, addr: seg.base, size: size, free: true}
	p.listFree(c.first)
	p.chunks = append(p.chunks, c)
	p.reserved += size
	p.reservedHigh = max(p.reservedHigh, p.reserved)
	return c, nil
}

// carveLocked allocates the first need bytes of free block b.
func (p *memPool) carveLocked(b *block, need uint64) {
	if b.size > need {
		rest := &block{pool: p, chunk: b.chunk, addr: b.addr + need, size: b.size - need, free: true,
			deps: append([]*op(nil), b.deps...), prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = need
		p.listFree(rest)
		p.noteApart(rest)
	}
	p.unlistFree(b)
	b.free, b.deps = false, nil
	p.used += b.size
	p.usedHigh = max(p.usedHigh, p.used)
}

// freeBlockLocked returns b to the pool, its reuse ordered after f (nil:
// the free is already complete and the host knows it).
func (p *memPool) freeBlockLocked(b *block, f *op) {
	p.used -= b.size
	b.free = true
	b.deps = nil
	if f != nil {
		b.deps = []*op{f}
	}
	if n := b.next; n != nil && n.free && coalescible(b, n) {
		p.unlistFree(n)
		b.absorb(n)
	}
	if pr := b.prev; pr != nil && pr.free && coalescible(pr, b) {
		pr.absorb(b)
		p.noteApart(pr)
		return
	}
	p.listFree(b)
	p.noteApart(b)
	if pr := b.prev; pr != nil {
		p.noteApart(pr)
	}
}

// noteApart adds b to apart if it and its next neighbour are both free.
func (p *memPool) noteApart(b *block) {
	if b.free && b.next != nil && b.next.free {
		if p.apart == nil {
			p.apart = make(map[*block]struct{})
		}
		p.apart[b] = struct{}{}
	}
}

// coalescible reports whether free neighbours a and b may become one
// block: if the frees of both have completed, or those of both are still
// running on the same streams (the merged block waits for the later free
// of each stream, which a stream that may use one may use the other
// after). A block whose free is running is never merged with one whose
// frees completed: that would make the latter wait too.
func coalescible(a, b *block) bool {
	as, bs := a.settled(), b.settled()
	return as && bs || !as && !bs && sameStreams(a.deps, b.deps)
}

// absorb makes b's next neighbour n, free and not listed, part of b.
func (b *block) absorb(n *block) {
	delete(b.pool.apart, n)
	b.size += n.size
	b.deps = mergeDeps(b.deps, n.deps)
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
}

// settled reports whether every free b depends on has completed.
func (b *block) settled() bool {
	for _, f := range b.deps {
		if !f.due() {
			return false
		}
	}
	return true
}

// sameStreams reports whether the frees a and b list (at most one per
// stream) are on the same streams.
func sameStreams(a, b []*op) bool {
	if len(a) != len(b) {
		return false
	}
	for _, f := range a {
		found := false
		for _, g := range b {
			found = found || f.s == g.s
		}
		if !found {
			return false
		}
	}
	return true
}

// settleLocked coalesces the free neighbours that were kept apart while a
// free was pending and may be merged now: their frees have all completed
// since, or an earlier merge left them waiting on the same streams. It
// visits the blocks in apart, in address order (coalescing is confined to
// a chunk, and within one the order is the addresses').
func (p *memPool) settleLocked() {
	if len(p.apart) == 0 {
		return
	}
	bs := make([]*block, 0, len(p.apart))
	for b := range p.apart {
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(a, b *block) int { return cmp.Compare(a.addr, b.addr) })
	for _, b := range bs {
		if _, ok := p.apart[b]; !ok {
			continue // absorbed by an earlier one
		}
		for {
			n := b.next
			if !b.free || n == nil || !n.free {
				delete(p.apart, b)
				break
			}
			if !coalescible(b, n) {
				break // still apart
			}
			p.unlistFree(n)
			b.absorb(n)
		}
	}
}

// mergeDeps keeps, per stream, the later of the frees of a and b.
func mergeDeps(a, b []*op) []*op {
	out := append([]*op(nil), a...)
next:
	for _, f := range b {
		for i, g := range out {
			if g.s == f.s {
				if f.seq > g.seq {
					out[i] = f
				}
				continue next
			}
		}
		out = append(out, f)
	}
	return out
}

// idle reports whether chunk c is one free block whose frees completed
// (after settleLocked, a chunk of free blocks whose frees completed is
// one block).
func (c *chunk) idle() bool {
	b := c.first
	return b.free && b.next == nil && b.settled()
}

// releaseLocked gives idle chunks back to the device until at most keep
// bytes stay reserved.
func (p *memPool) releaseLocked(keep uint64) {
	p.settleLocked()
	for i := len(p.chunks) - 1; i >= 0 && p.reserved > keep; i-- {
		c := p.chunks[i]
		if !c.idle() {
			continue
		}
		p.unlistFree(c.first)
		p.dev.unmapLocked(c.seg, c.seg.size)
		p.reserved -= c.seg.size
		p.chunks = append(p.chunks[:i], p.chunks[i+1:]...)
	}
}

func (d *Device) dropDestroyedPoolsLocked() {
	kept := d.pools[:0]
	for _, p := range d.pools {
		if !p.destroyed || len(p.chunks) > 0 {
			kept = append(kept, p)
		}
	}
	clear(d.pools[len(kept):])
	d.pools = kept
}

// afterSync is what a synchronization point does to pools: release what
// is reserved above each pool's threshold.
func (d *Device) afterSync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	for _, p := range d.pools {
		if p.reserved > p.threshold {
			p.releaseLocked(p.threshold)
		}
	}
}

func (p *memPool) checkLive(call string) error {
	if p == nil {
		return wrap(call, fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	}
	if p.destroyed {
		return wrap(call, fmt.Errorf("pool: %w", gpu.ErrDestroyed))
	}
	return nil
}

// Attribute reads a pool attribute.
func (p *memPool) Attribute(a gpu.PoolAttr) (uint64, error) {
	const call = "cuMemPoolGetAttribute"
	if p != nil {
		if err := p.dev.unsafeCall(call); err != nil {
			return 0, err
		}
	}
	if err := p.enter(call, OpMemPoolGetAttribute); err != nil {
		return 0, err
	}
	defer p.dev.mu.Unlock()
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	switch a {
	case gpu.PoolReuseFollowEventDependencies:
		return b2u(p.followEvents), nil
	case gpu.PoolReuseAllowOpportunistic:
		return b2u(p.opportunistic), nil
	case gpu.PoolReuseAllowInternalDependencies:
		return b2u(p.internalDep), nil
	case gpu.PoolReleaseThreshold:
		return p.threshold, nil
	case gpu.PoolReservedMemCurrent:
		return p.reserved, nil
	case gpu.PoolReservedMemHigh:
		return p.reservedHigh, nil
	case gpu.PoolUsedMemCurrent:
		return p.used, nil
	case gpu.PoolUsedMemHigh:
		return p.usedHigh, nil
	}
	return 0, driverErrf(call, gpu.ErrInvalidValue, "unknown pool attribute %d", int(a))
}

// enter begins a pool call that may be failed by injection: it takes the
// device lock and checks that the pool is usable and that no failure is
// injected for op. On success the caller holds p.dev.mu and must unlock
// it; on failure nothing is held and nothing has changed.
func (p *memPool) enter(call string, op Op) error {
	if p == nil {
		return p.checkLive(call)
	}
	p.dev.mu.Lock()
	if err := p.checkLive(call); err != nil {
		p.dev.mu.Unlock()
		return err
	}
	if err := p.dev.inject(op); err != nil {
		p.dev.mu.Unlock()
		return err
	}
	return nil
}

// SetAttribute writes a pool attribute. The current reserved and used
// amounts are read-only; the high-water marks may only be set to 0, which
// resets them to the current amounts.
func (p *memPool) SetAttribute(a gpu.PoolAttr, v uint64) error {
	const call = "cuMemPoolSetAttribute"
	if p != nil {
		if err := p.dev.unsafeCall(call); err != nil {
			return err
		}
	}
	if err := p.enter(call, OpMemPoolSetAttribute); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	switch a {
	case gpu.PoolReuseFollowEventDependencies:
		p.followEvents = v != 0
	case gpu.PoolReuseAllowOpportunistic:
		p.opportunistic = v != 0
	case gpu.PoolReuseAllowInternalDependencies:
		p.internalDep = v != 0
	case gpu.PoolReleaseThreshold:
		p.threshold = v
	case gpu.PoolReservedMemHigh, gpu.PoolUsedMemHigh:
		if v != 0 {
			return driverErrf(call, gpu.ErrInvalidValue, "high-water mark %d may only be reset to 0, not %d", int(a), v)
		}
		if a == gpu.PoolReservedMemHigh {
			p.reservedHigh = p.reserved
		} else {
			p.usedHigh = p.used
		}
	default:
		return driverErrf(call, gpu.ErrInvalidValue, "pool attribute %d cannot be set", int(a))
	}
	return nil
}

// TrimTo releases idle reserved memory until at most minBytesToKeep bytes
// stay reserved.
func (p *memPool) TrimTo(minBytesToKeep uint64) error {
	const call = "cuMemPoolTrimTo"
	if p != nil {
		if err := p.dev.unsafeCall(call); err != nil {
			return err
		}
	}
	if err := p.enter(call, OpMemPoolTrimTo); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	p.releaseLocked(minBytesToKeep)
	return nil
}

// Destroy destroys a pool made by NewMemPool; its memory goes back to the
// device as its allocations are freed. Destroying the default pool is an
// error matching gpu.ErrInvalidValue.
func (p *memPool) Destroy() error {
	const call = "cuMemPoolDestroy"
	if p == nil {
		return p.checkLive(call)
	}
	p.dev.mu.Lock()
	defer p.dev.mu.Unlock()
	if err := p.checkLive(call); err != nil {
		return err
	}
	if p.isDefault {
		return driverErrf(call, gpu.ErrInvalidValue, "the default pool cannot be destroyed")
	}
	if err := p.dev.inject(OpMemPoolDestroy); err != nil {
		return err
	}
	p.destroyed = true
	p.dev.foreign.forgetPool(p)
	p.dev.reapLocked()
	return nil
}
