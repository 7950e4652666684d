// Events: a marker in a stream that completes when the stream reaches it.
//
// An event points at its latest record operation (host side, under
// event.mu). Completion is the record operation's stream having reached it;
// a successful Query or Synchronize orders the host after the recorded
// work. Timing events read the time the worker reached the record.

package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

type event struct {
	dev    *Device
	timing bool
	raw    uintptr // the simulator's raw handle (foreign.go)
	// foreign: made by NewRawEvent, seen by users only through adopted
	// wrappers.
	foreign bool

	mu        sync.Mutex
	destroyed bool
	rec       *op
	capRec    *capRecord // the last record was in a capture (capture.go)

	ipc      bool   // made by NewIPCEvent (ipc.go)
	exportID uint64 // its number in the export registry, under exports.mu
}

var _ gpu.Event = (*event)(nil)

func (e *event) Device() gpu.Device { return e.dev }

// self resolves e itself for call: nil or destroyed handles are errors.
func (e *event) self(call string) error {
	if e == nil {
		return wrap(call, fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	return nil
}

func (e *event) current() *op {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec
}

// Record captures the work enqueued on s so far.
func (e *event) Record(gs gpu.Stream) error {
	const call = "cuEventRecord"
	if err := e.self(call); err != nil {
		return err
	}
	s, err := e.dev.stream(call, gs)
	if err != nil {
		return err
	}
	if err := e.dev.inject(OpEventRecord); err != nil {
		return err
	}
	if s.cs.capt.Load() != nil {
		return e.captureRecord(s, call)
	}
	o := &op{kind: opRecord, name: call}
	s.mu.Lock()
	s.enqueueLocked(o)
	s.mu.Unlock()
	e.mu.Lock()
	e.rec = o
	e.capRec = nil
	e.mu.Unlock()
	return nil
}

// recErr is the sticky error the stream had when it reached r.
func recErr(r *op) error {
	raceDisable()
	se := r.err.Load()
	raceEnable()
	if se == nil {
		return nil
	}
	return se.err
}

// waitable makes the checks of a call that waits on e's latest record
// and returns that record: nil, with the failed check's error or nil when
// e was never recorded.
func (e *event) waitable(call string, o Op) (*op, error) {
	if err := e.self(call); err != nil {
		return nil, err
	}
	if err := e.dev.inject(o); err != nil {
		return nil, err
	}
	if err := e.eventGate(call); err != nil {
		return nil, err
	}
	return e.current(), nil
}

// Query returns nil if the event completed or was never recorded.
func (e *event) Query() error {
	const call = "cuEventQuery"
	r, err := e.waitable(call, OpEventQuery)
	if r == nil {
		return err
	}
	if r.s.doneSeq() < r.seq {
		return driverErr(call, gpu.ErrNotReady)
	}
	r.s.observed(r)
	if err := recErr(r); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return nil
}

// Synchronize blocks until the event has completed.
func (e *event) Synchronize() error {
	const call = "cuEventSynchronize"
	r, err := e.waitable(call, OpEventSynchronize)
	if r == nil {
		return err
	}
	r.s.waitSeq(r.seq)
	r.s.observed(r)
	e.dev.afterSync()
	if err := recErr(r); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return nil
}

// ElapsedSince returns the time between start's completion and e's.
func (e *event) ElapsedSince(gstart gpu.Event) (time.Duration, error) {
	const call = "cuEventElapsedTime"
	if err := e.self(call); err != nil {
		return 0, err
	}
	start, err := e.dev.event(call, gstart)
	if err != nil {
		return 0, err
	}
	if err := e.dev.inject(OpEventElapsedTime); err != nil {
		return 0, err
	}
	if !e.timing || !start.timing {
		return 0, driverErrf(call, gpu.ErrInvalidHandle, "event created without timing")
	}
	r0, r1 := start.current(), e.current()
	if r0 == nil || r1 == nil {
		return 0, driverErrf(call, gpu.ErrInvalidHandle, "event never recorded")
	}
	if r0.s.doneSeq() < r0.seq || r1.s.doneSeq() < r1.seq {
		return 0, driverErr(call, gpu.ErrNotReady)
	}
	raceDisable()
	d := time.Duration(r1.at.Load() - r0.at.Load())
	raceEnable()
	return d, nil
}

// Destroy destroys the event; waits already enqueued on it still hold.
func (e *event) Destroy() error {
	const call = "cuEventDestroy"
	if err := e.self(call); err != nil {
		return err
	}
	if err := e.dev.inject(OpEventDestroy); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	e.destroyed = true
	e.dev.foreign.forgetEvent(e)
	e.unexport()
	return nil
}
