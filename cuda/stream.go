// Streams and events.
//
// Stream and Event are the driver's handles as plain integers. The zero
// Stream is the context's legacy default stream, which the driver accepts;
// the zero Event is no event and is refused here. Handles are not checked
// against destruction: using a destroyed stream or event is undefined
// behaviour in the driver, and the layer above (gpu/cudagpu) keeps track
// so that it never happens.
//
// EventRecord, StreamWaitEvent, StreamQuery and EventQuery are hot: each is
// one cgo call and allocates nothing unless it fails.

package cuda

import "time"

// Stream is a CUstream.
type Stream uintptr

// Event is a CUevent.
type Event uintptr

// Stream and event creation flags (cuda.h).
const (
	StreamDefault     uint32 = 0
	StreamNonBlocking uint32 = 1 // CU_STREAM_NON_BLOCKING: no implicit sync with stream 0

	EventDefault       uint32 = 0
	EventBlockingSync  uint32 = 1 // CU_EVENT_BLOCKING_SYNC
	EventDisableTiming uint32 = 2 // CU_EVENT_DISABLE_TIMING
)

// StreamCreate creates a stream in c with the given flags.
func (c Context) StreamCreate(flags uint32) (Stream, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, s := rawStreamCreate(c, flags)
	if r != Success {
		return 0, &Error{Op: "cuStreamCreate", Code: r}
	}
	return Stream(s), nil
}

// StreamDestroy destroys s; work already enqueued on it still runs.
func (c Context) StreamDestroy(s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if s == 0 {
		return &Error{Op: "cuStreamDestroy", Code: ErrInvalidHandle}
	}
	return check("cuStreamDestroy", rawStreamDestroy(c, s))
}

// StreamSynchronize blocks until all work on s has completed.
func (c Context) StreamSynchronize(s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuStreamSynchronize", rawStreamSynchronize(c, s))
}

// StreamQuery returns nil if all work on s has completed and an *Error
// matching ErrNotReady if not.
func (c Context) StreamQuery(s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	switch r := rawStreamQuery(c, s); r {
	case Success:
		return nil
	case ErrNotReady:
		return errStreamNotReady
	default:
		return &Error{Op: "cuStreamQuery", Code: r}
	}
}

// The not-ready answers of the queries are the usual result of polling, not
// a failure, so they are shared values: a poll allocates nothing. Callers
// must not modify them (no caller has a reason to).
var (
	errStreamNotReady = &Error{Op: "cuStreamQuery", Code: ErrNotReady}
	errEventNotReady  = &Error{Op: "cuEventQuery", Code: ErrNotReady}
)

// StreamWaitEvent makes work enqueued on s after the call wait for e.
func (c Context) StreamWaitEvent(s Stream, e Event) error {
	if err := c.ok(); err != nil {
		return err
	}
	if e == 0 {
		return &Error{Op: "cuStreamWaitEvent", Code: ErrInvalidHandle}
	}
	if r := rawStreamWaitEvent(c, s, e); r != Success {
		return &Error{Op: "cuStreamWaitEvent", Code: r}
	}
	return nil
}

// EventCreate creates an event in c with the given flags.
func (c Context) EventCreate(flags uint32) (Event, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, e := rawEventCreate(c, flags)
	if r != Success {
		return 0, &Error{Op: "cuEventCreate", Code: r}
	}
	return Event(e), nil
}

// EventDestroy destroys e.
func (c Context) EventDestroy(e Event) error {
	if err := c.ok(); err != nil {
		return err
	}
	if e == 0 {
		return &Error{Op: "cuEventDestroy", Code: ErrInvalidHandle}
	}
	return check("cuEventDestroy", rawEventDestroy(c, e))
}

// EventRecord captures in e the work enqueued on s so far.
func (c Context) EventRecord(e Event, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if e == 0 {
		return &Error{Op: "cuEventRecord", Code: ErrInvalidHandle}
	}
	if r := rawEventRecord(c, e, s); r != Success {
		return &Error{Op: "cuEventRecord", Code: r}
	}
	return nil
}

// EventQuery returns nil if e has completed (or was never recorded) and an
// *Error matching ErrNotReady if not.
func (c Context) EventQuery(e Event) error {
	if err := c.ok(); err != nil {
		return err
	}
	if e == 0 {
		return &Error{Op: "cuEventQuery", Code: ErrInvalidHandle}
	}
	switch r := rawEventQuery(c, e); r {
	case Success:
		return nil
	case ErrNotReady:
		return errEventNotReady
	default:
		return &Error{Op: "cuEventQuery", Code: r}
	}
}

// EventSynchronize blocks until e has completed.
func (c Context) EventSynchronize(e Event) error {
	if err := c.ok(); err != nil {
		return err
	}
	if e == 0 {
		return &Error{Op: "cuEventSynchronize", Code: ErrInvalidHandle}
	}
	return check("cuEventSynchronize", rawEventSynchronize(c, e))
}

// EventElapsed is the time from start to end, both timing events that
// have completed (cuEventElapsedTime; about half a microsecond of
// resolution). An event made with EventDisableTiming, or not recorded,
// gives an *Error matching ErrInvalidHandle; one not yet completed,
// ErrNotReady.
func (c Context) EventElapsed(start, end Event) (time.Duration, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if start == 0 || end == 0 {
		return 0, &Error{Op: "cuEventElapsedTime", Code: ErrInvalidHandle}
	}
	r, ms := rawEventElapsed(c, start, end)
	if r != Success {
		return 0, &Error{Op: "cuEventElapsedTime", Code: r}
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
