// DriverHostPool: the driver's own stream-ordered allocator over pinned
// host memory, a memory pool located on the host (cuMemPoolCreate with a
// host location, CUDA 12.2 on), beside HostPool's cache of our own.
//
// The two differ in what an allocation promises. HostPool.Allocate hands
// out memory the host may write at once (a cached block is reused only
// once the copies before its free have completed); the driver's pool, like
// a device pool, hands out memory for work enqueued on the stream from now
// on: the host may touch it only after synchronizing with that stream
// (HostPool.AllocateOrdered's promise). A free is enqueued on its stream;
// the driver reuses the memory for the next allocation on that stream at
// once, and for another stream once that stream is ordered after the free
// (its reuse policies). The pool keeps freed memory up to its release
// threshold across synchronizations (DriverHostPoolOptions).
//
// DriverHostPool is a Resource and a HostResource (host.go): an
// allocation is the address of the driver's pinned memory, Bytes its
// []byte, and AllocateHost and FreeHost the slice API over the pool or any
// adaptor stacked on it.
//
// Bad frees are refused before the driver sees them, with the Resource
// contract's errors: an address the pool never handed out (or one inside
// an allocation) matches ErrUnknownPointer (a recent one freed already
// ErrDoubleFree); the right start with another length ErrSizeMismatch; a
// nil stream or one of another device gpu.ErrInvalidHandle or
// gpu.ErrWrongDevice. A failed free leaves the memory allocated.
//
// Invariants: every slice handed out and not freed is in live, keyed by
// its first byte's address with its length and the slice itself;
// Usage().Used is the sum of those lengths, exact on every path.

package mr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// DriverHostPoolOptions configure a DriverHostPool. The zero value is a
// pool at the host that keeps nothing across synchronizations.
type DriverHostPoolOptions struct {
	// Location is where the memory lives: gpu.HostLocation() (the zero
	// value means it too) or a host NUMA node.
	Location gpu.Location
	// ReleaseThreshold, if not zero, is the pool's release threshold:
	// the reserved bytes it keeps across synchronizations.
	// math.MaxUint64 keeps everything until Trim.
	ReleaseThreshold uint64
}

// DriverHostPool is a resource of pinned host memory over the driver's
// host-located pool. It is safe for concurrent use.
type DriverHostPool struct {
	dev   gpu.Device
	hp    gpu.HostMemPools
	pool  gpu.MemPool
	live  ptrTable[uintptr, []byte]
	usage usageMeter

	closeMu sync.RWMutex // Allocate and Free hold it shared; Close exclusively
	closed  bool
}

// NewDriverHostPool creates a host-located pool on dev's driver. A device
// without host-located pools fails with an error matching
// gpu.ErrNotSupported; a location that is not on the host with one
// matching gpu.ErrInvalidValue.
func NewDriverHostPool(dev gpu.Device, opts DriverHostPoolOptions) (*DriverHostPool, error) {
	if dev == nil {
		return nil, fmt.Errorf("driver host pool: nil device: %w", gpu.ErrInvalidHandle)
	}
	hp, err := gpu.HostMemPoolsOf(dev)
	if err != nil {
		return nil, fmt.Errorf("driver host pool: %w", err)
	}
	loc := opts.Location
	if loc == (gpu.Location{}) {
		loc = gpu.HostLocation()
	}
	pool, err := hp.NewHostMemPool(loc)
	if err != nil {
		return nil, fmt.Errorf("driver host pool: create at %v: %w", loc, err)
	}
	if opts.ReleaseThreshold != 0 {
		if err := pool.SetAttribute(gpu.PoolReleaseThreshold, opts.ReleaseThreshold); err != nil {
			pool.Destroy()
			return nil, fmt.Errorf("driver host pool: set release threshold: %w", err)
		}
	}
	return &DriverHostPool{dev: dev, hp: hp, pool: pool}, nil
}

// Device is the device whose driver holds the pool.
func (p *DriverHostPool) Device() gpu.Device { return p.dev }

// Allocate returns the address of n bytes of pinned host memory for work
// enqueued on s from now on (Bytes, or AllocateHost, gives the slice); the
// host may read or write it only after it has synchronized with s. A size
// of 0 returns the null pointer and no error; a negative one matches
// ErrInvalidSize; a nil stream or one of another device
// gpu.ErrInvalidHandle or gpu.ErrWrongDevice; a capturing stream
// ErrStreamCapturing; a closed pool ErrClosed; the driver's refusal for
// want of memory an *OutOfMemoryError.
func (p *DriverHostPool) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	b, err := p.allocateBytes(n, s)
	return hostAddr(b), err
}

func (p *DriverHostPool) allocateBytes(n int, s gpu.Stream) ([]byte, error) {
	if zero, err := checkAlloc("driver host pool", p.dev, n, s); zero || err != nil {
		return nil, err
	}
	if gpu.Capturing(s) {
		return nil, fmt.Errorf("driver host pool: allocate: stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return nil, fmt.Errorf("driver host pool: allocate: %w", ErrClosed)
	}
	b, err := p.hp.MallocHostFromPoolAsync(n, p.pool, s)
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			// Not Usage: a second read lock deadlocks with a waiting Close.
			u := p.usageLocked()
			return nil, &OutOfMemoryError{Resource: "driver host pool", Requested: n, Stream: s.ID(), Reserved: u.Reserved, Used: u.Used, Err: err}
		}
		return nil, fmt.Errorf("driver host pool: allocate %d bytes: %w", n, err)
	}
	b = b[:n:n]
	p.live.insert(uintptr(hostAddr(b)), n, b, nil)
	p.usage.addUsed(n)
	return b, nil
}

// Deallocate returns the n bytes at ptr, which Allocate returned with the
// same size, to the pool in s's order: work enqueued on s before the call
// may still use them. It never blocks the host. Deallocate(0, 0, s) does
// nothing. The errors are listed in the file comment.
func (p *DriverHostPool) Deallocate(ptr gpu.DevicePtr, n int, s gpu.Stream) error {
	if null, err := checkFree("driver host pool", p.dev, ptr, n, s); null || err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("driver host pool: deallocate: stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	_, err := p.live.take(uintptr(ptr), n, func(mem []byte) error { return p.hp.FreeHostAsync(mem, s) })
	if err != nil {
		return fmt.Errorf("driver host pool: deallocate %#x (%d bytes): %w", uint64(ptr), n, err)
	}
	p.usage.subUsed(n)
	return nil
}

// Bytes returns the size bytes at ptr, inside one live allocation of the
// pool (HostResource). The errors are HostResource.Bytes's. An address
// that is not an allocation's start is looked for among all live
// allocations, in time proportional to their number.
func (p *DriverHostPool) Bytes(ptr gpu.DevicePtr, size int) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("driver host pool: bytes at %#x: size %d: %w", uint64(ptr), size, ErrInvalidSize)
	}
	a := uintptr(ptr)
	mem, off := []byte(nil), 0
	if r, ok := p.live.lookup(a); ok {
		mem = r.v
	} else {
		p.live.each(func(base uintptr, n int, b []byte) {
			if base < a && a-base < uintptr(n) {
				mem, off = b, int(a-base)
			}
		})
	}
	if mem == nil {
		return nil, fmt.Errorf("driver host pool: bytes: %w", pointerError(ptr, ErrUnknownPointer))
	}
	if size > len(mem)-off {
		return nil, fmt.Errorf("driver host pool: bytes at %#x: %d bytes past the end of an allocation of %d: %w",
			uint64(ptr), size, len(mem), ErrInvalidSize)
	}
	if size == 0 {
		return nil, nil
	}
	return mem[off : off+size : off+size], nil
}

// Trim releases the pool's unused memory until at most keep bytes stay
// reserved (cuMemPoolTrimTo). Memory whose free has not completed stays.
func (p *DriverHostPool) Trim(keep uint64) error {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return fmt.Errorf("driver host pool: trim: %w", ErrClosed)
	}
	if err := p.pool.TrimTo(keep); err != nil {
		return fmt.Errorf("driver host pool: trim: %w", err)
	}
	return nil
}

// Attribute reads one of the driver pool's attributes (its reuse
// policies, release threshold, reserved and used bytes). A sanitizer
// stacked over the pool reads the reuse policies, as over an Async, to
// know that the driver orders reuse across streams itself.
func (p *DriverHostPool) Attribute(a gpu.PoolAttr) (uint64, error) {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return 0, fmt.Errorf("driver host pool: attribute %d: %w", a, ErrClosed)
	}
	v, err := p.pool.Attribute(a)
	if err != nil {
		return 0, fmt.Errorf("driver host pool: attribute %d: %w", a, err)
	}
	return v, nil
}

// Release gives back to the driver every byte of the pool that no
// allocation uses and whose free has completed (Trim(0)), without
// blocking the host: the Releaser every adaptor forwards.
func (p *DriverHostPool) Release() error { return p.Trim(0) }

// Usage reports the bytes handed out and not freed (Used, as asked) and
// the bytes the driver's pool holds (Reserved, and its high-water mark,
// read from the pool; 0 once closed).
func (p *DriverHostPool) Usage() Usage {
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	return p.usageLocked()
}

// usageLocked is Usage with closeMu held, shared or exclusive.
func (p *DriverHostPool) usageLocked() Usage {
	u := p.usage.snapshot()
	if p.closed {
		return u
	}
	if v, err := p.pool.Attribute(gpu.PoolReservedMemCurrent); err == nil {
		u.Reserved = v
	}
	if v, err := p.pool.Attribute(gpu.PoolReservedMemHigh); err == nil {
		u.PeakReserved = v
	}
	return u
}

// ResetPeaks lowers the peaks of Usage to the current values.
func (p *DriverHostPool) ResetPeaks() {
	p.usage.resetPeaks()
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if !p.closed {
		p.pool.SetAttribute(gpu.PoolReservedMemHigh, 0)
	}
}

// ErrInUse is the error of closing a resource whose memory is still
// allocated.
var ErrInUse = errors.New("mr: memory still allocated")

// Close destroys the pool. While slices it handed out are not freed it
// refuses with an error matching ErrInUse and changes nothing. Closing
// twice does nothing.
func (p *DriverHostPool) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	if n, bytes := p.live.count(); n > 0 {
		return fmt.Errorf("driver host pool: close: %d allocations (%d bytes) not freed: %w", n, bytes, ErrInUse)
	}
	if err := p.pool.Destroy(); err != nil {
		return fmt.Errorf("driver host pool: close: %w", err)
	}
	p.closed = true
	return nil
}
