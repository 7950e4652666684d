// Direct: every Allocate is a cuMemAlloc and every Deallocate a cuMemFree.
//
// It caches nothing, so each pair costs two driver calls (80-170 µs on an
// H100), but every allocation is exactly one driver allocation: the
// resource to run under compute-sanitizer or the stream-order sanitizer,
// which then see every out-of-bounds access and every use after free.
//
// cuMemFree is synchronous with respect to the device, while Deallocate is
// stream-ordered: the caller may free memory that work already enqueued on
// s (or on the allocation's stream) is still using. Direct resolves that
// the only way a synchronous free can: Deallocate(p, n, s) first
// synchronizes s, and the allocation's stream too when it is another one,
// then frees. It therefore blocks the host until that work is done; this
// is the documented exception to the package's "never blocks" rule.
//
// Invariants: a pointer is in live exactly while it is allocated by the
// driver on this resource's behalf; usage counts the requested bytes of
// the pointers in live (Reserved == Used, since nothing is cached). A free
// that fails (synchronization or cuMemFree) leaves the pointer live and
// the counters unchanged, so the caller can retry.

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// Direct is a resource that allocates with cuMemAlloc and frees with
// cuMemFree. It is safe for concurrent use.
type Direct struct {
	core syncCore
}

// NewDirect returns a Direct resource on dev.
func NewDirect(dev gpu.Device) *Direct {
	return &Direct{core: syncCore{name: "direct", dev: dev}}
}

// Allocate returns size bytes from cuMemAlloc. It blocks the host for as
// long as the driver call takes; the memory is usable on every stream.
func (d *Direct) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return d.core.allocate(size, s)
}

// Deallocate synchronizes s (and the allocation's stream, if another),
// then frees p with cuMemFree. It blocks the host until the work that may
// use p has completed.
func (d *Direct) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	return d.core.deallocate(p, size, s)
}

// Device is the device the memory lives on.
func (d *Direct) Device() gpu.Device { return d.core.dev }

// Usage reports the bytes allocated and not yet freed; Reserved equals
// Used since Direct caches nothing.
func (d *Direct) Usage() Usage { return d.core.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (d *Direct) ResetPeaks() { d.core.usage.resetPeaks() }

// syncCore is the shared body of Direct and Managed: a synchronous
// allocator with a synchronous free, made stream-safe by synchronizing.
type syncCore struct {
	name    string
	dev     gpu.Device
	managed bool // cuMemAllocManaged instead of cuMemAlloc
	live    ptrTable[gpu.DevicePtr, gpu.Stream]
	usage   usageMeter
	// spans, for managed memory only, finds the allocation holding an
	// address (Managed.Prefetch and Advise take interior ranges).
	spans spanIndex[int]
}

func (c *syncCore) allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc(c.name, c.dev, size, s); zero || err != nil {
		return 0, err
	}
	if gpu.Capturing(s) {
		return 0, fmt.Errorf("%s: allocate on stream %d: %w", c.name, s.ID(), ErrStreamCapturing)
	}
	var p gpu.DevicePtr
	var err error
	if c.managed {
		// The driver oversubscribes managed memory: on an H100,
		// cuMemAllocManaged(64 TiB) succeeds, and touching such an
		// allocation can hang the GPU. One request is therefore
		// limited to the device's memory.
		if total := c.dev.Properties().TotalMemory; uint64(size) > total {
			u := c.usage.snapshot()
			return 0, &OutOfMemoryError{Resource: c.name, Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Limit: total, Reason: "larger than the device's memory"}
		}
		p, err = c.dev.MallocManaged(size)
	} else {
		p, err = c.dev.Malloc(size)
	}
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			u := c.usage.snapshot()
			return 0, &OutOfMemoryError{Resource: c.name, Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Reason: "the device is out of memory", Err: err}
		}
		return 0, fmt.Errorf("%s: allocate %d bytes: %w", c.name, size, err)
	}
	if p%Alignment != 0 {
		// The driver promises 256; refuse rather than break the
		// contract silently.
		c.dev.Free(p)
		return 0, fmt.Errorf("%s: allocate %d bytes: driver returned misaligned %#x: %w",
			c.name, size, uint64(p), gpu.ErrInvalidValue)
	}
	c.live.insert(p, size, s, nil)
	if c.managed {
		c.spans.add(p, size, size)
	}
	c.usage.addUsed(size)
	c.usage.addReserved(size)
	return p, nil
}

func (c *syncCore) deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree(c.name, c.dev, p, size, s); null || err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("%s: deallocate on stream %d: %w", c.name, s.ID(), ErrStreamCapturing)
	}
	alloc, err := c.live.take(p, size, nil)
	if err != nil {
		return fmt.Errorf("%s: deallocate: %w", c.name, err)
	}
	if gpu.Capturing(alloc) {
		c.live.restore(p, size, alloc)
		return fmt.Errorf("%s: deallocate %#x: its allocation stream %d: %w", c.name, uint64(p), alloc.ID(), ErrStreamCapturing)
	}
	if err := c.quiesce(alloc, s); err != nil {
		c.live.restore(p, size, alloc)
		return fmt.Errorf("%s: deallocate %#x: %w", c.name, uint64(p), err)
	}
	if err := c.dev.Free(p); err != nil {
		c.live.restore(p, size, alloc)
		return fmt.Errorf("%s: deallocate %#x: %w", c.name, uint64(p), err)
	}
	if c.managed {
		c.spans.remove(map[gpu.DevicePtr]bool{p: true})
	}
	c.usage.subUsed(size)
	c.usage.subReserved(size)
	return nil
}

// quiesce blocks until the work enqueued so far on the freeing stream and
// on the allocation's stream has completed. A destroyed allocation stream
// cannot be synchronized any more; the device is, instead.
func (c *syncCore) quiesce(alloc, free gpu.Stream) error {
	if err := free.Synchronize(); err != nil {
		return fmt.Errorf("synchronize stream %d: %w", free.ID(), err)
	}
	if alloc.ID() == free.ID() {
		return nil
	}
	err := alloc.Synchronize()
	if errors.Is(err, gpu.ErrDestroyed) {
		err = synchronizeDevice(c.dev)
	}
	if err != nil {
		return fmt.Errorf("synchronize allocation stream %d: %w", alloc.ID(), err)
	}
	return nil
}
