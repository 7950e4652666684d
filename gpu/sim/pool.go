// The driver's stream-ordered memory pools (cuMemAllocAsync and friends).
//
// The model below reproduces, rule by rule, what an H100 (driver 580,
// CUDA 13) does; each rule names the measurement behind it. The probes are
// scripts/poolprobe (the same program runs on the card and here; the two
// outputs are identical but for the five lines noted under "Growth moves
// memory"), the traces replay/testdata and the PyTorch
// snapshots testdata/traces (the peak reserved bytes on the card and here
// are BENCHMARKS.md's fidelity table, replay.TestPoolFidelity pins them);
// logs in docs/bench/h100-2026-11-24-fidelity.
//
// Layout. A pool is one contiguous range of addresses (a heap,
// poolheap.go) that its blocks tile from the start, best fit, each request
// rounded up to 512 bytes (probe "small": 1- to 512-byte blocks lie 512
// bytes apart, 513-byte ones 1024). Memory is mapped under the range in
// 32 MiB granules: a growth maps from the end of the range to the granule
// boundary past the request, starting the request on the free block at the
// end if there is one, so a block may span two growths (probe "seq": 20
// MiB allocations land at 0, 20, 40, 60 MiB with 32, 64, 64, 96 MiB
// reserved; probe "grow": a 33 MiB request reserves 64 MiB and a second
// one lands right after it, 96 MiB in all).
//
// Order of reuse. A freed block is pending until the pool processes its
// free: the next allocation on the stream that freed it takes the best
// fitting pending block of that stream, the oldest free among equal sizes
// (trace torch-pipeline-2stream-b, events 74-78: of two 6 MiB blocks freed
// one after the other the older serves the next 6 MiB request, the newer
// the 12 KiB requests after it, though an older 6 MiB hole fits them
// better). Pending blocks coalesce only with pending neighbours of the same
// streams. When no pending block fits, a request of at most a granule
// takes the best fitting processed block the stream may use, and only if
// there is none are the frees that have completed processed (flushLocked:
// they coalesce) and the search made again, the free block at the end of
// the range last (event 112: a 12 KiB request takes a 6000 KiB hole rather
// than the 3912 KiB at the end; snapshot three-stream-h100, events 73-77: a
// 512-byte block freed on a stream stays that stream's through a 1 MiB
// request served from processed memory, and takes its next 4-byte request;
// snapshot resnet50-amp-h100, events 666-677: the same for a 125 KiB
// block). A larger request processes the completed frees first. That
// threshold is not measured by a probe: with any value from 8 to 32 MiB all
// nine traces of the fidelity table are within 5% of the card (processing
// at every miss puts three snapshots 6-11% off, only before a growth two
// RMM traces 6-9% off), and 32 MiB is the granule. A free is due when it
// has completed or nothing that takes time comes before it on its stream
// (op.due), so a replay without kernels gives the same figures every run.
//
// Growth moves memory. When the range grows or a block over released
// pages is reused, the pool first unmaps as many idle granules (inside one
// processed free block whose frees completed and which the allocating
// stream may reuse under the pool's policies, highest addresses first) as
// it maps, so its reserved bytes grow only by the difference (trace
// torch-train-gpt-b, event 285: a 110 MiB request extends the range by
// 96 MiB while reserved stays at 1376 MiB, the three granules of a 105 MiB
// block freed two events earlier having moved). The reuse policies hold
// for moved memory as for blocks; with opportunistic reuse off, another
// stream's request next to a completed free is where the model and the
// card differ (probe "reuse", policies none, internal and events with the
// freeing stream idle: the card serves it from the untouched rest of the
// granule, 32 MiB reserved; the model, which merged the free with that
// rest, grows to 64 MiB). With these rules the
// simulated peak reserved is the card's, to the byte, on four of the nine
// traces of the fidelity table, and within 4% of it on the others.
//
// A block may go to an allocation on stream S when every dependency F (the
// latest free of each stream that freed part of it) is
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
// inserted waits are the last resort before out-of-memory (probe "reuse",
// each policy alone and together, the freeing stream busy and idle, with
// and without an event wait: the same block as the card in every case,
// the same reserved bytes in all but the five above).
//
// Release. Reserved memory above the release threshold goes back at
// synchronization points (stream, event and device Synchronize), granule
// by granule, highest first, while more than the threshold stays reserved;
// only granules whose frees the host has seen complete go: synchronizing
// a stream that did not free them releases nothing (probe "release": 120
// MiB freed with 8 MiB live in a 128 MiB range leave 32 MiB after a
// synchronize of the freeing stream, of an event on it or of the device,
// at threshold 0 and at 40 MiB; 128 MiB after a synchronize of another
// stream, a query or an allocation). TrimTo(keep) releases a granule only
// if at least keep bytes stay reserved after it, and can release the idle
// granules of a block that is partly used (probe "trim": four 32 MiB
// growths, three idle, trimmed to 40 MiB keep 64 MiB; a 128 MiB growth
// holding 1 MiB keeps 32 MiB).
//
// Used memory counts blocks (requests rounded up to 512 bytes); reserved
// counts mapped pages. All pool state is guarded by Device.mu.

package sim

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

type memPool struct {
	dev       *Device
	isDefault bool
	raw       uintptr // the simulator's raw handle (foreign.go)
	foreign   bool    // made by NewRawMemPool: users see adopted wrappers
	managed   bool    // made by NewManagedPool: its chunks are managed memory

	destroyed                                bool
	followEvents, opportunistic, internalDep bool
	threshold                                uint64
	frees                                    uint64 // frees so far: block.freed
	poolMarks
	heaps []*heap
	free  *block // list of free blocks (fprev, fnext)
	// The free blocks by size, and each stream's pending ones
	// (pooltree.go).
	bySize blockTree
	byPend map[*stream]*blockTree
	pend   *block // the pending free blocks (pprev, pnext)
	// apart holds every free block whose next neighbour is free too (kept
	// apart because their frees could not coalesce yet), and perhaps
	// blocks that no longer are: settleLocked visits these, not every
	// block of every heap (a million live blocks made each allocation
	// walk a million).
	apart map[*block]struct{}

	// peers has bit b set when device b may access the pool's memory,
	// peerRead when that access is read-only (peer.go); read by workers
	// with race synchronization disabled.
	peers, peerRead atomic.Uint64
	// handles are the handle types the pool can be exported as, exportID
	// its number in the export registry once exported, and from, for a
	// pool imported from another process, the exporter's pool (ipc.go).
	handles  gpu.HandleType
	exportID uint64
	from     *memPool
	file     string // the file a POSIX export's descriptors open
}

type block struct {
	pool       *memPool
	heap       *heap
	addr, size uint64
	free       bool
	deps       []*op // free operations to be ordered after (free blocks), one per stream
	// depAt indexes deps by stream once there are more than
	// depIndexFrom, so that merging the frees of two neighbours costs
	// O(the smaller's), not O(both), and sameStreams O(their number):
	// a block that coalesces the frees of n streams one by one costs
	// O(n), not O(n^2).
	depAt map[*stream]int
	// allDue: every free in deps is known to be due. Due is for good
	// once true, so settled answers from it without visiting deps again.
	allDue bool
	// seen: the host knows one of the frees in deps complete; else, if
	// not 0, unseenAt is a host generation at which it knew none
	// (seenComplete). Both reset whenever deps change.
	seen     bool
	unseenAt uint64
	// pending marks a free block whose frees the pool has not yet
	// processed (flushLocked): only its own stream reuses it, first.
	pending    bool
	freed      uint64 // when it was freed (the pool's count of frees)
	prev, next *block // neighbours in the heap, by address
	fprev      *block // free blocks: neighbours in the pool's free list
	fnext      *block
	// Links in the pool's trees of free blocks (pooltree.go), and the
	// stream whose byPend tree holds the block, if one does.
	bySize, byPend treeLinks
	pendOf         *stream
	inPend         bool
	pprev, pnext   *block
}

// listFree and unlistFree maintain the pool's list of free blocks, which
// allocation searches.
func (p *memPool) listFree(b *block) {
	b.fprev, b.fnext = nil, p.free
	if p.free != nil {
		p.free.fprev = b
	}
	p.free = b
	p.index(b)
}

func (p *memPool) unlistFree(b *block) {
	p.unindex(b)
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
	return &memPool{dev: d, isDefault: isDefault, raw: newRaw(), followEvents: true, opportunistic: true, internalDep: true,
		bySize: blockTree{links: bySizeLinks, less: sizeLess}}
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
	return d.createMemPool(nil), nil
}

// createMemPool makes a pool of d, lets init set what sets it apart
// (export handles, managed memory, the pool it imports) before anyone can
// see it, and registers it: in d.pools, and with the table that resolves
// raw pool handles.
func (d *Device) createMemPool(init func(p *memPool)) *memPool {
	p := newMemPool(d, false)
	if init != nil {
		init(p)
	}
	d.mu.Lock()
	d.pools = append(d.pools, p)
	d.mu.Unlock()
	d.foreign.addPool(p)
	return p
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
	if p.from != nil {
		return 0, wrap(call, fmt.Errorf("an imported pool allocates nothing: %w", gpu.ErrNotSupported))
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
		s.joinOpLocked(f)
	}
	for _, f := range acquires {
		s.joinOpLocked(f)
	}
	s.enqueueLocked(&op{kind: opAlloc, name: call, waits: waits, acquires: acquires})
	d.allocs[b.addr] = &allocation{ptr: b.addr, size: uint64(size), kind: allocPool, blk: b}
	return gpu.DevicePtr(b.addr), nil
}

// usable reports whether free block b may go to stream s, and which frees
// the allocation must wait for or acquire.
func (p *memPool) usable(b *block, s *stream) (ok bool, waits, acquires []*op) {
	deps, host := s.deps, p.dev.b // s's host generation brought up to date by allocLocked
	for _, f := range b.deps {
		switch {
		case f.s == s, host.hostKnows(f.s, f.seq, s.hostGen):
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

// allocLocked finds or makes a block of at least size bytes for s: the
// best fitting block freed on s and not yet processed (the oldest free
// among equal sizes); else, with every completed free processed, the
// best fitting block s may use, preferring those that need no inserted
// wait, the free end of the range last; else a growth; else a block
// behind an inserted wait.
func (p *memPool) allocLocked(call string, s *stream, size uint64) (b *block, waits, acquires []*op, err error) {
	need := roundUp(max(size, 1), poolAlign)
	p.settleLocked()
	s.nextDepsLocked()
	rq := &mapFor{s: s}
	var best *block
	if t := p.pendTree(s, false); t != nil {
		t.ascend(need, func(x *block) bool { best = x; return false })
	}
	if best != nil && p.mapLocked(call, rq, best.heap, best.addr-best.heap.seg.base, best.addr-best.heap.seg.base+need) == nil {
		p.carveLocked(best, need)
		return best, nil, rq.acq, nil
	}
	// A request of more than a granule processes the completed frees
	// first; a smaller one only if no block but the free end of the range
	// fits without.
	var c candidates
	if need <= poolGranule {
		c = p.scanLocked(s, need, false)
	}
	if c.best == nil {
		p.flushLocked()
		c = p.scanLocked(s, need, true)
	}
	best = c.best
	bestAcq := c.acq
	if best != nil {
		// A free block over pages given back maps them again.
		if err := p.mapLocked(call, rq, best.heap, best.addr-best.heap.seg.base, best.addr-best.heap.seg.base+need); err != nil {
			best = nil
		}
	}
	if best == nil {
		g, acq, err := p.growLocked(call, rq, need)
		if err == nil {
			best, bestAcq = g, acq
		} else {
			if !c.allWaits {
				p.scanWaitLocked(s, need, &c)
			}
			if c.wait == nil {
				return nil, nil, nil, err
			}
			if err := p.mapLocked(call, rq, c.wait.heap, c.wait.addr-c.wait.heap.seg.base, c.wait.addr-c.wait.heap.seg.base+need); err != nil {
				return nil, nil, nil, err
			}
			best, bestAcq, waits = c.wait, c.waitAcq, c.waits
		}
	}
	p.carveLocked(best, need)
	return best, waits, append(bestAcq, rq.acq...), nil
}

// candidates are what scanLocked found: the best block a request may
// take at once (with the frees it acquires), and the best one behind
// inserted waits; allWaits, whether every block was looked at for the
// latter (the search stops at the best block, and scanWaitLocked goes on
// only if a growth then fails).
type candidates struct {
	best, wait          *block
	acq, waits, waitAcq []*op
	allWaits            bool
}

// scanLocked finds the best fitting free blocks of at least need bytes
// that s may use, the smallest first and the lowest address among equal
// sizes (bySize); the free end of the range, withTail, only if no other
// block fits.
func (p *memPool) scanLocked(s *stream, need uint64, withTail bool) candidates {
	var c candidates
	tail := p.tail()
	c.allWaits = p.bySize.ascend(need, func(x *block) bool {
		if x == tail {
			return true
		}
		ok, w, a := p.usable(x, s)
		switch {
		case !ok:
		case len(w) == 0:
			c.best, c.acq = x, a
			return false
		case c.wait == nil:
			c.wait, c.waits, c.waitAcq = x, w, a
		}
		return true
	})
	if c.best == nil && withTail && tail != nil && tail.size >= need {
		if ok, w, a := p.usable(tail, s); ok && len(w) == 0 {
			c.best, c.acq = tail, a
		}
	}
	return c
}

// scanWaitLocked completes c's search for the best block behind inserted
// waits, past the best block scanLocked stopped at.
func (p *memPool) scanWaitLocked(s *stream, need uint64, c *candidates) {
	if c.wait != nil {
		c.allWaits = true // the first one met is the best
		return
	}
	tail := p.tail()
	p.bySize.ascend(need, func(x *block) bool {
		if x == tail {
			return true
		}
		if ok, w, a := p.usable(x, s); ok && len(w) > 0 {
			c.wait, c.waits, c.waitAcq = x, w, a
			return false
		}
		return true
	})
	c.allWaits = true
}

// tail is the free block at the end of the pool's last range, if its
// frees were processed: what growth extends, used only when no other
// block fits.
func (p *memPool) tail() *block {
	if len(p.heaps) == 0 {
		return nil
	}
	if l := p.heaps[len(p.heaps)-1].last; l != nil && l.free && !l.pending {
		return l
	}
	return nil
}

// flushLocked processes the frees that have completed: their blocks stop
// being pending and coalesce with free neighbours whose frees were
// processed too.
func (p *memPool) flushLocked() {
	for x, next := p.pend, (*block)(nil); x != nil; x = next {
		next = x.pnext
		if x.pending && x.settled() {
			p.rekey(x, func() { x.pending = false })
			p.noteApart(x)
			if x.prev != nil {
				p.noteApart(x.prev)
			}
		}
	}
	p.settleLocked()
}

// growLocked extends the pool for a request of need bytes on s and
// returns the free block that serves it: the pool's last block, extended,
// if it is free and s may use it without an inserted wait (with the
// frees it must acquire), else a new block after it. The range grows to
// the next granule boundary past the request; a heap that cannot hold
// that is followed by a new one.
func (p *memPool) growLocked(call string, rq *mapFor, need uint64) (*block, []*op, error) {
	if len(p.heaps) > 0 {
		h := p.heaps[len(p.heaps)-1]
		start, tail := h.end, (*block)(nil)
		var acq []*op
		if l := h.last; l != nil && l.free && !l.pending {
			if ok, w, a := p.usable(l, rq.s); ok && len(w) == 0 {
				start, tail, acq = l.addr-h.seg.base, l, a
			}
		}
		if b, err := p.extendLocked(call, rq, h, start, need, tail); err == nil {
			return b, acq, nil
		} else if start+need <= h.seg.size {
			return nil, nil, err // out of device memory, not of addresses
		}
	}
	if err := p.refuseNewHeapLocked(call, rq, need); err != nil {
		return nil, nil, err
	}
	h, err := p.newHeapLocked(call, need)
	if err != nil {
		return nil, nil, err
	}
	b, err := p.extendLocked(call, rq, h, 0, need, nil)
	if err != nil {
		p.heaps = p.heaps[:len(p.heaps)-1]
		p.dropHeapLocked(h)
		return nil, nil, err
	}
	return b, nil, nil
}

// extendLocked maps h up to the granule boundary past start+need
// (offsets in h) and returns the free block at start: tail extended, or
// a new last block. Near the device's capacity, where a whole granule
// does not fit, the range ends at the 2 MiB page past the request
// instead (not measured on the card: the model would otherwise fail a
// request the device can hold).
func (p *memPool) extendLocked(call string, rq *mapFor, h *heap, start, need uint64, tail *block) (*block, error) {
	end := roundUp(start+need, poolGranule)
	if end > h.seg.size {
		return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes requested: the pool's range is full", need)
	}
	err := p.mapLocked(call, rq, h, start, end)
	if err != nil && roundUp(start+need, vmGranule) < end {
		end = roundUp(start+need, vmGranule)
		err = p.mapLocked(call, rq, h, start, end)
	}
	if err != nil {
		return nil, err
	}
	if end <= h.end {
		return tail, nil // the pages were mapped, the block was there
	}
	grown := end - h.end
	h.end = end
	if tail != nil {
		p.rekey(tail, func() { tail.size += grown })
		return tail, nil
	}
	b := &block{pool: p, heap: h, addr: h.seg.base + end - grown, size: grown, free: true, prev: h.last}
	if h.last != nil {
		h.last.next = b
	} else {
		h.first = b
	}
	h.last = b
	p.listFree(b)
	if b.prev != nil {
		p.noteApart(b.prev)
	}
	return b, nil
}

// carveLocked allocates the first need bytes of free block b.
func (p *memPool) carveLocked(b *block, need uint64) {
	p.unlistFree(b)
	if b.size > need {
		rest := &block{pool: p, heap: b.heap, addr: b.addr + need, size: b.size - need, free: true,
			deps: b.deps, depAt: b.depAt, allDue: b.allDue, seen: b.seen, unseenAt: b.unseenAt, pending: b.pending, freed: b.freed, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		} else {
			b.heap.last = rest
		}
		b.next = rest
		b.size = need
		p.listFree(rest)
		p.noteApart(rest)
	}
	b.free, b.deps, b.depAt, b.allDue, b.seen, b.unseenAt, b.pending = false, nil, nil, false, false, 0, false
	p.used += b.size
	p.usedHigh = max(p.usedHigh, p.used)
}

// freeBlockLocked returns b to the pool, its reuse ordered after f (nil:
// the free is already complete and the host knows it).
func (p *memPool) freeBlockLocked(b *block, f *op) {
	p.used -= b.size
	b.free = true
	b.deps, b.depAt, b.allDue, b.seen, b.unseenAt = nil, nil, f == nil, false, 0
	p.frees++
	b.freed = p.frees
	b.pending = f != nil
	if f != nil {
		b.deps = []*op{f}
	}
	if n := b.next; n != nil && n.free && coalescible(b, n) {
		p.unlistFree(n)
		b.absorb(n)
	}
	if pr := b.prev; pr != nil && pr.free && coalescible(pr, b) {
		p.rekey(pr, func() { pr.absorb(b) })
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
// block: if the pool has processed the frees of both, or those of
// neither and they are on the same streams (the merged block waits for
// the later free of each stream, which a stream that may use one may use
// the other after). A pending block is never merged with a processed
// one: the card reuses a block its stream freed before the blocks around
// it, and only that stream may.
func coalescible(a, b *block) bool {
	return !a.pending && !b.pending || a.pending && b.pending && sameStreams(a, b)
}

// absorb makes b's next neighbour n, free and not listed, part of b.
func (b *block) absorb(n *block) {
	delete(b.pool.apart, n)
	b.size += n.size
	b.mergeDeps(n)
	b.freed = max(b.freed, n.freed)
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	} else {
		b.heap.last = b
	}
}

// settled reports whether every free b depends on has completed.
func (b *block) settled() bool {
	if b.allDue {
		return true
	}
	for _, f := range b.deps {
		if !f.due() {
			return false
		}
	}
	b.allDue = true
	return true
}

// sameStreams reports whether the frees a and b list (at most one per
// stream) are on the same streams.
func sameStreams(a, b *block) bool {
	if len(a.deps) != len(b.deps) {
		return false
	}
	for _, f := range a.deps {
		if b.depOn(f.s) < 0 {
			return false
		}
	}
	return true
}

// depIndexFrom is how many frees a block lists before it indexes them.
const depIndexFrom = 8

// depOn returns the index in b.deps of the free on stream s, or -1.
func (b *block) depOn(s *stream) int {
	if b.depAt != nil {
		if i, ok := b.depAt[s]; ok {
			return i
		}
		return -1
	}
	for i, f := range b.deps {
		if f.s == s {
			return i
		}
	}
	return -1
}

// mergeDeps makes b's frees those of b and n, keeping per stream the
// later; n's list is taken over or dropped. The longer list absorbs the
// shorter.
func (b *block) mergeDeps(n *block) {
	if len(n.deps) > len(b.deps) {
		b.deps, n.deps = n.deps, b.deps
		b.depAt, n.depAt = n.depAt, b.depAt
	}
	b.allDue = b.allDue && n.allDue
	b.seen, b.unseenAt = false, 0 // a later free may replace the one the host knew
	for _, f := range n.deps {
		if i := b.depOn(f.s); i >= 0 {
			if f.seq > b.deps[i].seq {
				b.deps[i] = f
			}
			continue
		}
		b.deps = append(b.deps, f)
		if b.depAt != nil {
			b.depAt[f.s] = len(b.deps) - 1
		} else if len(b.deps) > depIndexFrom {
			b.depAt = make(map[*stream]int, len(b.deps))
			for i, g := range b.deps {
				b.depAt[g.s] = i
			}
		}
	}
	n.deps, n.depAt = nil, nil
}

// settleLocked coalesces the free neighbours that were kept apart while a
// free was pending and may be merged now: their frees have all completed
// since, or an earlier merge left them waiting on the same streams. It
// visits the blocks in apart, in address order (coalescing is confined to
// a heap, and within one the order is the addresses').
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
			p.rekey(b, func() { b.absorb(n) })
		}
	}
}

// seenComplete reports whether every free b depends on is due and the
// host has seen at least one of them complete (it synchronized with it).
// A block freed by nothing (never used) counts as seen.
// gen is the host's current generation. What the host knows at it it
// knows for good, so a yes is kept (b.seen) until b's frees change; a no
// is remembered as the generation it was given at (b.unseenAt), and the
// next question asks only about the streams the host learned of since
// (Backend.learnedSince), when it still remembers them and they are
// fewer than b's frees. A block coalescing the frees of thousands of
// streams is then not asked about each at every synchronization, which
// made synchronizing those streams one by one quadratic.
func (b *block) seenComplete(host *Backend, gen uint64) bool {
	if !b.settled() {
		return false
	}
	if b.seen || len(b.deps) == 0 {
		return true
	}
	if b.unseenAt != 0 && b.unseenAt == gen {
		return false
	}
	known := func(f *op) bool { return host.hostKnows(f.s, f.seq, gen) }
	if b.unseenAt != 0 && host.learnedSince(b.unseenAt, gen, len(b.deps), func(s *stream) {
		if i := b.depOn(s); i >= 0 && known(b.deps[i]) {
			b.seen = true
		}
	}) {
		b.unseenAt = gen
		return b.seen
	}
	b.seen = slices.ContainsFunc(b.deps, known)
	b.unseenAt = gen
	return b.seen
}

// releaseLocked gives idle granules back to the device, the highest
// addresses first (idleGranules; at a synchronization, atSync, only those
// the host has seen a free of complete). At a synchronization it releases
// while more than keep bytes stay reserved; TrimTo releases a granule
// only if at least keep bytes stay reserved after it.
func (p *memPool) releaseLocked(keep uint64, atSync bool) {
	p.flushLocked()
	for _, c := range p.idleGranules(atSync) {
		if atSync && p.reserved <= keep {
			break
		}
		if !atSync {
			n := uint64(poolGranule/vmGranule-c.h.unmappedIn(c.g*poolGranule, (c.g+1)*poolGranule)) * vmGranule
			if p.reserved < keep+n {
				continue
			}
		}
		p.unmapGranuleLocked(c.h, c.g)
	}
	if p.destroyed {
		p.dropIdleHeapsLocked()
	}
}

// dropIdleHeapsLocked gives back the addresses of heaps with nothing
// mapped.
func (p *memPool) dropIdleHeapsLocked() {
	kept := p.heaps[:0]
	for _, h := range p.heaps {
		if h.mapped > 0 {
			kept = append(kept, h)
			continue
		}
		for b := h.first; b != nil; b = b.next {
			p.unlistFree(b)
			delete(p.apart, b)
		}
		p.dropHeapLocked(h)
	}
	clear(p.heaps[len(kept):])
	p.heaps = kept
}

func (d *Device) dropDestroyedPoolsLocked() {
	kept := d.pools[:0]
	for _, p := range d.pools {
		if !p.destroyed || len(p.heaps) > 0 {
			kept = append(kept, p)
		}
	}
	clear(d.pools[len(kept):])
	d.pools = kept
}

// afterSync is what a synchronization point does to pools: release what
// is reserved above each pool's threshold and seen idle.
func (d *Device) afterSync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	for _, p := range d.pools {
		if p.reserved > p.threshold {
			p.releaseLocked(p.threshold, true)
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
	}
	if v, ok := p.mark(a); ok {
		return v, nil
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
		return p.resetHigh(call, a, v)
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
	p.releaseLocked(minBytesToKeep, false)
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
	p.unexport()
	p.dev.foreign.forgetPool(p)
	p.dev.reapLocked()
	return nil
}
