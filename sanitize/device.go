// Device: an instrumented gpu.Device.
//
// Streams and events made through it are wrappers that tell the sanitizer
// of every record, wait and host synchronization (including a Query that
// reports completion), and unwrap themselves before reaching the real
// device. The driver's stream-ordered allocations and frees are modelled
// (driverpool.go). Everything else passes through: other memory
// operations, launches and pools are the real device's. Code built on the wrapped device (a pool,
// a buffer, a caller's own kernels) thereby has its orderings seen without
// knowing about the sanitizer.
//
// Handles keep their identity: a wrapper's ID is its stream's, and the
// sanitizer keys events by the real event, so an ordering observed both
// here and through buf.Observer counts once. The real handles are for the
// simulator's test hooks (Hold, HappensBefore), which want the real stream:
// see Unwrap.

package sanitize

import (
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// Device is an instrumented gpu.Device. Its methods are the real device's,
// with handles unwrapped.
type Device struct {
	gpu.Device
	z *Sanitizer
	// views maps real streams and events to their instrumented wrappers,
	// so that adopting a handle twice gives one wrapper (foreign.go).
	views sync.Map
}

// Device returns the instrumented view of dev (the same one for every call
// with the same dev).
func (z *Sanitizer) Device(dev gpu.Device) *Device {
	if d, ok := dev.(*Device); ok && d.z == z {
		return d
	}
	z.devMu.Lock()
	defer z.devMu.Unlock()
	if d, ok := z.devices[dev]; ok {
		return d
	}
	d := &Device{Device: dev, z: z}
	z.devices[dev] = d
	return d
}

// Unwrap returns the real device, stream or event behind an instrumented
// one, and anything else as it is.
func Unwrap[H any](h H) H {
	switch v := any(h).(type) {
	case *Device:
		return any(v.Device).(H)
	case *stream:
		return any(v.Stream).(H)
	case *event:
		return any(v.Event).(H)
	}
	return h
}

func unwrapStream(s gpu.Stream) gpu.Stream {
	if w, ok := s.(*stream); ok {
		return w.Stream
	}
	return s
}

func unwrapEvent(e gpu.Event) gpu.Event {
	if w, ok := e.(*event); ok {
		return w.Event
	}
	return e
}

type stream struct {
	gpu.Stream
	d *Device
}

type event struct {
	gpu.Event
	d *Device
}

// NewStream creates an instrumented stream.
func (d *Device) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	if err != nil {
		return nil, err
	}
	return d.streamView(s), nil
}

// NewEvent creates an instrumented event.
func (d *Device) NewEvent(timing bool) (gpu.Event, error) {
	e, err := d.Device.NewEvent(timing)
	if err != nil {
		return nil, err
	}
	return d.eventView(e), nil
}

// Synchronize synchronizes the device and tells the sanitizer.
func (d *Device) Synchronize() error {
	if err := d.Device.Synchronize(); err != nil {
		return err
	}
	d.z.hostSawDevice(d.Device)
	return nil
}

// MemsetD8Async passes through with the stream unwrapped.
func (d *Device) MemsetD8Async(p gpu.DevicePtr, v byte, n int, s gpu.Stream) error {
	return d.Device.MemsetD8Async(p, v, n, unwrapStream(s))
}

// CopyHtoDAsync passes through with the stream unwrapped.
func (d *Device) CopyHtoDAsync(dst gpu.DevicePtr, src []byte, s gpu.Stream) error {
	return d.Device.CopyHtoDAsync(dst, src, unwrapStream(s))
}

// CopyDtoHAsync passes through with the stream unwrapped.
func (d *Device) CopyDtoHAsync(dst []byte, src gpu.DevicePtr, s gpu.Stream) error {
	return d.Device.CopyDtoHAsync(dst, src, unwrapStream(s))
}

// CopyDtoDAsync passes through with the stream unwrapped.
func (d *Device) CopyDtoDAsync(dst, src gpu.DevicePtr, n int, s gpu.Stream) error {
	return d.Device.CopyDtoDAsync(dst, src, n, unwrapStream(s))
}

// Launch passes through with the stream unwrapped.
func (d *Device) Launch(f gpu.Function, grid, block gpu.Dim3, sharedMem int, s gpu.Stream, args ...any) error {
	return d.Device.Launch(f, grid, block, sharedMem, unwrapStream(s), args...)
}

// Device is the instrumented device.
func (s *stream) Device() gpu.Device { return s.d }

// Synchronize synchronizes the stream and tells the sanitizer.
func (s *stream) Synchronize() error {
	if err := s.Stream.Synchronize(); err != nil {
		return err
	}
	s.d.z.hostSawStream(s)
	return nil
}

// Query tells the sanitizer when it reports completion.
func (s *stream) Query() error {
	if err := s.Stream.Query(); err != nil {
		return err
	}
	s.d.z.hostSawStream(s)
	return nil
}

// WaitEvent waits on the real event and records the ordering.
func (s *stream) WaitEvent(e gpu.Event) error {
	raw := unwrapEvent(e)
	if err := s.Stream.WaitEvent(raw); err != nil {
		return err
	}
	s.d.z.wait(s, raw)
	return nil
}

// Device is the instrumented device.
func (e *event) Device() gpu.Device { return e.d }

// Record records the real event on the real stream and remembers what it
// captures.
func (e *event) Record(s gpu.Stream) error {
	if err := e.Event.Record(unwrapStream(s)); err != nil {
		return err
	}
	e.d.z.record(e.Event, s)
	return nil
}

// Query tells the sanitizer when it reports completion.
func (e *event) Query() error {
	if err := e.Event.Query(); err != nil {
		return err
	}
	e.d.z.hostSawEvent(e.Event)
	return nil
}

// Synchronize synchronizes the event and tells the sanitizer.
func (e *event) Synchronize() error {
	if err := e.Event.Synchronize(); err != nil {
		return err
	}
	e.d.z.hostSawEvent(e.Event)
	return nil
}

// ElapsedSince passes through with start unwrapped.
func (e *event) ElapsedSince(start gpu.Event) (time.Duration, error) {
	return e.Event.ElapsedSince(unwrapEvent(start))
}

// Destroy destroys the real event and forgets its clock.
func (e *event) Destroy() error {
	err := e.Event.Destroy()
	e.d.z.forget(e.Event)
	e.d.views.CompareAndDelete(e.Event, e)
	return err
}
