// Virtual: a resource of physical memory mapped on demand into one
// reserved virtual address range (the driver's cuMemAddressReserve,
// cuMemCreate and cuMemMap, through gpu.VirtualMemory).
//
// Virtual reserves a large range once (VirtualOptions.ReserveSize) and
// serves each request by creating a physical allocation of the request
// rounded up to the granularity and mapping it at the lowest free address
// of the range: the first hole a free left that fits, else the end of what
// is in use, so that successive growths are adjacent and the range grows
// at its end. A free is stream-ordered: Deallocate records an event on the
// freeing stream and returns; the mapping is unmapped and its physical
// memory given back once that event has completed, which later calls find
// by querying the event, never by blocking the host (only Close waits).
// When the freed range is the tail of the range, the end moves back, so
// the range shrinks as it grew.
//
// A freed allocation stays mapped until its work has completed, so memory
// freed and memory mapped anew can be held at once: a caller that gives
// memory back in order to take more (a Pool's release before growth)
// holds both for as long as the freeing stream's queue runs, where
// cuMemFree would have waited for the device first. WaitForFrees closes
// that window: an Allocate that must map new memory first waits on the
// host for the work before every pending free, and unmaps them, so the
// memory mapped never exceeds what the caller holds. The wait is for the
// freeing streams' work up to their frees, never for the whole device.
//
// Virtual is meant as the upstream of a suballocator: a Pool over it
// holds exactly the physical memory of its chunks, rounded to the
// granularity (2 MiB on current GPUs), and gives it back to the device the
// moment its idle chunks' last work completes, while the addresses of the
// range are reused. Stats tells apart the three quantities: bytes live
// (handed out, at their requested size), bytes mapped (physical memory
// held: live and pending frees, rounded up) and bytes of virtual address
// space reserved.
//
// Invariants (under mu): the pieces [off, off+n) of the range that are
// live or pending are disjoint, all below end; holes lists, sorted and
// merged, the unmapped pieces below end, and the last one never ends at
// end; mapped is the sum of the live and pending pieces' n. A failed step
// of Allocate undoes the steps before it; a failed unmap leaves the free
// pending (and its event with it) for the next reap.

package mr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// VirtualOptions configure a Virtual resource.
type VirtualOptions struct {
	// ReserveSize is the size of the virtual range, rounded up to the
	// granularity. Zero: twice the device's memory.
	ReserveSize uint64
	// WaitForDecommits makes a Commit of addresses that are still
	// mapped, because their memory went to another commit while their
	// decommit's work ran, wait on the host for that work
	// (cuEventSynchronize) and unmap them, where it would otherwise fail
	// with ErrGrowBlocked. A Pool growing in place then places every
	// request by its own state alone, not by how far the device has got
	// with its work, so the same requests give the same layout and the
	// same peaks on every run and on every device (virtual_grow.go).
	// The price is a host wait in such a commit for the work queued on
	// the decommitting stream before the decommit; if that work waits
	// for the host (a host function, a collective with another
	// process), the commit waits as long, up to DecommitWaitLimit.
	// False: the commit is refused and the caller grows elsewhere,
	// without a host wait.
	WaitForDecommits bool
	// DecommitWaitLimit bounds each such wait (WaitForDecommits): a
	// commit whose decommit's work has not completed by then is refused
	// with ErrGrowBlocked, as without WaitForDecommits, and counted in
	// Stats().WaitsRefused. The wait holds the resource's mutex (a Pool
	// calls Commit under its own, so its other callers would wait anyway);
	// the limit is what keeps work that waits for the host from stalling
	// every caller. Zero: no limit; negative is ErrInvalidValue.
	DecommitWaitLimit time.Duration
	// PiecesPerCommit sets how finely a commit of a growable allocation
	// (Grower) cuts its new memory: into pieces of the largest power of
	// two granules not above its size over PiecesPerCommit, one physical
	// allocation each, so a large commit maps between PiecesPerCommit and
	// twice as many (virtual_grow.go). The driver's cost is per piece; a
	// piece goes back to the device only whole. Zero:
	// DefaultVirtualPiecesPerCommit, or with WaitForDecommits one granule
	// a piece, which its promise of a layout that follows from the calls
	// alone needs (a piece's bounds depend on whether a commit meets
	// decommitted memory, so on the device's progress); negative is
	// ErrInvalidValue.
	PiecesPerCommit int
	// HandleTypes are the handle types every physical allocation of the
	// resource is created exportable as (gpu.PhysicalSharing), so that a
	// live range can be shared with another process (Export,
	// virtual_export.go). Zero: none, and Export refuses. The device must
	// offer them (NewVirtual: ErrNotSupported otherwise): gpu.HandlePOSIX
	// (file descriptors) or gpu.HandleFabric (64-byte handles that cross
	// the nodes of an NVLink fabric), or both. Fabric also needs an IMEX
	// channel in the process (/dev/nvidia-caps-imex-channels), which the
	// device's attributes do not tell: without one, every allocation
	// that maps memory fails with the driver's gpu.ErrNotPermitted
	// (cuMemCreate refuses to make memory exportable as fabric), so
	// include HandleFabric only where the process has one.
	HandleTypes gpu.HandleType
	// WaitForFrees makes an Allocate that maps new memory (rather than
	// take back a pending free of its size) first wait on the host
	// (cuEventSynchronize) for the work before every free of a plain
	// allocation still pending and unmap them: the physical memory
	// mapped is then at most the live allocations' plus the new one, as
	// with cuMemAlloc and cuMemFree, whose free waits for the whole
	// device. The wait holds the resource's mutex. False: new memory is
	// mapped beside frees whose work has not completed, without a host
	// wait.
	WaitForFrees bool
}

// VirtualStats are a Virtual resource's counters.
type VirtualStats struct {
	// Reserved is the virtual address space reserved (no memory): the
	// range and the ranges of growable allocations.
	Reserved uint64
	// Mapped is the physical memory held: live allocations and frees not
	// yet known complete, each rounded up to the granularity.
	Mapped, PeakMapped uint64
	// Live is the bytes handed out and not freed, as requested.
	Live, PeakLive uint64
	// Pending is the part of Mapped that is freed or decommitted: waiting
	// for its event, or (Idle) for the rest of its physical allocation.
	Pending uint64
	// Idle is the part of Pending whose physical allocation still has
	// committed granules (a growable allocation's memory is mapped and
	// given back per piece, virtual_grow.go): it goes back to the device
	// with the rest of the piece, and a Commit there takes it back
	// without a driver call.
	Idle uint64
	// Granularity is the size physical memory is created and mapped in.
	Granularity uint64
	// Growable is the number of growable allocations (Grower) whose
	// range is still reserved, freed ones included until their last
	// granule is unmapped.
	Growable int
	// Handoffs counts the granules a Commit mapped with the memory of a
	// decommitted piece still waiting for its event, rather than new
	// memory.
	Handoffs uint64
	// HostWaits counts the granules a Commit waited on the host for
	// (VirtualOptions.WaitForDecommits): their memory had gone to
	// another commit and their decommit's work had not completed (the
	// whole piece they belong to counts).
	HostWaits uint64
	// WaitsRefused counts the commits refused because such a wait
	// reached VirtualOptions.DecommitWaitLimit.
	WaitsRefused uint64
	// FreeWaits counts the Allocates that waited on the host for
	// pending frees before mapping (VirtualOptions.WaitForFrees).
	FreeWaits uint64
}

// Virtual is a resource of physical memory mapped into one reserved range.
// It is safe for concurrent use.
type Virtual struct {
	dev    gpu.Device
	vm     gpu.VirtualMemory
	g      uint64
	base   gpu.DevicePtr
	size   uint64
	events eventCache
	// waitDecommits is VirtualOptions.WaitForDecommits, waitFrees
	// VirtualOptions.WaitForFrees.
	waitDecommits, waitFrees bool
	// perCommit is VirtualOptions.PiecesPerCommit, waitLimit
	// VirtualOptions.DecommitWaitLimit.
	perCommit int
	waitLimit time.Duration
	// share creates the physical allocations when handleTypes is not
	// HandleNone (VirtualOptions.HandleTypes); nil otherwise.
	share       gpu.PhysicalSharing
	handleTypes gpu.HandleType

	live  ptrTable[gpu.DevicePtr, gpu.Stream]
	usage usageMeter

	mu      sync.Mutex
	closed  bool
	end     uint64  // offset past the highest live or pending piece
	holes   []vspan // unmapped pieces below end
	pending []vfree // freed pieces waiting for their event
	stats   VirtualStats
	// handles are the physical allocations of the live and pending
	// pieces, by offset, kept while mapped so that they can be exported:
	// only when handleTypes is not HandleNone (otherwise a handle is
	// released as soon as it is mapped).
	handles map[uint64]gpu.Physical
	// exported holds, per physical allocation exported as a POSIX
	// descriptor and not yet released, a descriptor of its export, which
	// later exports duplicate (virtual_export.go).
	exported map[gpu.Physical]*os.File

	// Growable allocations (virtual_grow.go), by address, and their
	// pieces with every granule decommitted, waiting for the decommits'
	// events, in order of their last decommit.
	grows   map[gpu.DevicePtr]*vgrow
	waiting []*vpiece
}

type vspan struct{ off, n uint64 }

type vfree struct {
	vspan
	ev gpu.Event
}

const virtualName = "vmm"

// NewVirtual reserves the range of a Virtual resource on dev; dev must
// implement gpu.VirtualMemory (ErrNotSupported otherwise).
func NewVirtual(dev gpu.Device, opts VirtualOptions) (*Virtual, error) {
	if dev == nil {
		return nil, fmt.Errorf("%s: nil device: %w", virtualName, gpu.ErrInvalidValue)
	}
	if opts.DecommitWaitLimit < 0 {
		return nil, fmt.Errorf("%s: decommit wait limit %v: %w", virtualName, opts.DecommitWaitLimit, gpu.ErrInvalidValue)
	}
	if opts.PiecesPerCommit < 0 {
		return nil, fmt.Errorf("%s: pieces per commit %d: %w", virtualName, opts.PiecesPerCommit, gpu.ErrInvalidValue)
	}
	vm, err := gpu.VirtualMemoryOf(dev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", virtualName, err)
	}
	var share gpu.PhysicalSharing
	if opts.HandleTypes != gpu.HandleNone {
		if share, err = gpu.PhysicalSharingOf(dev); err != nil {
			return nil, fmt.Errorf("%s: handle types %#x: %w", virtualName, int32(opts.HandleTypes), err)
		}
		offered, err := share.PhysicalHandleTypes()
		if err != nil {
			return nil, fmt.Errorf("%s: handle types: %w", virtualName, err)
		}
		if opts.HandleTypes&^offered != 0 {
			return nil, fmt.Errorf("%s: handle types %#x, the device offers %#x: %w", virtualName, int32(opts.HandleTypes), int32(offered), gpu.ErrNotSupported)
		}
	}
	g, err := vm.Granularity(false)
	if err != nil {
		return nil, fmt.Errorf("%s: granularity: %w", virtualName, err)
	}
	size := opts.ReserveSize
	if size == 0 {
		size = 2 * dev.Properties().TotalMemory
	}
	size = (size + g - 1) / g * g
	base, err := vm.ReserveAddress(size, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: reserve %d bytes: %w", virtualName, size, err)
	}
	v := &Virtual{dev: dev, vm: vm, g: g, base: base, size: size, events: newEventCache(dev), waitDecommits: opts.WaitForDecommits,
		perCommit: opts.PiecesPerCommit, waitLimit: opts.DecommitWaitLimit, share: share, handleTypes: opts.HandleTypes,
		waitFrees: opts.WaitForFrees}
	if v.perCommit == 0 {
		v.perCommit = DefaultVirtualPiecesPerCommit
		if opts.WaitForDecommits {
			// One granule a piece: whether a commit takes back or hands
			// on a decommitted piece or maps new memory depends on the
			// device's progress, and with pieces of several granules so
			// would the pieces' bounds and what a Pool decommits.
			v.perCommit = math.MaxInt
		}
	}
	v.stats.Reserved = size
	v.stats.Granularity = g
	return v, nil
}

// Device is the device the memory lives on.
func (v *Virtual) Device() gpu.Device { return v.dev }

// Options returns the options in effect: the range's size rounded up to
// the granularity, and PiecesPerCommit with its default filled in
// (math.MaxInt, one granule a piece, under WaitForDecommits).
func (v *Virtual) Options() VirtualOptions {
	return VirtualOptions{ReserveSize: v.size, WaitForDecommits: v.waitDecommits,
		DecommitWaitLimit: v.waitLimit, PiecesPerCommit: v.perCommit, HandleTypes: v.handleTypes,
		WaitForFrees: v.waitFrees}
}

// neverBlocks reports whether Commit never fails with ErrGrowBlocked
// (WaitForDecommits); a Pool over v places by lifetime only then
// (pool_lifetime.go).
func (v *Virtual) neverBlocks() bool { return v.waitDecommits }

// Allocate maps size bytes, rounded up to the granularity, of new physical
// memory at the lowest free address of the range, or takes back a pending
// free of the same rounded size, ordering s after its work. The memory is
// usable on every stream. With WaitForFrees, a mapping first waits for
// the pending frees (VirtualOptions). It refuses a capturing stream
// (mapping is not stream work), like Direct.
func (v *Virtual) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc(virtualName, v.dev, size, s); zero || err != nil {
		return 0, err
	}
	if gpu.Capturing(s) {
		return 0, fmt.Errorf("%s: allocate on stream %d: %w", virtualName, s.ID(), ErrStreamCapturing)
	}
	n := (uint64(size) + v.g - 1) / v.g * v.g
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return 0, fmt.Errorf("%s: allocate: %w", virtualName, ErrClosed)
	}
	reapErr := v.reapLocked()
	if p, ok, err := v.reuseLocked(n, s); ok || err != nil {
		if err != nil {
			return 0, fmt.Errorf("%s: allocate %d bytes: %w", virtualName, size, err)
		}
		v.live.insert(p, size, s, nil)
		v.usage.addUsed(size)
		v.stats.Live += uint64(size)
		v.stats.PeakLive = max(v.stats.PeakLive, v.stats.Live)
		return p, nil
	}
	if v.waitFrees && len(v.pending) > 0 {
		// What the non-blocking reap left is still running.
		v.stats.FreeWaits++
		reapErr = errors.Join(reapErr, v.reapFreesLocked(true))
	}
	off, ok := v.placeLocked(n)
	if !ok {
		return 0, v.oomLocked(size, s, "the virtual range is exhausted", errors.Join(reapErr, gpu.ErrOutOfMemory))
	}
	p := v.base + gpu.DevicePtr(off)
	if err := v.mapLocked(p, n); err != nil {
		v.unplaceLocked(off, n)
		if errors.Is(err, gpu.ErrOutOfMemory) {
			return 0, v.oomLocked(size, s, "the device is out of memory", errors.Join(reapErr, err))
		}
		return 0, fmt.Errorf("%s: allocate %d bytes: %w", virtualName, size, err)
	}
	v.live.insert(p, size, s, nil)
	v.usage.addUsed(size)
	v.usage.addReserved(int(n))
	v.stats.Mapped += n
	v.stats.PeakMapped = max(v.stats.PeakMapped, v.stats.Mapped)
	v.stats.Live += uint64(size)
	v.stats.PeakLive = max(v.stats.PeakLive, v.stats.Live)
	return p, nil
}

// reuseLocked hands out a pending free of exactly n bytes, still mapped,
// after making s wait for its event: stream-ordered reuse, no host wait.
func (v *Virtual) reuseLocked(n uint64, s gpu.Stream) (gpu.DevicePtr, bool, error) {
	for i, f := range v.pending {
		if f.n != n {
			continue
		}
		if err := s.WaitEvent(f.ev); err != nil {
			return 0, false, fmt.Errorf("order stream %d after a free: %w", s.ID(), err)
		}
		v.events.Put(f.ev)
		v.pending = slices.Delete(v.pending, i, i+1)
		v.stats.Pending -= n
		return v.base + gpu.DevicePtr(f.off), true, nil
	}
	return 0, false, nil
}

// createPhysical makes a physical allocation of n bytes, exportable as
// the resource's handle types.
func (v *Virtual) createPhysical(n uint64) (gpu.Physical, error) {
	if v.share != nil {
		return v.share.CreateExportablePhysical(n, v.handleTypes)
	}
	return v.vm.CreatePhysical(n)
}

// mapLocked creates n bytes of physical memory and maps them, accessible,
// at p; on error nothing is left created or mapped.
func (v *Virtual) mapLocked(p gpu.DevicePtr, n uint64) error {
	h, err := v.createPhysical(n)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := v.vm.Map(p, n, h, 0); err != nil {
		return errors.Join(fmt.Errorf("map: %w", err), v.vm.ReleasePhysical(h))
	}
	if err := v.vm.SetAccess(p, n); err != nil {
		return errors.Join(fmt.Errorf("set access: %w", err), v.vm.Unmap(p, n), v.vm.ReleasePhysical(h))
	}
	if v.share != nil {
		// Kept for Export; released after the unmap.
		if v.handles == nil {
			v.handles = make(map[uint64]gpu.Physical)
		}
		v.handles[uint64(p-v.base)] = h
		return nil
	}
	// Released now, the memory goes with the mapping.
	if err := v.vm.ReleasePhysical(h); err != nil {
		return errors.Join(fmt.Errorf("release handle: %w", err), v.vm.Unmap(p, n))
	}
	return nil
}

func (v *Virtual) oomLocked(size int, s gpu.Stream, reason string, err error) error {
	return &OutOfMemoryError{Resource: virtualName, Requested: size, Stream: s.ID(),
		Reserved: v.stats.Mapped, Used: v.stats.Live, Limit: v.size, Reason: reason, Err: err}
}

// placeLocked finds n bytes of unused range: the first hole that fits,
// else at the end.
func (v *Virtual) placeLocked(n uint64) (uint64, bool) {
	for i, h := range v.holes {
		if h.n >= n {
			if h.n == n {
				v.holes = slices.Delete(v.holes, i, i+1)
			} else {
				v.holes[i] = vspan{h.off + n, h.n - n}
			}
			return h.off, true
		}
	}
	if v.size-v.end < n {
		return 0, false
	}
	off := v.end
	v.end += n
	return off, true
}

// unplaceLocked makes [off, off+n) unused: a hole, or, at the end, a
// shorter range in use (taking the hole below with it).
func (v *Virtual) unplaceLocked(off, n uint64) {
	i, _ := slices.BinarySearchFunc(v.holes, off, func(h vspan, o uint64) int { return cmp.Compare(h.off, o) })
	v.holes = slices.Insert(v.holes, i, vspan{off, n})
	if i+1 < len(v.holes) && v.holes[i].off+v.holes[i].n == v.holes[i+1].off {
		v.holes[i].n += v.holes[i+1].n
		v.holes = slices.Delete(v.holes, i+1, i+2)
	}
	if i > 0 && v.holes[i-1].off+v.holes[i-1].n == v.holes[i].off {
		v.holes[i-1].n += v.holes[i].n
		v.holes = slices.Delete(v.holes, i, i+1)
	}
	if last := len(v.holes) - 1; last >= 0 && v.holes[last].off+v.holes[last].n == v.end {
		v.end = v.holes[last].off
		v.holes = v.holes[:last]
	}
}

// Deallocate frees p in stream order on s: it records an event on s and
// returns; the memory is unmapped once the event has completed.
func (v *Virtual) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree(virtualName, v.dev, p, size, s); null || err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("%s: deallocate on stream %d: %w", virtualName, s.ID(), ErrStreamCapturing)
	}
	if ok, err := v.deallocateGrowable(p, size, s); ok {
		return err
	}
	alloc, err := v.live.take(p, size, nil)
	if err != nil {
		return fmt.Errorf("%s: deallocate: %w", virtualName, err)
	}
	ev, err := v.events.Get()
	if err != nil {
		v.live.restore(p, size, alloc)
		return fmt.Errorf("%s: deallocate %#x: event: %w", virtualName, uint64(p), err)
	}
	if err := ev.Record(s); err != nil {
		v.events.Put(ev)
		v.live.restore(p, size, alloc)
		return fmt.Errorf("%s: deallocate %#x: record on stream %d: %w", virtualName, uint64(p), s.ID(), err)
	}
	n := (uint64(size) + v.g - 1) / v.g * v.g
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pending = append(v.pending, vfree{vspan{uint64(p - v.base), n}, ev})
	v.stats.Pending += n
	v.stats.Live -= uint64(size)
	v.usage.subUsed(size)
	// The reap is a query per pending free; an error leaves the frees
	// pending and is not this free's failure.
	_ = v.reapLocked()
	return nil
}

// reapLocked unmaps every pending free whose event has completed, without
// blocking; with wait, it waits for each event first.
func (v *Virtual) reapLocked() error { return v.reapWaitLocked(false) }

func (v *Virtual) reapWaitLocked(wait bool) error {
	return errors.Join(v.reapGrowablesLocked(wait), v.reapFreesLocked(wait))
}

// reapFreesLocked unmaps the pending frees (of plain allocations) whose
// event has completed; with wait, it waits for each event first.
func (v *Virtual) reapFreesLocked(wait bool) error {
	var errs []error
	kept := v.pending[:0]
	for _, f := range v.pending {
		var err error
		if wait {
			err = f.ev.Synchronize()
		} else {
			err = f.ev.Query()
		}
		if err == nil {
			err = v.vm.Unmap(v.base+gpu.DevicePtr(f.off), f.n)
			if err == nil {
				if h, ok := v.handles[f.off]; ok {
					delete(v.handles, f.off)
					v.forgetExportLocked(h)
					if rerr := v.vm.ReleasePhysical(h); rerr != nil {
						errs = append(errs, fmt.Errorf("%s: release the memory of [%#x, +%d): %w", virtualName, uint64(v.base)+f.off, f.n, rerr))
					}
				}
				v.events.Put(f.ev)
				v.unplaceLocked(f.off, f.n)
				v.stats.Pending -= f.n
				v.stats.Mapped -= f.n
				v.usage.subReserved(int(f.n))
				continue
			}
			errs = append(errs, fmt.Errorf("%s: unmap [%#x, +%d): %w", virtualName, uint64(v.base)+f.off, f.n, err))
		} else if !errors.Is(err, gpu.ErrNotReady) {
			errs = append(errs, fmt.Errorf("%s: free of [%#x, +%d): %w", virtualName, uint64(v.base)+f.off, f.n, err))
		}
		kept = append(kept, f)
	}
	clear(v.pending[len(kept):])
	v.pending = kept
	return errors.Join(errs...)
}

// Release unmaps every freed range whose stream has finished with it,
// without blocking: a free whose work is still running stays mapped (and
// counted) until a later call finds it complete.
func (v *Virtual) Release() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reapLocked()
}

// ReleaseContext is Release that first waits, under ctx, for the work
// before every pending free, so that all freed memory is unmapped when it
// returns nil. A wait that ends with ctx unmaps what completed and
// returns ctx's error.
func (v *Virtual) ReleaseContext(ctx context.Context) error {
	v.mu.Lock()
	evs := make([]gpu.Event, 0, len(v.pending))
	for _, f := range v.pending {
		evs = append(evs, f.ev)
	}
	evs = v.waitingEventsLocked(evs)
	v.mu.Unlock()
	// An event handed out again by reuse meanwhile may be waited on
	// needlessly, never wrongly: the wait only delays.
	var waitErr error
	for _, e := range evs {
		if waitErr = WaitEvent(ctx, e); waitErr != nil {
			break
		}
	}
	return errors.Join(waitErr, v.Release())
}

// Usage reports the physical memory mapped as Reserved and the live bytes
// as Used.
func (v *Virtual) Usage() Usage { return v.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage and Stats to the current values.
func (v *Virtual) ResetPeaks() {
	v.usage.resetPeaks()
	v.mu.Lock()
	v.stats.PeakMapped = v.stats.Mapped
	v.stats.PeakLive = v.stats.Live
	v.mu.Unlock()
}

// Stats returns the resource's counters.
func (v *Virtual) Stats() VirtualStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stats
}

// Close waits for the pending frees, unmaps them and frees the range. It
// fails (ErrInvalidValue) while allocations are still live, and then
// keeps the range (and the resource usable for their frees).
func (v *Virtual) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	if err := v.reapWaitLocked(true); err != nil {
		return fmt.Errorf("%s: close: %w", virtualName, err)
	}
	n, bytes := v.live.count()
	gn, gbytes := v.liveGrowablesLocked()
	if n, bytes := n+gn, bytes+gbytes; n > 0 {
		return fmt.Errorf("%s: close: %d allocations (%d bytes) still live: %w", virtualName, n, bytes, gpu.ErrInvalidValue)
	}
	if err := v.vm.FreeAddress(v.base, v.size); err != nil {
		return fmt.Errorf("%s: close: free the range: %w", virtualName, err)
	}
	v.closed = true
	v.stats.Reserved = 0
	// Every allocation was released, and its kept descriptor with it.
	for h := range v.exported {
		v.forgetExportLocked(h)
	}
	return v.events.Close()
}
