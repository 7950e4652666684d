// Buffer: an owning handle to device memory from an mr.Resource.
//
// Invariants:
//   - cur is nil exactly when the buffer is closed; otherwise it is an
//     immutable snapshot of the live allocation (pointer, size, generation,
//     stream). It is replaced, never mutated, and only with mu held, so
//     Ptr, Size and Stream read it without the lock (and may be called from
//     inside a Use callback, which runs with mu held).
//   - The tracking state (track.go) is guarded by mu and owns every event it
//     holds; closing or resizing hands them all back to the cache.
//   - The state lives in core, which the handle points to; a cleanup
//     attached to the handle closes the core if the handle is dropped
//     while open (the safety net against leaks), and Close cancels it.
//     Nothing in core points back to the handle.
//   - A failed operation leaves the buffer as it was: the memory is still
//     owned, the generation unchanged, no event lost. Waits it enqueued
//     before failing only add order.

package buf

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// generations hands out allocation generations; 0 is never used, so a zero
// Ref matches nothing.
var generations atomic.Uint64

// ids orders buffers for locking several at once (UseAll, Copy).
var ids atomic.Uint64

// Buffer is an owning, stream-ordered handle to size bytes of device
// memory. It is safe for concurrent use by many goroutines; operations on
// one buffer are serialized. A Buffer must be made by New.
//
// Close it when done. A buffer that becomes unreachable while open is
// closed by the garbage collector as a safety net, on its stream and after
// every recorded use, like an explicit Close (errors are then dropped).
type Buffer struct {
	*core
	cleanup runtime.Cleanup
}

// core is the state of a Buffer, apart from the handle so that the
// garbage collector's cleanup can close it without keeping the handle
// alive.
type core struct {
	res       mr.Resource
	dev       gpu.Device
	obs       Observer
	events    *gpu.EventCache
	id        uint64
	untracked bool
	stack     []uintptr // the allocation's stack, for a leak report (leak.go), or nil

	cur atomic.Pointer[snapshot]

	mu    sync.Mutex
	track tracking
	// Captures whose graphs use the memory and are not released, and
	// memory the program closed that they still use (capture.go).
	graphs   []*graphUse
	deferred *snapshot
}

// snapshot is one live allocation of a buffer; never mutated.
type snapshot struct {
	ptr    gpu.DevicePtr
	size   int
	gen    uint64
	stream gpu.Stream
}

// An Option configures New.
type Option func(*options)

type options struct {
	untracked bool
	obs       Observer
}

// Untracked turns block-use tracking off: uses, copies and Close enqueue no
// waits and record no events, as with raw device pointers. The caller then
// orders streams by hand. Uses are still reported to the observer, so the
// sanitizer can check them.
func Untracked() Option { return func(o *options) { o.untracked = true } }

// WithObserver installs o as the buffer's observer, in place of one found
// on the resource.
func WithObserver(o Observer) Option { return func(o2 *options) { o2.obs = o } }

// New allocates size bytes from res, ordered on s: the memory may be used
// by work enqueued on s from now on, and by work on other streams through
// the buffer's tracking. A nil res means the current resource of s's
// device (mr.Current: the one mr.SetCurrent or streamalloc.Setup
// installed, else the device's default); with a nil stream as well there
// is no device to ask, and New returns an error matching
// gpu.ErrInvalidHandle.
func New(res mr.Resource, size int, s gpu.Stream, opts ...Option) (*Buffer, error) {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if res == nil && s != nil {
		res = mr.Current(s.Device())
	}
	if res == nil {
		return nil, fmt.Errorf("buf: new: nil resource: %w", gpu.ErrInvalidHandle)
	}
	dev := res.Device()
	if dev == nil {
		return nil, fmt.Errorf("buf: new: resource has no device: %w", gpu.ErrInvalidHandle)
	}
	if err := checkStream(dev, s); err != nil {
		return nil, fmt.Errorf("buf: new: %w", err)
	}
	if size < 0 {
		return nil, fmt.Errorf("buf: new %d bytes: %w", size, mr.ErrInvalidSize)
	}
	p, err := res.Allocate(size, s)
	if err != nil {
		return nil, fmt.Errorf("buf: new %d bytes: %w", size, err)
	}
	c := &core{
		res:       res,
		dev:       dev,
		obs:       o.obs,
		events:    cacheFor(dev),
		id:        ids.Add(1),
		untracked: o.untracked,
		stack:     leakStack(res, 2),
	}
	if c.obs == nil {
		c.obs = findObserver(res)
	}
	c.track.allocated(s)
	c.cur.Store(&snapshot{ptr: p, size: size, gen: generations.Add(1), stream: s})
	if !c.untracked && gpu.CaptureID(s) != 0 {
		if err := c.bornIn(s); err != nil {
			if ferr := res.Deallocate(p, size, s); ferr != nil {
				return nil, fmt.Errorf("buf: new %d bytes: %w (and freeing the memory: %v)", size, err, ferr)
			}
			return nil, fmt.Errorf("buf: new %d bytes: %w", size, err)
		}
	}
	b := &Buffer{core: c}
	b.cleanup = runtime.AddCleanup(b, (*core).collect, c)
	return b, nil
}

// collect closes a buffer that was dropped while open, and reports the
// leak (leak.go). It runs on the garbage collector's cleanup goroutine;
// there is no caller to give an error to, so a failed free leaves the
// memory to the resource's own accounting (it stays live there) and the
// error goes to the leak handler.
func (c *core) collect() {
	if sn := c.cur.Load(); sn != nil {
		c.reportLeak(sn, func() error { return c.closeOn(sn.stream) })
	}
}

// closeOn is CloseOn without the handle.
func (c *core) closeOn(s gpu.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	sn := c.cur.Load()
	if sn == nil {
		return ErrClosed
	}
	if err := checkStream(c.dev, s); err != nil {
		return err
	}
	if !c.untracked && (len(c.graphs) > 0 || gpu.CaptureID(s) != 0) {
		if done, err := c.closeInGraphs(sn, s); done {
			return err
		}
	}
	if err := c.waitAll(s); err != nil {
		return err
	}
	if err := c.res.Deallocate(sn.ptr, sn.size, s); err != nil {
		return err
	}
	c.track.release(c.events)
	c.cur.Store(nil)
	return nil
}

// checkStream refuses a nil stream (gpu.ErrInvalidHandle), a stream with
// no device counting as one (a backend's nil stream, such as a nil
// *cudagpu.Stream, in a non-nil interface), and a stream of another device
// (gpu.ErrWrongDevice).
func checkStream(dev gpu.Device, s gpu.Stream) error {
	if s == nil || s.Device() == nil {
		return fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle)
	}
	if s.Device() != dev {
		return fmt.Errorf("stream %d: %w", s.ID(), gpu.ErrWrongDevice)
	}
	return nil
}

// lock locks b and returns its live snapshot. gen 0 is the owner's call (a
// closed buffer is ErrClosed); any other gen is a Ref's, which must match
// the live generation (else ErrUseAfterFree). On error b is not locked.
func (b *Buffer) lock(gen uint64) (*snapshot, error) {
	if b == nil || b.core == nil {
		return nil, ErrNilBuffer
	}
	b.mu.Lock()
	sn := b.cur.Load()
	switch {
	case sn == nil && gen == 0:
		b.mu.Unlock()
		return nil, ErrClosed
	case sn == nil || (gen != 0 && sn.gen != gen):
		b.mu.Unlock()
		return nil, ErrUseAfterFree
	}
	return sn, nil
}

// isNil reports whether b has no state: a nil *Buffer, or a Buffer not
// made by New. Every operation refuses such a buffer with ErrNilBuffer.
func (b *Buffer) isNil() bool { return b == nil || b.core == nil }

// snap is the live snapshot, or nil for a nil, zero or closed buffer.
func (b *Buffer) snap() *snapshot {
	if b == nil || b.core == nil {
		return nil
	}
	return b.cur.Load()
}

// Ptr is the device address of the buffer's memory, or 0 once it is
// closed (or for a size-0 buffer). It changes on Resize.
func (b *Buffer) Ptr() gpu.DevicePtr {
	if sn := b.snap(); sn != nil {
		return sn.ptr
	}
	return 0
}

// Size is the buffer's size in bytes, or 0 once it is closed.
func (b *Buffer) Size() int {
	if sn := b.snap(); sn != nil {
		return sn.size
	}
	return 0
}

// Stream is the stream the buffer is ordered on, or nil once it is closed.
func (b *Buffer) Stream() gpu.Stream {
	if sn := b.snap(); sn != nil {
		return sn.stream
	}
	return nil
}

// Generation is the generation of the buffer's live allocation, or 0 once
// it is closed.
func (b *Buffer) Generation() uint64 {
	if sn := b.snap(); sn != nil {
		return sn.gen
	}
	return 0
}

// Device is the device the memory lives on.
func (b *Buffer) Device() gpu.Device {
	if b == nil || b.core == nil {
		return nil
	}
	return b.dev
}

// Resource is the resource the memory came from.
func (b *Buffer) Resource() mr.Resource {
	if b == nil || b.core == nil {
		return nil
	}
	return b.res
}

// Tracked reports whether block-use tracking is on (see Untracked).
func (b *Buffer) Tracked() bool { return b != nil && b.core != nil && !b.untracked }

// SetStream orders the buffer on s from now on: later copies, sets, Resize
// and Close are enqueued there. A tracked buffer makes s wait on all the
// work enqueued on the old stream so far, declared uses or not (work the
// caller enqueued there by hand on the buffer's pointer, which New allows,
// is covered too); an Untracked buffer leaves that to the caller. If the
// wait cannot be enqueued the buffer stays on the old stream. A tracked
// buffer is not moved into or out of a capture (mr.ErrStreamCapturing):
// the wait would cross the capture's boundary.
func (b *Buffer) SetStream(s gpu.Stream) error {
	sn, err := b.lock(0)
	if err != nil {
		return fmt.Errorf("buf: set stream: %w", err)
	}
	defer b.mu.Unlock()
	if err := checkStream(b.dev, s); err != nil {
		return fmt.Errorf("buf: set stream: %w", err)
	}
	if !b.untracked {
		if oc, nc := gpu.CaptureID(sn.stream), gpu.CaptureID(s); oc != nc {
			return fmt.Errorf("buf: set stream %d (capture %d) after stream %d (capture %d): %w",
				s.ID(), nc, sn.stream.ID(), oc, mr.ErrStreamCapturing)
		}
		// A lazy mark on the old stream: recorded now, it covers
		// everything enqueued there; waitOn skips it if s is the old
		// stream, and synchronizes the device if the old stream is gone.
		m := mark{s: sn.stream}
		err := b.waitOn(&m, s)
		b.events.Put(m.e)
		if err != nil {
			return fmt.Errorf("buf: set stream %d: %w", s.ID(), err)
		}
	}
	next := *sn
	next.stream = s
	b.cur.Store(&next)
	return nil
}

// Close frees the memory in stream order on the buffer's stream; see
// CloseOn.
func (b *Buffer) Close() error {
	if b == nil || b.core == nil {
		return fmt.Errorf("buf: close: %w", ErrNilBuffer)
	}
	s := b.Stream()
	if s == nil {
		return fmt.Errorf("buf: close: %w", ErrClosed)
	}
	return b.CloseOn(s)
}

// CloseOn frees the memory in stream order on s, which may be any stream of
// the buffer's device. s first waits on every recorded use of the buffer
// (the last write and every read since), so the memory goes back to the
// resource only after all work that used it. If the free fails, the buffer
// stays open and owns its memory. Memory that the graph of a capture not
// yet released uses is freed at that capture's Release instead (see
// "CUDA graphs" in the package comment).
func (b *Buffer) CloseOn(s gpu.Stream) error {
	if b == nil || b.core == nil {
		return fmt.Errorf("buf: close: %w", ErrNilBuffer)
	}
	if err := b.closeOn(s); err != nil {
		return fmt.Errorf("buf: close: %w", err)
	}
	b.cleanup.Stop()
	return nil
}

// Resize makes the buffer n bytes long, keeping the first min(n, Size())
// bytes; the rest is uninitialized. A new allocation is made on the
// buffer's stream, the bytes are copied, and the old memory is freed there
// after every recorded use. The pointer and the generation change (Refs
// taken before become stale); resizing to the same size does nothing.
// There is no hidden capacity: every change of size reallocates, so that a
// Ref taken before a resize is always stale. If any step fails the buffer
// is left as it was. A tracked buffer that a graph not yet released uses
// is not resized (ErrGraphUse), nor one whose stream captures
// (mr.ErrStreamCapturing).
func (b *Buffer) Resize(n int) error {
	sn, err := b.lock(0)
	if err != nil {
		return fmt.Errorf("buf: resize: %w", err)
	}
	defer b.mu.Unlock()
	if n < 0 {
		return fmt.Errorf("buf: resize to %d bytes: %w", n, mr.ErrInvalidSize)
	}
	if n == sn.size {
		return nil
	}
	s := sn.stream
	if !b.untracked {
		switch {
		case len(b.graphs) > 0:
			return fmt.Errorf("buf: resize to %d bytes: used by the graph of capture %d: %w", n, b.graphs[0].cu.id, ErrGraphUse)
		case gpu.CaptureID(s) != 0:
			return fmt.Errorf("buf: resize to %d bytes on stream %d: %w", n, s.ID(), mr.ErrStreamCapturing)
		}
	}
	p, err := b.res.Allocate(n, s)
	if err != nil {
		return fmt.Errorf("buf: resize to %d bytes: %w", n, err)
	}
	undo := func(err error) error {
		// p was only ever used on s, so freeing it there is ordered.
		if ferr := b.res.Deallocate(p, n, s); ferr != nil {
			return fmt.Errorf("buf: resize to %d bytes: %w (and freeing the new memory: %v)", n, err, ferr)
		}
		return fmt.Errorf("buf: resize to %d bytes: %w", n, err)
	}
	if keep := min(n, sn.size); keep > 0 {
		if err := b.prepare(s, Read, sn.ptr, keep); err != nil {
			return undo(err)
		}
		if b.obs != nil {
			if err := b.obs.ObserveUse(p, keep, s, Write); err != nil {
				return undo(err)
			}
		}
		if err := b.dev.CopyDtoDAsync(p, sn.ptr, keep, s); err != nil {
			return undo(err)
		}
		// Recorded like any read, so that if the free below fails the
		// old memory's state still knows of this use.
		b.finish(s, Read)
	}
	if err := b.waitAll(s); err != nil {
		return undo(err)
	}
	if err := b.res.Deallocate(sn.ptr, sn.size, s); err != nil {
		return undo(err)
	}
	b.track.release(b.events)
	// The new memory was allocated and written on s only: the same lazy
	// mark as a fresh allocation covers both.
	b.track.allocated(s)
	b.cur.Store(&snapshot{ptr: p, size: n, gen: generations.Add(1), stream: s})
	return nil
}
