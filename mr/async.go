// Async: the driver's stream-ordered allocator, cuMemAllocAsync and
// cuMemFreeAsync, on the device's default pool or on a pool of its own.
//
// The driver's pool already gives stream-ordered semantics for frees and
// allocations on one stream. What it does not do is protect a free on
// another stream: cuMemFreeAsync(p, s2) runs after the work enqueued on s2,
// but work on the allocation's stream s1 may still be using p, and the
// driver may hand p to s2's next allocation while it does. There are three
// ways to close that hole:
//
//  1. Event ordering: record an event on s1 and make s2 wait on it before
//     the free. Nothing blocks the host; the only cost is a record and a
//     wait, and only on cross-stream frees.
//  2. Trimming the pool (cuMemPoolTrimTo) after the free: it returns idle
//     memory to the OS and so relieves fragmentation, but it orders
//     nothing; s1 may still use p. Safe only once the memory is known to
//     be idle, so Async offers it as Trim and Release, never as the answer
//     to a cross-stream free.
//  3. Synchronizing the streams before the free: safe, but it blocks the
//     host and serializes the program; it belongs to shutdown and
//     debugging (Direct does it, because a synchronous free has no other
//     choice).
//
// Async uses 1, the only one that is both safe and asynchronous. Event
// ordering alone leaves the memory usable by s2 but stranded for s1,
// which is usually the stream that allocates again (a producer whose
// buffers a consumer frees). The driver will not hand it
// to s1 until s1 is ordered after the free, and prefers growing the pool to
// inserting that order itself, so the pool grows by every buffer in flight.
// Async therefore also records an event on s2 after the free and makes s1
// wait on it (the return wait): the pool's event-dependency rule then lets
// s1 reuse the memory at once. The cost is that s1's later work waits for
// s2's work enqueued before the free, a dependency the program did not ask
// for: a producer can no longer run ahead of its consumer, and a pipeline
// whose stages overlapped runs them one after the other. On a two-stage
// producer/consumer pipeline on an H100 (bench.Pipeline, 1 MiB buffers,
// 20 us per stage, 128 buffers between synchronizations; BENCHMARKS.md)
// the return wait kept the driver's pool at 32 MiB, its smallest
// reservation, where it held all 128 MiB in flight without, and took
// 45.4 us per buffer against 23.7 us. AsyncOptions.NoReturnWait chooses
// the other side; mr.Pool over Async had both (25.2 us, 8 MiB). The return wait only helps reuse; if it fails the free
// stands and the error is dropped.
//
// The events come from a per-resource cache, so a cross-stream free creates
// no event in the steady state, and a same-stream free costs nothing extra.
//
// Async remembers every pointer it handed out (a sharded table, one lock
// per shard chosen by address, never one lock for the resource) so that
// unknown pointers, double frees and wrong sizes are rejected with typed
// errors before they reach the driver, where they would be undefined
// behaviour.
//
// Frees are enqueued, so Async keeps pending-free accounting (pending.go):
// bytes live, and bytes whose free is enqueued but not known complete, per
// stream; Reap tells which frees completed (Retry uses it to wait for
// memory in flight). Its one mutex is taken once per operation, next to a
// driver call that costs a hundred times more.
//
// Invariants: a pointer is in live exactly from the MallocAsync that
// returned it until the FreeAsync that freed it was enqueued successfully;
// a Deallocate that fails leaves it live, and only a successful one moves
// its bytes from live to pending. Reserved and Used in Usage are the
// pool's own counters (on the default pool they include every other user of
// that pool in the process).

package mr

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// ReusePolicy is a set of the driver pool's reuse policies.
type ReusePolicy uint8

// The reuse policies of a driver pool (all enabled by default).
const (
	// ReuseFollowEventDependencies lets the pool reuse memory freed on
	// another stream when the allocating stream already waits on an
	// event recorded after the free.
	ReuseFollowEventDependencies ReusePolicy = 1 << iota
	// ReuseAllowOpportunistic lets the pool reuse memory whose free has
	// already completed, whatever the stream.
	ReuseAllowOpportunistic
	// ReuseAllowInternalDependencies lets the pool make the allocating
	// stream wait on a free enqueued on another stream, so that memory can
	// be reused instead of growing the pool.
	ReuseAllowInternalDependencies
)

var reuseAttrs = [...]struct {
	p ReusePolicy
	a gpu.PoolAttr
}{
	{ReuseFollowEventDependencies, gpu.PoolReuseFollowEventDependencies},
	{ReuseAllowOpportunistic, gpu.PoolReuseAllowOpportunistic},
	{ReuseAllowInternalDependencies, gpu.PoolReuseAllowInternalDependencies},
}

// AsyncOptions configure an Async resource. The zero value uses the
// device's default pool as it is.
type AsyncOptions struct {
	// OwnPool makes the resource create a pool of its own (NewMemPool),
	// destroyed by Close. Otherwise it allocates from the device's default
	// pool, which every user of cuMemAllocAsync in the process shares,
	// unless Pool or CurrentPool says otherwise.
	OwnPool bool
	// Exportable, if not gpu.HandleNone, makes the pool of its own (as
	// OwnPool) exportable to other processes as these handle types
	// (gpu.IPC.NewExportableMemPool); package ipc lends its allocations.
	// A type the device does not offer fails NewAsync with
	// gpu.ErrNotSupported; gpu.HandleFabric in a process without an IMEX
	// channel fails it with gpu.ErrNotPermitted, and no pool is made.
	Exportable gpu.HandleType
	// Pool, if not nil, is the pool to allocate from, not owned (RMM's
	// async_view): a pool of the caller's, or a CUmemoryPool of other code
	// adopted with gpu.Device.AdoptMemPool. Close leaves it alone. It must
	// be of the resource's device.
	Pool gpu.MemPool
	// ManagedPool makes the resource create a pool of managed memory of
	// its own (gpu.ManagedMemory.NewManagedPool, CUDA 13 on), destroyed by
	// Close: stream-ordered managed memory, which the host and every
	// device may address, prefetched and advised through the device's
	// gpu.ManagedMemory. A driver without managed pools fails NewAsync
	// with its error.
	ManagedPool bool
	// CurrentPool allocates from the device's current pool
	// (cuDeviceGetMemPool, read once by NewAsync), not owned: the pool
	// another library may have made current instead of the default one.
	CurrentPool bool
	// ReleaseThreshold, if not zero, is set as the pool's release
	// threshold: the reserved bytes the pool keeps across
	// synchronizations instead of returning them to the OS.
	// math.MaxUint64 keeps everything until Trim. Zero leaves the pool's
	// threshold as it is (zero for a new pool: release at every
	// synchronization).
	ReleaseThreshold uint64
	// InitialPoolSize, if not zero, grows the pool by that many bytes at
	// creation (allocated and freed at once), so that the first
	// allocations do not reach the OS. It only sticks with a release
	// threshold at least as large.
	InitialPoolSize int
	// DisableReuse turns the given reuse policies off (on the default pool
	// too, for the whole process).
	DisableReuse ReusePolicy
	// NoReturnWait drops the return wait of a cross-stream free: a free on
	// s2 of memory allocated on s1 still waits for s1's work, but s1 is
	// not then made to wait for s2. s1 keeps running ahead of s2 (a
	// producer is not held back by the consumer that frees its buffers);
	// in exchange the driver does not hand the memory back to s1 until it
	// knows the free has completed, so the pool grows by every buffer in
	// flight between synchronizations. Without it (the default), memory
	// stays minimal and s1's later work follows s2's work enqueued before
	// each free.
	NoReturnWait bool
	// Pending, if not nil, receives the resource's pending-free
	// accounting: each allocation is counted live (AddLive), and each free
	// moves its bytes to the freeing stream's pending tally (Add) once the
	// free is enqueued, so Pending.Reap tells which frees have completed
	// and Pending.Outstanding is live plus pending bytes. It must not be
	// shared with another resource. If nil, the resource keeps its own
	// (see Async.Pending and Async.Reap).
	Pending *PendingFrees
}

// asyncLive is what Async remembers of a live allocation: the stream it
// was allocated on, and the capture that allocated it (a graph allocation,
// async_capture.go) or 0.
type asyncLive struct {
	stream gpu.Stream
	graph  uint64
}

// Async is a resource over the driver's stream-ordered allocator. It is
// safe for concurrent use.
type Async struct {
	dev  gpu.Device
	pool gpu.MemPool
	own  bool
	// fromPool: allocate with MallocFromPoolAsync from pool (own, given or
	// current) rather than MallocAsync from the default pool.
	fromPool bool
	// returnWait: a cross-stream free makes the allocating stream wait on
	// the freeing one (not AsyncOptions.NoReturnWait).
	returnWait bool
	live       ptrTable[gpu.DevicePtr, asyncLive]
	events     eventCache

	// pending is the pending-free accounting: AddLive after each
	// allocation, Add on the freeing stream after each free has been
	// enqueued (pending.go's ordering rule).
	pending *PendingFrees

	closeMu       sync.RWMutex // Allocate holds it shared; Close exclusively
	closed        bool
	poolDestroyed bool

	// lastUsage holds the last value Usage read of each of its four
	// attributes, which it reports when the driver fails to read one
	// (but the used bytes, counted by the resource itself).
	lastUsage [4]atomic.Uint64
}

// NewAsync returns an Async resource on dev configured by opts. It fails
// with an error matching gpu.ErrNotSupported if the device has no memory
// pools.
func NewAsync(dev gpu.Device, opts AsyncOptions) (*Async, error) {
	if dev == nil {
		return nil, fmt.Errorf("async: nil device: %w", gpu.ErrInvalidHandle)
	}
	if !dev.Properties().MemoryPoolsSupported {
		return nil, fmt.Errorf("async: device %d has no memory pools: %w", dev.Ordinal(), gpu.ErrNotSupported)
	}
	if opts.InitialPoolSize < 0 {
		return nil, fmt.Errorf("async: initial pool size %d: %w", opts.InitialPoolSize, ErrInvalidSize)
	}
	if opts.Exportable != gpu.HandleNone {
		opts.OwnPool = true
	}
	choices := 0
	for _, c := range []bool{opts.OwnPool, opts.Pool != nil, opts.CurrentPool, opts.ManagedPool} {
		if c {
			choices++
		}
	}
	if choices > 1 {
		return nil, fmt.Errorf("async: OwnPool, Pool, CurrentPool and ManagedPool are exclusive: %w", gpu.ErrInvalidValue)
	}
	if opts.Pool != nil && opts.Pool.Device() != dev {
		// A pool with no device is a backend's nil pool (a nil
		// *cudagpu.MemPool) in a non-nil interface.
		if opts.Pool.Device() == nil {
			return nil, fmt.Errorf("async: nil pool: %w", gpu.ErrInvalidHandle)
		}
		return nil, fmt.Errorf("async: pool of device %d: %w", opts.Pool.Device().Ordinal(), gpu.ErrWrongDevice)
	}
	r := &Async{dev: dev, own: opts.OwnPool || opts.ManagedPool, fromPool: choices == 1, returnWait: !opts.NoReturnWait, events: newEventCache(dev), pending: opts.Pending}
	if r.pending == nil {
		r.pending = new(PendingFrees)
	}
	var err error
	switch {
	case opts.Exportable != gpu.HandleNone:
		var x gpu.IPC
		if x, err = gpu.IPCOf(dev); err == nil {
			r.pool, err = x.NewExportableMemPool(opts.Exportable)
		}
	case opts.OwnPool:
		r.pool, err = dev.NewMemPool()
	case opts.Pool != nil:
		r.pool = opts.Pool
	case opts.CurrentPool:
		r.pool, err = dev.CurrentMemPool()
	case opts.ManagedPool:
		var mm gpu.ManagedMemory
		if mm, err = gpu.ManagedMemoryOf(dev); err == nil {
			r.pool, err = mm.NewManagedPool()
		}
	default:
		r.pool, err = dev.DefaultMemPool()
	}
	if err != nil {
		return nil, fmt.Errorf("async: pool: %w", err)
	}
	if err := r.configure(opts); err != nil {
		if r.own {
			r.pool.Destroy()
		}
		return nil, err
	}
	return r, nil
}

func (r *Async) configure(opts AsyncOptions) error {
	if opts.ReleaseThreshold != 0 {
		if err := r.pool.SetAttribute(gpu.PoolReleaseThreshold, opts.ReleaseThreshold); err != nil {
			return fmt.Errorf("async: set release threshold: %w", err)
		}
	}
	for _, ra := range reuseAttrs {
		if opts.DisableReuse&ra.p != 0 {
			if err := r.pool.SetAttribute(ra.a, 0); err != nil {
				return fmt.Errorf("async: disable reuse policy %d: %w", ra.a, err)
			}
		}
	}
	if opts.InitialPoolSize == 0 {
		return nil
	}
	s, err := r.dev.NewStream()
	if err != nil {
		return fmt.Errorf("async: initial pool: %w", err)
	}
	defer s.Destroy()
	p, err := r.dev.MallocFromPoolAsync(opts.InitialPoolSize, r.pool, s)
	if err != nil {
		return fmt.Errorf("async: initial pool of %d bytes: %w", opts.InitialPoolSize, err)
	}
	if err := r.dev.FreeAsync(p, s); err != nil {
		s.Synchronize()
		return fmt.Errorf("async: initial pool: %w", err)
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("async: initial pool: %w", err)
	}
	return nil
}

// Allocate enqueues cuMemAllocAsync (or cuMemAllocFromPoolAsync on the
// resource's own, given or current pool) on s. It does not block the host.
func (r *Async) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("async", r.dev, size, s); zero || err != nil {
		return 0, err
	}
	r.closeMu.RLock()
	defer r.closeMu.RUnlock()
	if r.closed {
		return 0, fmt.Errorf("async: allocate: %w", ErrClosed)
	}
	var p gpu.DevicePtr
	var err error
	if r.fromPool {
		p, err = r.dev.MallocFromPoolAsync(size, r.pool, s)
	} else {
		p, err = r.dev.MallocAsync(size, s)
	}
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			u := r.Usage()
			return 0, &OutOfMemoryError{Resource: "async", Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Reason: "the driver's pool cannot grow", Err: err}
		}
		return 0, fmt.Errorf("async: allocate %d bytes: %w", size, err)
	}
	if p%Alignment != 0 {
		r.dev.FreeAsync(p, s)
		return 0, fmt.Errorf("async: allocate %d bytes: driver returned misaligned %#x: %w",
			size, uint64(p), gpu.ErrInvalidValue)
	}
	if id := gpu.CaptureID(s); id != 0 {
		r.captured(id, p, size, s)
		return p, nil
	}
	r.live.insert(p, size, asyncLive{stream: s}, nil)
	r.pending.AddLive(uint64(size))
	return p, nil
}

// Deallocate enqueues cuMemFreeAsync of p on s. If p was allocated on
// another stream, s first waits on an event recorded on that stream, so
// the memory is not reused while work enqueued there may still use it, and
// (unless NoReturnWait) that stream then waits on an event recorded on s
// after the free, so it can reuse the memory at once. It does not block
// the host (unless the allocation's stream was destroyed, in which case
// the device is synchronized: see eventCache.order).
// Deallocate keeps working after Close.
func (r *Async) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("async", r.dev, p, size, s); null || err != nil {
		return err
	}
	alloc, err := r.live.take(p, size, nil)
	if err != nil {
		return fmt.Errorf("async: deallocate: %w", err)
	}
	if id := gpu.CaptureID(s); id != 0 || alloc.graph != 0 {
		return r.deallocateCaptured(id, p, size, s, alloc)
	}
	if err := r.events.order(s, alloc.stream); err != nil {
		r.live.restore(p, size, alloc)
		return fmt.Errorf("async: deallocate %#x: %w", uint64(p), err)
	}
	if err := r.dev.FreeAsync(p, s); err != nil {
		r.live.restore(p, size, alloc)
		return fmt.Errorf("async: deallocate %#x: %w", uint64(p), err)
	}
	if r.returnWait {
		// Let the allocation's stream reuse the memory at once (see the
		// file comment); best effort, the free has been enqueued.
		r.events.order(alloc.stream, s)
	}
	// Cannot fail: this resource alone moves its bytes, each once.
	r.pending.Add(s, uint64(size))
	return nil
}

// Device is the device the memory lives on.
func (r *Async) Device() gpu.Device { return r.dev }

// Pending is the resource's pending-free accounting: opts.Pending, or one
// of its own.
func (r *Async) Pending() *PendingFrees { return r.pending }

// Reap releases from the pending-free accounting the frees known to have
// completed (PendingFrees.Reap). It makes Async a Reaper, so that Retry
// can wait for memory whose free is still in flight.
func (r *Async) Reap(wait bool) (uint64, error) { return r.pending.Reap(wait) }

// Pool is the driver pool the resource allocates from.
func (r *Async) Pool() gpu.MemPool { return r.pool }

// Attribute reads one of the pool's attributes.
func (r *Async) Attribute(a gpu.PoolAttr) (uint64, error) {
	v, err := r.pool.Attribute(a)
	if err != nil {
		return 0, fmt.Errorf("async: attribute %d: %w", a, err)
	}
	return v, nil
}

// SetAttribute sets one of the pool's attributes (a release threshold,
// a reuse policy, or 0 to reset a high-water mark).
func (r *Async) SetAttribute(a gpu.PoolAttr, v uint64) error {
	if err := r.pool.SetAttribute(a, v); err != nil {
		return fmt.Errorf("async: set attribute %d: %w", a, err)
	}
	return nil
}

// Usage reports the pool's reserved and used bytes and their high-water
// marks, read from the pool's attributes. On the default pool they count
// every user of that pool. If the driver fails to report the used bytes,
// Used is what this resource has live (its own accounting); any other
// attribute it fails to report reads as the last value read of it: a
// failed read is no reason for a monitor to see the pool empty.
func (r *Async) Usage() Usage {
	if gpu.DeviceCapturing(r.dev) {
		// Pool attributes are "potentially unsafe": a global-mode
		// capture forbids reading them except from a relaxed thread.
		var u Usage
		gpu.RelaxCapture(r.dev, func() error { u = r.usage(); return nil })
		return u
	}
	return r.usage()
}

func (r *Async) usage() Usage {
	var u Usage
	for i, f := range []struct {
		a gpu.PoolAttr
		v *uint64
	}{
		{gpu.PoolReservedMemCurrent, &u.Reserved},
		{gpu.PoolUsedMemCurrent, &u.Used},
		{gpu.PoolReservedMemHigh, &u.PeakReserved},
		{gpu.PoolUsedMemHigh, &u.PeakUsed},
	} {
		v, err := r.pool.Attribute(f.a)
		switch {
		case err != nil && f.a == gpu.PoolUsedMemCurrent:
			_, live := r.live.count()
			v = live
		case err != nil:
			v = r.lastUsage[i].Load()
		default:
			r.lastUsage[i].Store(v)
		}
		*f.v = v
	}
	return u
}

// ResetPeaks resets the pool's high-water marks to the current values.
func (r *Async) ResetPeaks() error {
	if err := r.pool.SetAttribute(gpu.PoolReservedMemHigh, 0); err != nil {
		return fmt.Errorf("async: reset peaks: %w", err)
	}
	if err := r.pool.SetAttribute(gpu.PoolUsedMemHigh, 0); err != nil {
		return fmt.Errorf("async: reset peaks: %w", err)
	}
	return nil
}

// Trim releases the pool's unused memory to the OS until it holds at most
// minBytesToKeep reserved bytes, as far as allocations (and frees not yet
// completed) allow. It does not block.
func (r *Async) Trim(minBytesToKeep uint64) error {
	if err := r.pool.TrimTo(minBytesToKeep); err != nil {
		return fmt.Errorf("async: trim to %d: %w", minBytesToKeep, err)
	}
	return nil
}

// Release trims the pool to zero: every byte no allocation uses and whose
// free has completed goes back to the OS.
func (r *Async) Release() error { return r.Trim(0) }

// Live returns the number of allocations handed out and not yet freed and
// their bytes.
func (r *Async) Live() (n int, bytes uint64) { return r.live.count() }

// Close stops the resource: later Allocates fail with ErrClosed, cached
// events are destroyed and, if the resource owns its pool, the pool is
// destroyed (the driver releases its memory once the frees already enqueued
// have completed). While allocations are live on an own pool, Close only
// stops allocation and returns an error: destroying the pool would free
// memory under the caller. Deallocate still works after Close, so free them
// and call Close again. Closing twice is harmless.
func (r *Async) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.closed = true
	if r.own && !r.poolDestroyed {
		if n, bytes := r.live.count(); n > 0 {
			return fmt.Errorf("async: close: %d allocations (%d bytes) still live", n, bytes)
		}
		if err := r.pool.Destroy(); err != nil {
			return fmt.Errorf("async: close: destroy pool: %w", err)
		}
		r.poolDestroyed = true
	}
	if err := r.events.Close(); err != nil {
		return fmt.Errorf("async: close: %w", err)
	}
	return nil
}
