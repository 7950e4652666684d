// The host side of one device arena.
//
// An Arena owns one allocation from a resource: the 32-byte header that
// kernels receive (layout.go) followed by the region they allocate from.
// Everything the host does to it is enqueued on the arena's stream, in
// stream order: the allocation and the header's initial copy (New), the
// reset of the counter (Reset), the read-back of the counter (Stats) and
// the free (Close). The host never blocks except in Stats, which must wait
// for the copy it enqueued.
//
// Invariants:
//   - a.block != 0 and the block is live in a.res until Close succeeds;
//     a failed Close leaves the arena open (and so the memory accounted for),
//     so the caller can see the error and nothing is lost silently.
//   - a.mu guards closed and the lazily made pinned buffer and event; Stats
//     holds it across its wait, so the pinned buffer is never the target of
//     two copies at once and Close never frees it under a copy.

package devarena

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Config describes an arena.
type Config struct {
	// Size is the region's size in bytes: 1 to MaxSize.
	Size int
	// Align is the alignment of every device-side allocation: a power of
	// two from MinAlign to MaxAlign, or 0 for DefaultAlign. Requests are
	// rounded up to it, so it is also the smallest allocation.
	Align int
}

// check validates c and returns its alignment with the default applied.
func (c Config) check(op string) (align int, err error) {
	if c.Size <= 0 || c.Size > MaxSize {
		return 0, fmt.Errorf("%s: region size %d (want 1 to %d): %w", op, c.Size, MaxSize, ErrInvalidSize)
	}
	align = c.Align
	if align == 0 {
		align = DefaultAlign
	}
	if align < MinAlign || align > MaxAlign || align&(align-1) != 0 {
		return 0, fmt.Errorf("%s: alignment %d (want a power of two from %d to %d): %w",
			op, c.Align, MinAlign, MaxAlign, ErrInvalidAlign)
	}
	return align, nil
}

// Arena is a region of device memory that kernels allocate from by an
// atomic add on a counter in device memory (sa_arena_alloc in
// sa_arena.cuh). Its methods are safe for concurrent use.
//
// The arena belongs to one stream. Reset, Stats and Close are ordered on
// that stream only: a kernel that uses the arena on another stream must be
// ordered before them (and after New) by an event, or Reset may zero the
// counter while that kernel allocates, and Close may free the region under
// it.
type Arena struct {
	res   mr.Resource
	dev   gpu.Device
	s     gpu.Stream
	block gpu.DevicePtr // the allocation: header at its start
	total int           // its size, as passed to Allocate
	base  gpu.DevicePtr // the region
	size  int
	align int

	mu     sync.Mutex
	closed bool
	pinned []byte    // HeaderSize bytes of page-locked memory for Stats, made on first use
	done   gpu.Event // recorded after Stats' copy, made on first use
}

// Stats is what an epoch of kernels did to an arena.
type Stats struct {
	// HighWater is the bytes of the region claimed since creation or the
	// last Reset, at most Size. While Overflow is false it is exactly the
	// sum of the served requests, each rounded up to the alignment. A
	// request that fails on the counter itself (others got there first)
	// leaves its add there, claiming the rest of the region, so once
	// Overflow is true HighWater lies between the served bytes and Size:
	// Size if the counter ran past the end, the served bytes if every
	// failure was refused before the add (a request larger than the region,
	// or one made after the counter had visibly passed the end).
	HighWater int
	// Overflow reports whether any request since creation or the last
	// Reset failed because it did not fit.
	Overflow bool
}

// New allocates an arena with a region of cfg.Size bytes from res, in
// stream order on s, and enqueues the initialisation of its header there.
// Kernels enqueued on s after New returns may use it.
func New(res mr.Resource, s gpu.Stream, cfg Config) (*Arena, error) {
	const op = "devarena: new"
	align, err := cfg.check(op)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("%s: nil resource: %w", op, gpu.ErrInvalidHandle)
	}
	dev := res.Device()
	if s == nil || s.Device() == nil { // no device: a backend's nil stream
		return nil, fmt.Errorf("%s: nil stream: %w", op, gpu.ErrInvalidHandle)
	}
	if s.Device() != dev {
		return nil, fmt.Errorf("%s: stream %d: %w", op, s.ID(), gpu.ErrWrongDevice)
	}
	total := blockBytes(cfg.Size, align)
	p, err := res.Allocate(total, s)
	if err != nil {
		return nil, fmt.Errorf("%s: allocate %d bytes: %w", op, total, err)
	}
	if p == 0 || p%mr.Alignment != 0 {
		// A resource that breaks its contract: the counter would not be
		// aligned for the device's atomics.
		err := fmt.Errorf("%s: resource returned %#x, not %d-aligned: %w", op, p, mr.Alignment, gpu.ErrInvalidValue)
		return nil, errors.Join(err, freeBlock(res, p, total, s))
	}
	base := regionBase(p, align)
	h := header{base: base, size: uint64(cfg.Size), align: uint32(align)}
	if err := dev.CopyHtoDAsync(p, h.encode(), s); err != nil {
		err = fmt.Errorf("%s: initialise header: %w", op, err)
		return nil, errors.Join(err, freeBlock(res, p, total, s))
	}
	return &Arena{res: res, dev: dev, s: s, block: p, total: total, base: base, size: cfg.Size, align: align}, nil
}

func freeBlock(res mr.Resource, p gpu.DevicePtr, total int, s gpu.Stream) error {
	if p == 0 {
		return nil
	}
	if err := res.Deallocate(p, total, s); err != nil {
		return fmt.Errorf("devarena: free %d bytes at %#x: %w", total, p, err)
	}
	return nil
}

// Header is the device address of the arena's struct sa_arena: the pointer
// kernels pass to sa_arena_alloc. It stays valid until Close.
func (a *Arena) Header() gpu.DevicePtr { return a.block }

// Base is the device address of the region; every device-side allocation
// lies in [Base, Base+Size).
func (a *Arena) Base() gpu.DevicePtr { return a.base }

// Size is the region's size in bytes.
func (a *Arena) Size() int { return a.size }

// Align is the alignment of device-side allocations.
func (a *Arena) Align() int { return a.align }

// Stream is the stream the arena's host operations are ordered on.
func (a *Arena) Stream() gpu.Stream { return a.s }

// Device is the device the region lives on.
func (a *Arena) Device() gpu.Device { return a.dev }

// Reset enqueues on the arena's stream the zeroing of the counter and the
// overflow flag, so that kernels enqueued after it start a new epoch with
// the whole region free. Allocations of the previous epoch must no longer
// be used by then. Only the arena's stream orders the reset: kernels of
// other streams still using the arena must be ordered before it by an
// event.
func (a *Arena) Reset() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("devarena: reset: %w", ErrClosed)
	}
	if err := a.dev.MemsetD8Async(a.block+OffOffset, 0, epochBytes, a.s); err != nil {
		return fmt.Errorf("devarena: reset: %w", err)
	}
	return nil
}

// Stats enqueues on the arena's stream a copy of the counter and flag to
// page-locked host memory and waits for it: it returns what the kernels
// enqueued on the stream before the call did.
func (a *Arena) Stats() (Stats, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Stats{}, fmt.Errorf("devarena: stats: %w", ErrClosed)
	}
	if a.pinned == nil {
		b, err := a.dev.MallocHost(HeaderSize)
		if err != nil {
			return Stats{}, fmt.Errorf("devarena: stats: pinned buffer: %w", err)
		}
		a.pinned = b
	}
	if a.done == nil {
		e, err := a.dev.NewEvent(false)
		if err != nil {
			return Stats{}, fmt.Errorf("devarena: stats: event: %w", err)
		}
		a.done = e
	}
	buf := a.pinned[:epochBytes]
	if err := a.dev.CopyDtoHAsync(buf, a.block+OffOffset, a.s); err != nil {
		return Stats{}, fmt.Errorf("devarena: stats: copy: %w", err)
	}
	if err := a.done.Record(a.s); err != nil {
		return Stats{}, fmt.Errorf("devarena: stats: record: %w", err)
	}
	if err := a.done.Synchronize(); err != nil {
		return Stats{}, fmt.Errorf("devarena: stats: wait: %w", err)
	}
	e := decodeEpoch(buf)
	return statsOf(e, a.size), nil
}

// statsOf interprets the device's counter and flag for a region of size
// bytes: the counter passes size only through a failed request, and then
// the region counts as full.
func statsOf(e epoch, size int) Stats {
	hw := size
	if e.offset < uint64(size) {
		hw = int(e.offset)
	}
	return Stats{HighWater: hw, Overflow: e.overflow != 0}
}

// Close frees the header and region in stream order on the arena's stream,
// and the host-side buffer Stats used. Work enqueued on the stream before
// Close may still use the arena. After a successful Close every method
// returns an error matching ErrClosed. If the free fails, the arena stays
// open (its memory still held and accounted for) and Close may be retried.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("devarena: close: %w", ErrClosed)
	}
	if err := freeBlock(a.res, a.block, a.total, a.s); err != nil {
		return fmt.Errorf("devarena: close: %w", err)
	}
	a.closed = true
	var errs []error
	if a.pinned != nil {
		// No copy targets it: Stats waited for its copy under a.mu.
		if err := a.dev.FreeHost(a.pinned); err != nil {
			errs = append(errs, fmt.Errorf("devarena: close: free pinned buffer: %w", err))
		}
		a.pinned = nil
	}
	if a.done != nil {
		if err := a.done.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("devarena: close: destroy event: %w", err))
		}
		a.done = nil
	}
	return errors.Join(errs...)
}

// Closed reports whether Close has succeeded.
func (a *Arena) Closed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}
