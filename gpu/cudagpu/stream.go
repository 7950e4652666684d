// Streams and events.
//
// Streams are created non-blocking (CU_STREAM_NON_BLOCKING), so they never
// synchronize implicitly with the legacy default stream, which nothing in
// streamalloc uses. Each gets its ID from gpu.NewStreamID, the counter all
// backends share, so IDs are never reused in the process. Events are
// created without timing unless asked, which makes them cheaper to record
// and wait on.

package cudagpu

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// Stream is the CUDA implementation of gpu.Stream.
type Stream struct {
	dev  *Device
	h    cuda.Stream
	id   uint64
	dead atomic.Bool
	capt atomic.Pointer[capture] // the capture the stream is part of (capture.go)
	// borrowed: adopted, not ours to destroy (foreign.go); tid: the OS
	// thread of an adopted per-thread default stream, else 0.
	borrowed bool
	tid      int
}

// NewStream creates a non-blocking stream.
func (d *Device) NewStream() (gpu.Stream, error) {
	h, err := d.ctx.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, err
	}
	s := &Stream{dev: d, h: h, id: gpu.NewStreamID()}
	d.foreign.addStream(s)
	return s, nil
}

// Handle is the driver's CUstream, for code that calls package cuda
// directly; it is invalid once the stream is destroyed.
func (s *Stream) Handle() cuda.Stream { return s.h }

// ID is unique among the streams of the process and never zero; 0 for a
// nil *Stream.
func (s *Stream) ID() uint64 {
	if s == nil {
		return 0
	}
	return s.id
}

// Device is the device the stream was created on; nil for a nil *Stream,
// which every resource then refuses as a nil stream
// (gpu.ErrInvalidHandle).
func (s *Stream) Device() gpu.Device {
	if s == nil {
		return nil
	}
	return s.dev
}

func (s *Stream) live(op string) error {
	if s == nil {
		return fmt.Errorf("cudagpu: %s: nil stream: %w", op, gpu.ErrInvalidHandle)
	}
	if s.dead.Load() {
		return fmt.Errorf("cudagpu: %s: stream %d: %w", op, s.id, gpu.ErrDestroyed)
	}
	if s.tid != 0 {
		return s.onThread(op)
	}
	return nil
}

// Synchronize is cuStreamSynchronize.
func (s *Stream) Synchronize() error {
	if err := s.live("Stream.Synchronize"); err != nil {
		return err
	}
	return s.dev.ctx.StreamSynchronize(s.h)
}

// Query is cuStreamQuery: nil when idle, ErrNotReady while work remains.
func (s *Stream) Query() error {
	if err := s.live("Stream.Query"); err != nil {
		return err
	}
	return s.dev.ctx.StreamQuery(s.h)
}

// WaitEvent is cuStreamWaitEvent. The event must be of the same device.
func (s *Stream) WaitEvent(e gpu.Event) error {
	if err := s.live("Stream.WaitEvent"); err != nil {
		return err
	}
	ce, err := s.dev.event("Stream.WaitEvent", e)
	if err != nil {
		return err
	}
	if err := s.dev.ctx.StreamWaitEvent(s.h, ce.h); err != nil {
		return err
	}
	s.joinCapture(ce)
	return nil
}

// Destroy is cuStreamDestroy; work already enqueued still runs. A second
// Destroy returns ErrDestroyed. On an adopted stream it only forgets the
// wrapper: the stream stays its owner's (foreign.go).
func (s *Stream) Destroy() error {
	if s == nil {
		return fmt.Errorf("cudagpu: Stream.Destroy: nil stream: %w", gpu.ErrInvalidHandle)
	}
	if !s.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: Stream.Destroy: stream %d: %w", s.id, gpu.ErrDestroyed)
	}
	s.dev.foreign.dropStream(s)
	if s.borrowed {
		return nil
	}
	return s.dev.ctx.StreamDestroy(s.h)
}

// String is "cuda:N/stream:ID".
func (s *Stream) String() string { return fmt.Sprintf("%v/stream:%d", s.dev, s.id) }

// Event is the CUDA implementation of gpu.Event.
type Event struct {
	dev      *Device
	h        cuda.Event
	timing   bool
	dead     atomic.Bool
	capt     atomic.Pointer[capture] // the capture of the stream it was last recorded on (capture.go)
	borrowed bool                    // adopted, not ours to destroy (foreign.go)
	ipc      bool                    // made by NewIPCEvent or ImportEvent (ipc.go)
	imported bool                    // opened by ImportEvent: not to be recorded
}

// NewEvent creates an event; only timing events can measure time.
func (d *Device) NewEvent(timing bool) (gpu.Event, error) {
	flags := cuda.EventDisableTiming
	if timing {
		flags = cuda.EventDefault
	}
	h, err := d.ctx.EventCreate(flags)
	if err != nil {
		return nil, err
	}
	e := &Event{dev: d, h: h, timing: timing}
	d.foreign.addEvent(e)
	return e, nil
}

// Handle is the driver's CUevent.
func (e *Event) Handle() cuda.Event { return e.h }

// Device is the device the event was created on; nil for a nil *Event.
func (e *Event) Device() gpu.Device {
	if e == nil {
		return nil
	}
	return e.dev
}

func (e *Event) live(op string) error {
	if e == nil {
		return fmt.Errorf("cudagpu: %s: nil event: %w", op, gpu.ErrInvalidHandle)
	}
	if e.dead.Load() {
		return fmt.Errorf("cudagpu: %s: event: %w", op, gpu.ErrDestroyed)
	}
	return nil
}

// Record is cuEventRecord on s, a stream of the same device.
func (e *Event) Record(s gpu.Stream) error {
	if err := e.live("Event.Record"); err != nil {
		return err
	}
	cs, err := e.dev.stream("Event.Record", s)
	if err != nil {
		return err
	}
	if e.imported {
		return fmt.Errorf("cudagpu: Event.Record: an event imported from another process: %w", gpu.ErrNotSupported)
	}
	if err := e.dev.ctx.EventRecord(e.h, cs.h); err != nil {
		return err
	}
	e.capt.Store(cs.capt.Load())
	return nil
}

// Query is cuEventQuery: nil when completed or never recorded,
// ErrNotReady otherwise.
func (e *Event) Query() error {
	if err := e.live("Event.Query"); err != nil {
		return err
	}
	return e.dev.ctx.EventQuery(e.h)
}

// Synchronize is cuEventSynchronize.
func (e *Event) Synchronize() error {
	if err := e.live("Event.Synchronize"); err != nil {
		return err
	}
	return e.dev.ctx.EventSynchronize(e.h)
}

// ElapsedSince is cuEventElapsedTime(start, e). Both must be timing events
// of this device; the driver answers ErrInvalidHandle for one that is not
// timing or was never recorded, and ErrNotReady for one not yet complete.
func (e *Event) ElapsedSince(start gpu.Event) (time.Duration, error) {
	if err := e.live("Event.ElapsedSince"); err != nil {
		return 0, err
	}
	cs, err := e.dev.event("Event.ElapsedSince", start)
	if err != nil {
		return 0, err
	}
	return e.dev.ctx.EventElapsed(cs.h, e.h)
}

// Destroy is cuEventDestroy. A second Destroy returns ErrDestroyed. On an
// adopted event it only forgets the wrapper (foreign.go).
func (e *Event) Destroy() error {
	if e == nil {
		return fmt.Errorf("cudagpu: Event.Destroy: nil event: %w", gpu.ErrInvalidHandle)
	}
	if !e.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: Event.Destroy: %w", gpu.ErrDestroyed)
	}
	e.dev.foreign.dropEvent(e)
	if e.borrowed {
		return nil
	}
	return e.dev.ctx.EventDestroy(e.h)
}
