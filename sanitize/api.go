// Methods for code that enqueues work through raw handles, outside buffers
// and outside an instrumented Device: it tells the sanitizer what it did.
// Each performs the operation and, if it succeeded, records it; handles
// made by an instrumented Device record themselves, so passing them here
// is harmless and counts once.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
)

// Use declares a use of n bytes at p with access a, about to be enqueued
// on s, and checks it. It returns the report when the sanitizer refuses
// reported operations; the caller should then not enqueue the use.
func (z *Sanitizer) Use(p gpu.DevicePtr, n int, s gpu.Stream, a buf.Access) error {
	if s == nil {
		return fmt.Errorf("sanitize: use: nil stream: %w", gpu.ErrInvalidHandle)
	}
	if a != buf.Read && a != buf.Write && a != buf.ReadWrite {
		return fmt.Errorf("sanitize: use: %v: %w", a, buf.ErrAccess)
	}
	if n < 0 {
		return fmt.Errorf("sanitize: use of %d bytes: %w", n, gpu.ErrInvalidValue)
	}
	return z.observeUse(p, n, s, a, 1)
}

func (z *Sanitizer) observeUse(p gpu.DevicePtr, n int, s gpu.Stream, a buf.Access, skip int) error {
	var st stack
	capture(&st, skip+1, z.depth)
	if gpu.CaptureID(s) != 0 {
		// Work in a capture runs at each launch of its graph (graph.go).
		if handled, err := z.captureUse(p, n, s, a, &st); handled {
			return err
		}
	}
	return z.use(p, n, s, a, &st)
}

// Synchronize synchronizes s and records that the host saw its work
// complete.
func (z *Sanitizer) Synchronize(s gpu.Stream) error {
	if s == nil {
		return fmt.Errorf("sanitize: synchronize: nil stream: %w", gpu.ErrInvalidHandle)
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if _, ok := s.(*stream); !ok {
		z.hostSawStream(s)
	}
	return nil
}

// SynchronizeEvent synchronizes e and records that the host saw it
// complete.
func (z *Sanitizer) SynchronizeEvent(e gpu.Event) error {
	if e == nil {
		return fmt.Errorf("sanitize: synchronize event: nil event: %w", gpu.ErrInvalidHandle)
	}
	if err := e.Synchronize(); err != nil {
		return err
	}
	if _, ok := e.(*event); !ok {
		z.hostSawEvent(e)
	}
	return nil
}

// SynchronizeDevice synchronizes dev and records that the host saw all its
// work complete.
func (z *Sanitizer) SynchronizeDevice(dev gpu.Device) error {
	if dev == nil {
		return fmt.Errorf("sanitize: synchronize device: nil device: %w", gpu.ErrInvalidHandle)
	}
	if err := dev.Synchronize(); err != nil {
		return err
	}
	if _, ok := dev.(*Device); !ok {
		z.hostSawDevice(dev)
	}
	return nil
}

// RecordEvent records e on s and remembers what it captures.
func (z *Sanitizer) RecordEvent(e gpu.Event, s gpu.Stream) error {
	if e == nil || s == nil {
		return fmt.Errorf("sanitize: record event: nil handle: %w", gpu.ErrInvalidHandle)
	}
	if err := e.Record(s); err != nil {
		return err
	}
	if _, ok := e.(*event); !ok {
		z.record(e, s)
	}
	return nil
}

// WaitEvent makes s wait on e and records the ordering.
func (z *Sanitizer) WaitEvent(s gpu.Stream, e gpu.Event) error {
	if e == nil || s == nil {
		return fmt.Errorf("sanitize: wait event: nil handle: %w", gpu.ErrInvalidHandle)
	}
	if err := s.WaitEvent(e); err != nil {
		return err
	}
	if _, ok := e.(*event); !ok {
		z.wait(s, e)
	}
	return nil
}
