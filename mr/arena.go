// Arena: per-stream arenas over a global arena of superblocks, for many
// goroutines at once (the design of RMM's arena resource, in our words).
//
// Memory comes from the upstream in superblocks of one size. Each stream
// has an arena that owns some superblocks and serves its requests from
// them first-fit, splitting and coalescing within a superblock; so streams
// never contend for a lock while their superblocks have room. A superblock
// that a free leaves empty goes back to the global arena (the stream
// keeps at least one), where any stream can take it; requests larger than
// LargeSize bypass the arenas and go to the upstream.
//
// Stream order:
//
//   - A free on the owner's stream makes the range reusable by the owner
//     at once.
//   - A free on another stream s2 of a block in s1's superblock cannot be
//     reused by s1 until s1 is ordered after s2's free. Arena records an
//     event on s2 and parks the range on the superblock's deferred list.
//     When the owner runs short it first reclaims the deferred ranges
//     whose events have completed (Query, never blocking), then, before
//     taking another superblock, makes s1 wait on the remaining events
//     (which blocks no host thread) and reclaims those too: memory freed
//     on other streams is reused, not stranded while the arena grows, at
//     the price of ordering s1 after those frees. Release does the same.
//     No work on s1 needs ordering: s1 only reuses the range after its own
//     earlier work.
//   - A superblock returned to the global arena remembers the stream that
//     returned it; a different stream that takes it first waits on an
//     event recorded on that stream.
//   - Release frees the global arena's superblocks upstream on the stream
//     that returned each one, so it is ordered after all their uses (or,
//     if that stream was destroyed, on another after synchronizing the
//     device).
//
// Invariants:
//   - Every superblock in the index has exactly one owner: an arena
//     (owner != nil, in that arena's list) or the global arena (owner ==
//     nil, in global.free). Only an empty superblock (used == 0, no
//     deferred ranges) changes owner.
//   - Within a superblock, guarded by its mutex: free holds disjoint,
//     sorted, non-adjacent extents; used is the bytes (rounded to
//     Alignment) of live and deferred blocks; starts[off/Alignment] is the
//     requested size of the live block at off, freedMark if a block there
//     was freed (a later free there is a double free), 0 otherwise. A mark
//     is only overwritten when a block starts there again, so a free of a
//     pointer inside a live block may report a double free rather than an
//     unknown pointer: either way a typed error that changes nothing.
//   - Lock order: arena.mu, then superblock.mu, then global.mu; a
//     goroutine holds at most one arena's mutex.
//   - Usage: Reserved is superblocks plus large allocations, Used the
//     requested sizes of live allocations.

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

// ArenaOptions configure an Arena.
type ArenaOptions struct {
	// SuperblockSize is the size of the upstream allocations arenas are
	// carved from, rounded up to Alignment; zero means 4 MiB. At most
	// 1 GiB.
	SuperblockSize int
	// LargeSize is the largest request served from the arenas; larger
	// ones go to the upstream. Zero means SuperblockSize/2; at most
	// SuperblockSize.
	LargeSize int
}

const freedMark = ^uint32(0)

// Arena is a resource of per-stream arenas over a global arena. It is safe
// for concurrent use.
type Arena struct {
	up        Resource
	dev       gpu.Device
	sbSize    int
	largeSize int

	index  spanIndex[*superblock]
	arenas streamTable[arenaStream]
	global struct {
		mu   sync.Mutex
		free []*superblock
	}
	large     ptrTable[gpu.DevicePtr, gpu.Stream]
	events    eventCache
	usage     usageMeter
	releaseMu sync.Mutex

	// The arenas that may keep an empty superblock, which scavenge visits
	// (rather than every arena: when the device is full, every request
	// that finds its arena without room scavenges). An arena lists itself
	// under its mutex when it keeps one (maybeReturn, reclaim); scavenge
	// unlists it after taking its empty superblocks. scavMu is a leaf lock.
	scavMu   sync.Mutex
	scav     map[*arenaStream]struct{}
	arenaSeq uint64 // numbers arenas in order of creation, under the table's lock
}

type arenaStream struct {
	streamState
	sbs []*superblock
	cur int // the superblock tried first
	// listed: in Arena.scav; seq: order of creation. Guarded by mu.
	listed bool
	seq    uint64
	// deferred counts the deferred ranges in sbs (read without mu to skip
	// the reclaim scan when there are none).
	deferred atomic.Int64
}

type superblock struct {
	base  gpu.DevicePtr
	owner atomic.Pointer[arenaStream]
	// last is the stream that returned it to the global arena.
	last gpu.Stream

	// largest is the size of the largest free extent, written under mu
	// and read without it: fit skips a superblock that cannot hold a
	// request without locking it (once the device is full, an arena's
	// superblocks are all full, and a request tried every one).
	largest atomic.Int64

	mu       sync.Mutex
	free     []extent
	used     int
	starts   startMarks
	deferred []deferredRange
}

type extent struct{ off, n int }

// startMarks holds a superblock's starts marks (see the file comment), one
// per Alignment bytes, in pages of startPage marks allocated when a mark is
// first set in them: a superblock of a few large blocks costs a page or
// two of host memory, not 4 bytes per 256 bytes of device memory (64 KiB
// per 4 MiB superblock, over a gigabyte once an 80 GB device is full of
// them, whatever the allocations).
type startMarks struct{ pages []*[startPage]uint32 }

// startPage is the number of marks in a page: 1 KiB, covering 64 KiB.
const startPage = 256

func newStartMarks(n int) startMarks {
	return startMarks{pages: make([]*[startPage]uint32, (n+startPage-1)/startPage)}
}

func (m *startMarks) get(i int) uint32 {
	if pg := m.pages[i/startPage]; pg != nil {
		return pg[i%startPage]
	}
	return 0
}

func (m *startMarks) set(i int, v uint32) {
	pg := m.pages[i/startPage]
	if pg == nil {
		if v == 0 {
			return
		}
		pg = new([startPage]uint32)
		m.pages[i/startPage] = pg
	}
	pg[i%startPage] = v
}

type deferredRange struct {
	off, n int
	e      gpu.Event
}

// NewArena returns an Arena over upstream.
func NewArena(upstream Resource, opts ArenaOptions) (*Arena, error) {
	if upstream == nil {
		return nil, fmt.Errorf("arena: nil upstream: %w", gpu.ErrInvalidHandle)
	}
	sb, large := opts.SuperblockSize, opts.LargeSize
	if sb == 0 {
		sb = 4 << 20
	}
	if sb < 0 || sb > 1<<30 || large < 0 || large > alignUp(sb) {
		return nil, fmt.Errorf("arena: superblock %d, large %d: %w", opts.SuperblockSize, opts.LargeSize, ErrInvalidSize)
	}
	sb = alignUp(sb)
	if large == 0 {
		large = sb / 2
	}
	dev := upstream.Device()
	return &Arena{up: upstream, dev: dev, sbSize: sb, largeSize: large, events: newEventCache(dev)}, nil
}

// Device is the upstream's device.
func (r *Arena) Device() gpu.Device { return r.dev }

// Usage reports the superblocks and large allocations held from the
// upstream (Reserved) and the bytes asked for by live allocations (Used).
func (r *Arena) Usage() Usage { return r.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (r *Arena) ResetPeaks() { r.usage.resetPeaks() }

// lockArena returns s's arena, locked.
func (r *Arena) lockArena(s gpu.Stream) *arenaStream {
	for {
		a := r.arenas.get(s.ID(), func() *arenaStream {
			r.arenaSeq++
			return &arenaStream{streamState: streamState{s: s}, seq: r.arenaSeq}
		})
		if a.lockLive() {
			return a
		}
	}
}

// Allocate serves size bytes from s's arena, or from the upstream if size
// exceeds LargeSize.
func (r *Arena) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("arena", r.dev, size, s); zero || err != nil {
		return 0, err
	}
	if id := gpu.CaptureID(s); id != 0 {
		return captureAllocate(r.captureClient(), id, size, s)
	}
	if size > r.largeSize {
		return r.allocateLarge(size, s)
	}
	need := alignUp(size)
	a := r.lockArena(s)
	defer func() { a.mu.Unlock() }() // a may be looked up again below
	if p, ok := a.fit(need, size); ok {
		r.usage.addUsed(size)
		return p, nil
	}
	for _, wait := range []bool{false, true} {
		if a.deferred.Load() == 0 {
			break
		}
		r.reclaim(a, wait)
		if p, ok := a.fit(need, size); ok {
			r.usage.addUsed(size)
			return p, nil
		}
	}
	sb, err := r.take(s)
	if errors.Is(err, ErrOutOfMemory) {
		// Short of memory: gather every arena's empty superblocks into
		// the global one.
		a.mu.Unlock()
		r.scavenge()
		a = r.lockArena(s)
		if p, ok := a.fit(need, size); ok {
			r.usage.addUsed(size)
			return p, nil
		}
		sb, err = r.take(s)
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			u := r.usage.snapshot()
			return 0, &OutOfMemoryError{Resource: "arena", Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Reason: "the upstream refused", Err: err}
		}
		return 0, fmt.Errorf("arena: allocate %d bytes: %w", size, err)
	}
	sb.owner.Store(a)
	a.sbs = append(a.sbs, sb)
	a.cur = len(a.sbs) - 1
	p, _ := a.fit(need, size)
	r.usage.addUsed(size)
	return p, nil
}

// fit carves need bytes for a request of size from the arena's
// superblocks, first fit, trying the current one first. Called with a.mu.
func (a *arenaStream) fit(need, size int) (gpu.DevicePtr, bool) {
	n := len(a.sbs)
	for k := range n {
		i := (a.cur + k) % n
		if a.sbs[i].largest.Load() < int64(need) {
			continue
		}
		if p, ok := a.sbs[i].carve(need, size); ok {
			a.cur = i
			return p, true
		}
	}
	return 0, false
}

// carve takes need bytes first-fit from the superblock.
func (sb *superblock) carve(need, size int) (gpu.DevicePtr, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for i := range sb.free {
		e := &sb.free[i]
		if e.n < need {
			continue
		}
		off := e.off
		e.off += need
		e.n -= need
		if e.n == 0 {
			sb.free = slices.Delete(sb.free, i, i+1)
		}
		sb.used += need
		sb.starts.set(off/Alignment, uint32(size))
		sb.noteLargest()
		return sb.base + gpu.DevicePtr(off), true
	}
	return 0, false
}

// noteLargest records the size of the largest free extent. Called with
// sb.mu.
func (sb *superblock) noteLargest() {
	m := 0
	for _, e := range sb.free {
		m = max(m, e.n)
	}
	sb.largest.Store(int64(m))
}

// insert returns [off, off+n) to the free extents, coalescing. Called with
// sb.mu.
func (sb *superblock) insert(off, n int) {
	i, _ := slices.BinarySearchFunc(sb.free, off, func(e extent, off int) int { return e.off - off })
	left := i > 0 && sb.free[i-1].off+sb.free[i-1].n == off
	right := i < len(sb.free) && off+n == sb.free[i].off
	switch {
	case left && right:
		sb.free[i-1].n += n + sb.free[i].n
		sb.free = slices.Delete(sb.free, i, i+1)
	case left:
		sb.free[i-1].n += n
	case right:
		sb.free[i].off = off
		sb.free[i].n += n
	default:
		sb.free = slices.Insert(sb.free, i, extent{off, n})
	}
	sb.used -= n
	sb.noteLargest()
}

// empty reports whether nothing is live or deferred. Called with sb.mu.
func (sb *superblock) empty() bool { return sb.used == 0 }

// take gets an empty superblock for s: from the global arena (after an
// event wait if another stream returned it) or from the upstream.
func (r *Arena) take(s gpu.Stream) (*superblock, error) {
	r.global.mu.Lock()
	var sb *superblock
	if n := len(r.global.free); n > 0 {
		// Prefer one that s itself returned: no wait needed.
		i := n - 1
		for j := n - 1; j >= 0; j-- {
			if r.global.free[j].last.ID() == s.ID() {
				i = j
				break
			}
		}
		sb = r.global.free[i]
		r.global.free = slices.Delete(r.global.free, i, i+1)
	}
	r.global.mu.Unlock()
	if sb != nil {
		if err := r.events.order(s, sb.last); err != nil {
			r.global.mu.Lock()
			r.global.free = append(r.global.free, sb)
			r.global.mu.Unlock()
			return nil, err
		}
		sb.last = nil
		return sb, nil
	}
	base, err := r.up.Allocate(r.sbSize, s)
	if err != nil {
		return nil, err
	}
	sb = &superblock{base: base, free: []extent{{0, r.sbSize}}, starts: newStartMarks(r.sbSize / Alignment)}
	sb.largest.Store(int64(r.sbSize))
	r.index.add(base, r.sbSize, sb)
	r.usage.addReserved(r.sbSize)
	return sb, nil
}

// reclaim returns the arena's deferred ranges to their superblocks: those
// whose events completed, or, with wait, all of them after making the
// arena's stream wait on their events. Called with a.mu.
func (r *Arena) reclaim(a *arenaStream, wait bool) error {
	if gpu.Capturing(a.s) {
		return nil // a wait on it would join the capture to outside work (capture.go)
	}
	var errs []error
	for _, sb := range a.sbs {
		sb.mu.Lock()
		kept := sb.deferred[:0]
		for _, d := range sb.deferred {
			var err error
			if wait {
				err = a.s.WaitEvent(d.e)
			} else {
				err = d.e.Query()
			}
			if err != nil {
				if !errors.Is(err, gpu.ErrNotReady) {
					errs = append(errs, err)
				}
				kept = append(kept, d)
				continue
			}
			sb.insert(d.off, d.n)
			a.deferred.Add(-1)
			r.events.Put(d.e)
			if sb.empty() {
				r.keepsEmpty(a)
			}
		}
		clear(sb.deferred[len(kept):])
		sb.deferred = kept
		sb.mu.Unlock()
	}
	return errors.Join(errs...)
}

// scavenge moves the empty superblocks of every arena that may keep one
// to the global arena, in the order the arenas were made. Called with no
// arena locked.
func (r *Arena) scavenge() {
	r.scavMu.Lock()
	list := make([]*arenaStream, 0, len(r.scav))
	for a := range r.scav {
		list = append(list, a)
	}
	r.scavMu.Unlock()
	slices.SortFunc(list, func(a, b *arenaStream) int { return cmp.Compare(a.seq, b.seq) })
	for _, a := range list {
		a.mu.Lock()
		if !a.dead {
			r.returnEmpty(a, 0)
		}
		a.listed = false
		r.scavMu.Lock()
		delete(r.scav, a)
		r.scavMu.Unlock()
		a.mu.Unlock()
	}
}

// keepsEmpty lists a, which keeps an empty superblock, for scavenge.
// Called with a.mu.
func (r *Arena) keepsEmpty(a *arenaStream) {
	if a.listed {
		return
	}
	a.listed = true
	r.scavMu.Lock()
	if r.scav == nil {
		r.scav = make(map[*arenaStream]struct{})
	}
	r.scav[a] = struct{}{}
	r.scavMu.Unlock()
}

// returnEmpty moves a's empty superblocks to the global arena, keeping at
// most keep of them. Called with a.mu.
func (r *Arena) returnEmpty(a *arenaStream, keep int) {
	kept := 0
	out := a.sbs[:0]
	var moved []*superblock
	for _, sb := range a.sbs {
		sb.mu.Lock()
		empty := sb.empty()
		sb.mu.Unlock()
		if empty && kept >= keep {
			sb.owner.Store(nil)
			sb.last = a.s
			moved = append(moved, sb)
			continue
		}
		if empty {
			kept++
		}
		out = append(out, sb)
	}
	clear(a.sbs[len(out):])
	a.sbs = out
	a.cur = 0
	if len(moved) > 0 {
		r.global.mu.Lock()
		r.global.free = append(r.global.free, moved...)
		r.global.mu.Unlock()
	}
}

func (r *Arena) allocateLarge(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := r.up.Allocate(size, s)
	if errors.Is(err, ErrOutOfMemory) {
		// The global arena's cached superblocks may be what the
		// upstream lacks.
		if rerr := r.releaseGlobal(); rerr == nil {
			p, err = r.up.Allocate(size, s)
		}
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			u := r.usage.snapshot()
			return 0, &OutOfMemoryError{Resource: "arena", Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Reason: "the upstream refused", Err: err}
		}
		return 0, fmt.Errorf("arena: allocate %d bytes: %w", size, err)
	}
	r.large.insert(p, size, s, nil)
	r.usage.addReserved(size)
	r.usage.addUsed(size)
	return p, nil
}

// Deallocate frees p in stream order on s.
func (r *Arena) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("arena", r.dev, p, size, s); null || err != nil {
		return err
	}
	if id := gpu.CaptureID(s); id != 0 {
		return captureDeallocate(r.captureClient(), id, p, size, s, r.knows)
	}
	sb, base, ok := r.index.find(p)
	if !ok {
		if _, live := r.large.lookup(p); !live {
			if handled, err := freeOutsideCapture(r.captureClient(), p, size, s); handled {
				return err
			}
		}
		return r.deallocateLarge(p, size, s)
	}
	off := int(p - base)
	sb.mu.Lock()
	if err := sb.check(p, off, size); err != nil {
		sb.mu.Unlock()
		return fmt.Errorf("arena: deallocate: %w", err)
	}
	need := alignUp(size)
	owner := sb.owner.Load() // cannot change: the block is live
	if owner.s.ID() == s.ID() {
		sb.starts.set(off/Alignment, freedMark)
		sb.insert(off, need)
		empty := sb.empty()
		sb.mu.Unlock()
		r.usage.subUsed(size)
		if empty {
			r.maybeReturn(s, sb)
		}
		return nil
	}
	// Another stream's superblock: park the range until the owner is
	// ordered after this free.
	sb.starts.set(off/Alignment, freedMark)
	sb.mu.Unlock()
	e, err := r.events.Get()
	if err == nil {
		if err = e.Record(s); err != nil {
			r.events.Put(e)
		}
	}
	sb.mu.Lock()
	if err != nil {
		sb.starts.set(off/Alignment, uint32(size))
		sb.mu.Unlock()
		return fmt.Errorf("arena: deallocate %#x: %w", uint64(p), err)
	}
	sb.deferred = append(sb.deferred, deferredRange{off: off, n: need, e: e})
	owner.deferred.Add(1)
	sb.mu.Unlock()
	r.usage.subUsed(size)
	return nil
}

// check validates a free of size bytes at offset off. Called with sb.mu.
func (sb *superblock) check(p gpu.DevicePtr, off, size int) error {
	if off%Alignment != 0 {
		return pointerError(p, ErrUnknownPointer)
	}
	switch v := sb.starts.get(off / Alignment); {
	case v == 0:
		return pointerError(p, ErrUnknownPointer)
	case v == freedMark:
		return pointerError(p, ErrDoubleFree)
	case int(v) != size:
		return sizeMismatchError(p, int(v), size)
	}
	return nil
}

// maybeReturn gives sb, just emptied by a free on its owner's stream s, to
// the global arena unless it is the arena's only superblock.
func (r *Arena) maybeReturn(s gpu.Stream, sb *superblock) {
	a := r.lockArena(s)
	defer a.mu.Unlock()
	if sb.owner.Load() != a {
		return
	}
	sb.mu.Lock()
	empty := sb.empty()
	sb.mu.Unlock()
	if !empty {
		return
	}
	if len(a.sbs) < 2 {
		r.keepsEmpty(a) // kept: scavenge takes it when memory is short
		return
	}
	i := slices.Index(a.sbs, sb)
	a.sbs = slices.Delete(a.sbs, i, i+1)
	a.cur = 0
	sb.owner.Store(nil)
	sb.last = s
	r.global.mu.Lock()
	r.global.free = append(r.global.free, sb)
	r.global.mu.Unlock()
}

func (r *Arena) deallocateLarge(p gpu.DevicePtr, size int, s gpu.Stream) error {
	alloc, err := r.large.take(p, size, nil)
	if err != nil {
		return fmt.Errorf("arena: deallocate: %w", err)
	}
	// Order the free after the allocation's stream too, whatever the
	// upstream does about cross-stream frees.
	if err := r.events.order(s, alloc); err != nil {
		r.large.restore(p, size, alloc)
		return fmt.Errorf("arena: deallocate %#x: %w", uint64(p), err)
	}
	if err := r.up.Deallocate(p, size, s); err != nil {
		r.large.restore(p, size, alloc)
		return fmt.Errorf("arena: deallocate %#x: %w", uint64(p), err)
	}
	r.usage.subUsed(size)
	r.usage.subReserved(size)
	return nil
}

// releaseGlobal frees the global arena's superblocks upstream, each on the
// stream that returned it. One that fails goes back.
func (r *Arena) releaseGlobal() error {
	r.global.mu.Lock()
	free := r.global.free
	r.global.free = nil
	r.global.mu.Unlock()
	if len(free) == 0 {
		return nil
	}
	bases := make(map[gpu.DevicePtr]bool, len(free))
	for _, sb := range free {
		bases[sb.base] = true
	}
	r.index.remove(bases)
	var errs []error
	var back []*superblock
	// The stream to free each superblock on: the one that returned it,
	// or, if that was destroyed, another (see usableStream).
	on := make(map[uint64]gpu.Stream)
	var dones []func()
	defer func() {
		for _, done := range dones {
			done()
		}
	}()
	for _, sb := range free {
		s, ok := on[sb.last.ID()]
		if !ok {
			var done func()
			var err error
			if s, done, err = usableStream(r.dev, []gpu.Stream{sb.last}); err != nil {
				errs = append(errs, err)
				back = append(back, sb)
				continue
			}
			on[sb.last.ID()] = s
			dones = append(dones, done)
		}
		if err := r.up.Deallocate(sb.base, r.sbSize, s); err != nil {
			errs = append(errs, err)
			back = append(back, sb)
			continue
		}
		r.usage.subReserved(r.sbSize)
	}
	if len(back) > 0 {
		for _, sb := range back {
			r.index.add(sb.base, r.sbSize, sb)
		}
		r.global.mu.Lock()
		r.global.free = append(r.global.free, back...)
		r.global.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Release returns every superblock no allocation uses to the upstream, in
// stream order and without blocking the host: each arena first waits (on
// the device) for its deferred ranges and gives up its empty superblocks,
// then the global arena's superblocks are freed upstream. Arenas left with
// nothing are forgotten.
func (r *Arena) Release() error {
	r.releaseMu.Lock()
	defer r.releaseMu.Unlock()
	var errs []error
	for _, a := range r.arenas.all() {
		a.mu.Lock()
		if a.dead {
			a.mu.Unlock()
			continue
		}
		if a.deferred.Load() > 0 {
			if err := r.reclaim(a, true); errors.Is(err, gpu.ErrDestroyed) {
				// Nothing will be enqueued on a destroyed stream
				// again: take back what has completed, leave the
				// rest for a later Release.
				r.reclaim(a, false)
			} else if err != nil {
				errs = append(errs, err)
			}
		}
		r.returnEmpty(a, 0)
		if len(a.sbs) == 0 {
			a.dead = true
		}
		a.mu.Unlock()
	}
	// Dead arenas stay dead (nothing clears the flag), so reading it here
	// needs no lock; one pass drops them all.
	r.arenas.dropIf(func(a *arenaStream) bool { return a.dead })
	if err := r.releaseGlobal(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("arena: release: %w", err)
	}
	return nil
}

// Close releases everything cached and destroys the cached events. It
// fails if allocations are still live.
func (r *Arena) Close() error {
	if err := r.Release(); err != nil {
		return err
	}
	if u := r.usage.snapshot(); u.Reserved != 0 {
		return fmt.Errorf("arena: close: %d bytes still allocated", u.Used)
	}
	return r.events.Close()
}
