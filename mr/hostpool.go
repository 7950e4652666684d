// HostPool: a cache of page-locked host memory for staging copies, freed
// in stream order.
//
// cuMemAllocHost and cuMemFreeHost change the host's page tables and
// serialize the device: hundreds of microseconds each, far too slow for a
// buffer per copy. HostPool keeps freed blocks and hands them out again,
// so a program pays for page-locked memory once.
//
// Why host memory needs its own order. A device pool's block is touched
// only by work on streams, so a block freed on s may serve the next request
// on s at once. A staging buffer is also touched by the host: the program
// fills it before a host-to-device copy and reads it after a
// device-to-host one, and the copy engine reads or writes it whenever the
// stream reaches the copy. So a free enqueues its point in the stream: it
// records an event on s, and the block keeps it. Two ways to allocate:
//
//   - Allocate(n, s) returns memory the host may write at once: a cached
//     block is reused only if its event has completed (cuEventQuery, which
//     never blocks), that is, every copy enqueued before its free is done.
//     Otherwise the pool allocates new page-locked memory. This is the
//     Resource's Allocate (its promise is stronger than the Resource
//     contract asks), and AllocateHost's.
//   - AllocateOrdered(n, s) returns memory for work enqueued on s only,
//     like a device Resource: the host must not touch it until it has
//     synchronized with s. A block freed on s is reused at once; one freed
//     on another stream is reused after s waits on its event (cuStreamWaitEvent,
//     no host synchronization).
//
// HostPool is a Resource and a HostResource (host.go): an allocation is
// the address of its block, Bytes its []byte, and AllocateHost and
// FreeHost the slice API over the pool or any adaptor stacked on it.
//
// A free on a stream that has no work left (cuStreamQuery answers done)
// records no event: every copy enqueued before it has completed, so the
// block is ready for the host at once. That is the common case of a
// staging buffer freed after its stream was synchronized, and it keeps a
// pair of Allocate and Free from paying for an event that the device has
// not yet marked complete.
//
// Size classes. A request is rounded up to a power of two of at least
// MinHostBlock bytes, or above MaxHostPow2 to a multiple of MaxHostPow2,
// and served by a cached block of exactly that class: waste is below half
// the block for small requests and below MaxHostPow2 for large ones. A
// block is one cuMemAllocHost allocation, never split.
//
// A block used by copies on several streams: RecordStream(buf, s) adds s
// to the streams the free marks, so the block waits for all of them.
//
// Bad frees are refused before anything changes, with the Resource
// contract's errors: an address the pool never handed out matches
// ErrUnknownPointer; one inside a block but not the allocation handed out
// matches ErrSubSlice too, and also ErrUnknownPointer (another start) or
// ErrSizeMismatch (the same start, another length); a block that is
// cached matches ErrDoubleFree; a nil stream or one of another device
// gpu.ErrInvalidHandle or gpu.ErrWrongDevice.
//
// Invariants, under mu: every block the pool holds is in blocks (by
// address) and spans (by range); a block is either live (handed out, n > 0,
// not in any free list, uses the streams RecordStream named) or cached
// (in free[class], done holding an event for each stream that used it and
// had work left at the free). Usage().Used is the sum
// of the live lengths as asked, Usage().Reserved the sum of the class
// sizes of all blocks held, exact on every path: a failed call changes
// neither.

package mr

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// ErrSubSlice is the error of a HostPool's free (Deallocate, FreeHost) or
// RecordStream of memory that lies inside an allocation but is not the
// allocation; the error matches ErrUnknownPointer (another start) or
// ErrSizeMismatch (the same start, another length) as well.
var ErrSubSlice = errors.New("mr: slice is part of an allocation, not the allocation")

const (
	// MinHostBlock is the smallest block HostPool allocates: one page.
	MinHostBlock = 4 << 10
	// MaxHostPow2 is the largest power-of-two class of HostPool; larger
	// requests are rounded up to a multiple of it.
	MaxHostPow2 = 2 << 20
)

// maxHostRequest is the largest request hostClass rounds without
// overflowing; a larger one is out of memory.
const maxHostRequest = math.MaxInt - (MaxHostPow2 - 1)

// hostClass is the size of the block that serves a request of n > 0 bytes.
func hostClass(n int) int {
	if n <= MinHostBlock {
		return MinHostBlock
	}
	if n <= MaxHostPow2 {
		return 1 << bits.Len(uint(n-1))
	}
	return (n + MaxHostPow2 - 1) / MaxHostPow2 * MaxHostPow2
}

// hostBlock is one page-locked allocation the pool holds.
type hostBlock struct {
	mem []byte // the whole allocation, len and cap its class
	n   int    // length handed out; 0 while cached
	// uses are the streams other than the freeing one whose work uses the
	// block, by RecordStream, while live.
	uses []gpu.Stream
	// done are, while cached, the events recorded at the free on each
	// stream that used the block and had work left; none if no work was
	// left anywhere.
	done []hostMark
}

// hostMark is an event recorded on a stream at a block's free.
type hostMark struct {
	e gpu.Event
	s gpu.Stream
}

// HostPoolStats counts what HostPool did since it was created.
type HostPoolStats struct {
	Hits     uint64 // requests served from the cache
	Waits    uint64 // of the hits, those ordered by a stream's wait on an event (AllocateOrdered)
	Misses   uint64 // requests that allocated page-locked memory (cuMemAllocHost)
	Released uint64 // blocks given back to the driver (cuMemFreeHost)
}

// HostPool is a stream-ordered cache of page-locked host memory. It is
// safe for concurrent use by many goroutines on many streams.
type HostPool struct {
	dev    gpu.Device
	events eventCache

	mu     sync.Mutex
	blocks map[uintptr]*hostBlock
	spans  spanIndex[*hostBlock]
	free   map[int][]*hostBlock // cached blocks by class, most recent last
	stats  HostPoolStats
	usage  usageMeter
}

// NewHostPool returns an empty HostPool over dev's page-locked memory.
func NewHostPool(dev gpu.Device) *HostPool {
	return &HostPool{
		dev:    dev,
		events: newEventCache(dev),
		blocks: make(map[uintptr]*hostBlock),
		free:   make(map[int][]*hostBlock),
	}
}

// Device is the device whose context the memory is registered with.
func (p *HostPool) Device() gpu.Device { return p.dev }

// Allocate returns the address of n bytes of page-locked memory that the
// host may read and write at once (Bytes, or AllocateHost, gives the
// slice) and copies enqueued on s may use. It never blocks the host on the
// device. A size of 0 returns the null pointer and no error; a negative
// one matches ErrInvalidSize; a nil stream or one of another device
// gpu.ErrInvalidHandle or gpu.ErrWrongDevice; a stream under capture
// ErrStreamCapturing; failure to allocate, or a size no block could hold,
// is an *OutOfMemoryError.
func (p *HostPool) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	b, err := p.allocate(n, s, false)
	return hostAddr(b), err
}

// AllocateOrdered returns the address of n bytes of page-locked memory for
// work enqueued on s from now on, as a device Resource does: the memory
// may still be in use by copies enqueued before it was freed, which s is
// ordered after, so the host must not read or write it (through Bytes)
// until it has synchronized with s past the work that uses it. Free it
// with Deallocate. The errors are Allocate's.
func (p *HostPool) AllocateOrdered(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	b, err := p.allocate(n, s, true)
	return hostAddr(b), err
}

func (p *HostPool) allocateBytes(n int, s gpu.Stream) ([]byte, error) {
	return p.allocate(n, s, false)
}

func (p *HostPool) allocate(n int, s gpu.Stream, ordered bool) ([]byte, error) {
	if err := checkStream("host pool", opAllocate, p.dev, s); err != nil {
		return nil, err
	}
	if zero, err := checkAllocSize("host pool", n); zero || err != nil {
		return nil, err
	}
	if gpu.Capturing(s) {
		return nil, fmt.Errorf("host pool: allocate: stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	if n > maxHostRequest {
		u := p.usage.snapshot()
		return nil, &OutOfMemoryError{Resource: "host pool", Requested: n, Stream: s.ID(),
			Reserved: u.Reserved, Used: u.Used, Reason: "larger than any page-locked block"}
	}
	class := hostClass(n)
	p.mu.Lock()
	b, err := p.reuseLocked(class, s, ordered)
	if err != nil {
		p.mu.Unlock()
		return nil, err
	}
	if b != nil {
		b.n = n
		p.usage.addUsed(n)
		p.mu.Unlock()
		return b.mem[:n:n], nil
	}
	p.mu.Unlock()
	return p.grow(n, class, s)
}

// reuseLocked takes a cached block of class that work on s may use, or
// returns nil. A block whose free has completed serves either kind of
// request; an ordered request also takes a block freed on s, or, failing
// that, the most recently freed one after making s wait on its event.
func (p *HostPool) reuseLocked(class int, s gpu.Stream, ordered bool) (*hostBlock, error) {
	list := p.free[class]
	pick := -1
	for i, b := range list { // oldest first: the most likely to have completed
		if b.ready(s, ordered) {
			pick = i
			break
		}
	}
	if pick < 0 && ordered && len(list) > 0 {
		pick = len(list) - 1
		for _, m := range list[pick].done {
			if m.s.ID() == s.ID() {
				continue
			}
			if err := s.WaitEvent(m.e); err != nil {
				return nil, fmt.Errorf("host pool: allocate: stream %d wait on stream %d: %w", s.ID(), m.s.ID(), err)
			}
		}
		p.stats.Waits++
	}
	if pick < 0 {
		return nil, nil
	}
	b := list[pick]
	p.free[class] = append(list[:pick], list[pick+1:]...)
	p.putMarks(b)
	p.stats.Hits++
	return b, nil
}

// ready reports whether a cached block may serve a request on s without a
// wait: every mark of its free has completed, or, for an ordered request,
// every mark is on s itself.
func (b *hostBlock) ready(s gpu.Stream, ordered bool) bool {
	for _, m := range b.done {
		if ordered && m.s.ID() == s.ID() {
			continue
		}
		if m.e.Query() != nil {
			return false
		}
	}
	return true
}

// putMarks returns the events of b's free to the cache.
func (p *HostPool) putMarks(b *hostBlock) {
	for _, m := range b.done {
		p.events.Put(m.e)
	}
	b.done = nil
}

// grow allocates a new block of class for a request of n bytes. If the
// driver is out of page-locked memory, it gives back the cached blocks
// whose frees have completed and tries once more.
func (p *HostPool) grow(n, class int, s gpu.Stream) ([]byte, error) {
	mem, err := p.dev.MallocHost(class)
	if errors.Is(err, gpu.ErrOutOfMemory) {
		if _, rerr := p.release(); rerr == nil {
			mem, err = p.dev.MallocHost(class)
		}
	}
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			u := p.usage.snapshot()
			return nil, &OutOfMemoryError{Resource: "host pool", Requested: n, Stream: s.ID(), Reserved: u.Reserved, Used: u.Used, Err: err}
		}
		return nil, fmt.Errorf("host pool: allocate %d bytes: %w", class, err)
	}
	mem = mem[:class:class]
	b := &hostBlock{mem: mem, n: n}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p.mu.Lock()
	p.blocks[a] = b
	p.spans.add(gpu.DevicePtr(a), class, b)
	p.stats.Misses++
	p.usage.addReserved(class)
	p.usage.addUsed(n)
	p.mu.Unlock()
	return mem[:n:n], nil
}

// Deallocate returns the n bytes at ptr, which Allocate or
// AllocateOrdered returned with the same size, to the pool in s's order:
// copies enqueued on s before the call may still read or write them, and
// the block is reused only after them (see the file comment). It never
// blocks the host. Deallocate(0, 0, s) does nothing. The errors are listed
// in the file comment; a failed free changes nothing.
func (p *HostPool) Deallocate(ptr gpu.DevicePtr, n int, s gpu.Stream) error {
	if null, err := checkFree("host pool", p.dev, ptr, n, s); null || err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("host pool: deallocate: stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.liveLocked(uintptr(ptr), n)
	if err != nil {
		return fmt.Errorf("host pool: deallocate %#x (%d bytes): %w", uint64(ptr), n, err)
	}
	marks, err := p.mark(append(b.uses, s))
	if err != nil {
		return fmt.Errorf("host pool: deallocate %#x: %w", uint64(ptr), err)
	}
	p.usage.subUsed(b.n)
	b.n, b.done, b.uses = 0, marks, nil
	class := len(b.mem)
	p.free[class] = append(p.free[class], b)
	return nil
}

// Bytes returns the size bytes at ptr, inside one live allocation of the
// pool (HostResource). The errors are HostResource.Bytes's.
func (p *HostPool) Bytes(ptr gpu.DevicePtr, size int) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("host pool: bytes at %#x: size %d: %w", uint64(ptr), size, ErrInvalidSize)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, base, ok := p.spans.find(ptr)
	if !ok || b.n == 0 {
		return nil, fmt.Errorf("host pool: bytes: %w", pointerError(ptr, ErrUnknownPointer))
	}
	off := int(ptr - base)
	if size > b.n-off {
		return nil, fmt.Errorf("host pool: bytes at %#x: %d bytes past the end of an allocation of %d at %#x: %w",
			uint64(ptr), size, b.n, uint64(base), ErrInvalidSize)
	}
	if size == 0 {
		return nil, nil
	}
	return b.mem[off : off+size : off+size], nil
}

// mark records an event on each of streams that has work left (work that
// may still use the block being freed). On failure it records nothing.
func (p *HostPool) mark(streams []gpu.Stream) ([]hostMark, error) {
	var marks []hostMark
	fail := func(err error) ([]hostMark, error) {
		for _, m := range marks {
			p.events.Put(m.e)
		}
		return nil, err
	}
	for _, s := range streams {
		if s.Query() == nil {
			continue // idle: everything it was given has completed
		}
		e, err := p.events.Get()
		if err != nil {
			return fail(err)
		}
		if err := e.Record(s); err != nil {
			p.events.Put(e)
			return fail(fmt.Errorf("record event on stream %d: %w", s.ID(), err))
		}
		marks = append(marks, hostMark{e, s})
	}
	return marks, nil
}

// RecordStream tells the pool that work enqueued on s uses buf, a live
// slice it handed out, as well as work on the stream buf will be freed on:
// the free then marks s too, and the block is reused only after that work
// (PyTorch's record_stream). Call it for a copy on another stream than the
// freeing one, before or after enqueuing the copy and before the free. Its
// errors are Deallocate's; a failed call changes nothing.
func (p *HostPool) RecordStream(buf []byte, s gpu.Stream) error {
	if err := checkStream("host pool", "record stream", p.dev, s); err != nil {
		return err
	}
	if len(buf) == 0 {
		return nil
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.liveLocked(a, len(buf))
	if err != nil {
		return fmt.Errorf("host pool: record stream %d on %#x (%d bytes): %w", s.ID(), a, len(buf), err)
	}
	for _, u := range b.uses {
		if u.ID() == s.ID() {
			return nil
		}
	}
	b.uses = append(b.uses, s)
	return nil
}

// liveLocked finds the live block that the n bytes at a are exactly.
func (p *HostPool) liveLocked(a uintptr, n int) (*hostBlock, error) {
	ptr := gpu.DevicePtr(a)
	b, ok := p.blocks[a]
	if !ok {
		if _, _, inside := p.spans.find(ptr); inside {
			return nil, fmt.Errorf("%w: %w", ErrSubSlice, pointerError(ptr, ErrUnknownPointer))
		}
		return nil, pointerError(ptr, ErrUnknownPointer)
	}
	switch {
	case b.n == 0:
		return nil, pointerError(ptr, ErrDoubleFree)
	case b.n != n:
		return nil, fmt.Errorf("%w: %w", ErrSubSlice, sizeMismatchError(ptr, b.n, n))
	}
	return b, nil
}

// Release gives back to the driver (cuMemFreeHost) every cached block
// whose free has completed, without blocking the host (the Releaser
// every adaptor forwards, and what Retry's reclaim calls); live blocks,
// and blocks whose copies are still running, stay. ReleaseContext waits
// for those copies and gives back every cached block.
func (p *HostPool) Release() error {
	_, err := p.release()
	return err
}

// release frees the cached blocks whose frees have completed and returns
// the bytes released.
func (p *HostPool) release() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var released int
	var errs []error
	gone := make(map[gpu.DevicePtr]bool)
	for class, list := range p.free {
		keep := list[:0]
		for _, b := range list {
			if !b.completed() {
				keep = append(keep, b)
				continue
			}
			a := uintptr(unsafe.Pointer(unsafe.SliceData(b.mem)))
			if err := p.dev.FreeHost(b.mem); err != nil {
				keep = append(keep, b)
				errs = append(errs, fmt.Errorf("free %#x: %w", a, err))
				continue
			}
			p.putMarks(b)
			delete(p.blocks, a)
			gone[gpu.DevicePtr(a)] = true
			p.usage.subReserved(class)
			p.stats.Released++
			released += class
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(p.free, class)
		} else {
			p.free[class] = keep
		}
	}
	if len(gone) > 0 {
		p.spans.remove(gone)
	}
	if err := errors.Join(errs...); err != nil {
		return released, fmt.Errorf("host pool: release: %w", err)
	}
	return released, nil
}

// completed reports whether the copies before b's free have completed.
func (b *hostBlock) completed() bool {
	for _, m := range b.done {
		if m.e.Query() != nil {
			return false
		}
	}
	return true
}

// Usage reports the bytes handed out and not freed (Used, as asked) and
// the page-locked bytes the pool holds, cached or not (Reserved).
func (p *HostPool) Usage() Usage { return p.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (p *HostPool) ResetPeaks() { p.usage.resetPeaks() }

// Stats returns the pool's counters.
func (p *HostPool) Stats() HostPoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}
