// The capture gate: a process-wide count of the captures in progress, so
// that a resource can skip asking a stream whether it captures while no
// capture is in progress anywhere.
//
// Resources ask every request's stream for its capture (CaptureID): a
// request on a capturing stream must become part of the graph instead of
// being served from free lists. That is an interface assertion and a call
// per request, a few percent of a pool's allocate/free pair, for an answer
// that is almost always 0: most programs never capture, and those that do
// capture for a moment at start-up. The gate turns it into one load of a
// counter that is written only when a capture begins or ends.
//
// The gate covers the streams that say so (CaptureGated): those whose
// backend reports, with CaptureStarted and CaptureFinished, every capture
// that can make their CaptureID non-zero. Both backends' own streams do.
// A stream the program adopted from other code (a PyTorch stream wrapped
// by cudagpu) does not, unless it is the legacy default stream, which the
// driver never lets capture: its owner may begin a capture on it through
// the driver, which no backend sees, so resources must keep asking it; so
// must they ask a CaptureStream of a backend, or of a wrapper, that does
// not implement GatedCaptureStream.
//
// Invariant: for a gated stream s, CaptureID(s) != 0 implies
// CapturesActive(). A backend calls CaptureStarted before any stream can
// report the new capture and CaptureFinished after no stream reports it
// any more; the counter is sequentially consistent, so a request ordered
// after BeginCapture returned sees the gate open.

package gpu

import "sync/atomic"

// captureGate counts the captures in progress in the process, alone on its
// cache line: every request of every stream reads it.
var captureGate struct {
	_      [64]byte
	active atomic.Int64
	_      [64]byte
}

// GatedCaptureStream is a CaptureStream that may say its capture state is
// covered by the process-wide capture gate.
type GatedCaptureStream interface {
	CaptureStream
	// CaptureGated reports whether CaptureID can be non-zero only while
	// CapturesActive is true: whether the stream's backend reports every
	// capture it can be part of through CaptureStarted and
	// CaptureFinished. Its answer never changes for a stream.
	CaptureGated() bool
}

// CaptureStarted tells the gate that a capture begins. A backend calls it
// before any of its streams reports the capture through CaptureID.
func CaptureStarted() { captureGate.active.Add(1) }

// CaptureFinished tells the gate that a capture CaptureStarted counted is
// over: no stream reports it through CaptureID any more.
func CaptureFinished() { captureGate.active.Add(-1) }

// CapturesActive reports whether a capture counted by CaptureStarted has
// not finished. While it is false, a gated stream is capturing nothing.
func CapturesActive() bool { return captureGate.active.Load() != 0 }

// CaptureGated reports whether s is covered by the capture gate: whether
// CaptureID(s) is 0 whenever CapturesActive is false. True for a stream
// that cannot be captured (its CaptureID is always 0) and for a
// GatedCaptureStream that says so; false for nil and for any other
// CaptureStream.
func CaptureGated(s Stream) bool {
	switch s := s.(type) {
	case nil:
		return false
	case GatedCaptureStream:
		return s.CaptureGated()
	case CaptureStream:
		return false
	}
	return true
}
