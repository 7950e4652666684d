// CUDA graphs in the backend interface: stream capture, graphs, executable
// graphs and graph memory.
//
// A CaptureStream can be put in capture mode: the work enqueued on it from
// then on (and on every stream that joins the capture by waiting on an
// event recorded in it) is recorded into a Graph instead of running, until
// EndCapture returns the graph. Graph.Instantiate makes a GraphExec, which
// Launch runs on any stream of the device as one unit of stream-ordered
// work, as many times as wanted. MallocAsync and FreeAsync inside a capture
// become the graph's memory nodes: the address MallocAsync returns is fixed
// for the life of the graph, and the memory is the device's graph memory
// (GraphDevice), not its pool's.
//
// The driver forbids, while a stream captures, the calls that would
// observe or wait for its work (Stream.Query and Synchronize of a capturing
// stream, Event.Query and Synchronize of an event recorded in a capture)
// and, in CaptureGlobal mode, "potentially unsafe" calls on any stream
// (Device.Malloc, Free, Synchronize, ...): they fail with an error matching
// ErrStreamCaptureUnsupported or ErrCapturedEvent and may invalidate the
// capture, which then ends with ErrStreamCaptureInvalidated. Code that must
// not disturb a capture asks CaptureID first; it costs no driver call.
//
// Capture is an optional part of the interface: both backends implement
// it, and code that wraps a Stream or Device forwards it. The functions
// BeginCapture, EndCapture, CaptureID and RelaxCapture work with any
// Stream or Device and say ErrNotSupported (or "not capturing") for one
// that does not.
package gpu

import (
	"fmt"
)

// CaptureMode says which calls a capture forbids while it runs; the values
// are cuda.h's CUstreamCaptureMode.
type CaptureMode int

// Capture modes.
const (
	// CaptureGlobal forbids potentially unsafe calls (synchronous
	// allocation and free, device synchronization, ...) on every stream,
	// by any goroutine, except inside RelaxCapture.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them on the OS thread that began the
	// capture only. Backends begin and end a capture on a thread of their
	// own, so for the goroutines of a Go program it forbids what
	// CaptureRelaxed forbids.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids only what conflicts with the capture itself.
	CaptureRelaxed CaptureMode = 2
)

// String names the mode as cuda.h does, without the prefix.
func (m CaptureMode) String() string {
	switch m {
	case CaptureGlobal:
		return "global"
	case CaptureThreadLocal:
		return "thread-local"
	case CaptureRelaxed:
		return "relaxed"
	}
	return fmt.Sprintf("CaptureMode(%d)", int(m))
}

// CaptureStatus is a stream's capture status (CUstreamCaptureStatus).
type CaptureStatus int

// Capture statuses.
const (
	CaptureNone        CaptureStatus = 0 // not capturing
	CaptureActive      CaptureStatus = 1 // capturing
	CaptureInvalidated CaptureStatus = 2 // capturing, but EndCapture will fail
)

// InstantiateFlags are flags of Graph.Instantiate (CUgraphInstantiate_flags).
type InstantiateFlags uint64

// InstantiateAutoFreeOnLaunch: a launch frees what the previous launch
// allocated and nobody freed, instead of failing.
const InstantiateAutoFreeOnLaunch InstantiateFlags = 1

// The errors of stream capture are driver statuses (errors.go:
// ErrStreamCaptureUnsupported to ErrStreamCaptureWrongThread, and
// ErrIllegalState, which BeginCapture on a stream that captures and
// EndCapture on one that does not return).

// CaptureStream is a Stream that can be captured into a graph.
type CaptureStream interface {
	Stream
	// BeginCapture puts the stream in capture mode. Beginning a capture
	// on a stream that is already part of one fails.
	BeginCapture(mode CaptureMode) error
	// EndCapture ends the capture begun on this stream and returns its
	// graph. It ends the capture for every stream that joined it. On a
	// stream that joined a capture begun elsewhere it fails with
	// ErrStreamCaptureUnmatched; with a joined stream that did not join
	// back, ErrStreamCaptureUnjoined; an invalidated capture ends with
	// ErrStreamCaptureInvalidated and no graph.
	EndCapture() (Graph, error)
	// CaptureID is the ID of the capture the stream is part of, begun on
	// it or joined through an event wait, active or invalidated, and 0
	// when it is part of none. IDs are unique in the process. It asks no
	// driver: the backend tracks captures begun and joined through this
	// interface. (A capture begun through the raw driver handle is not
	// seen; CaptureStatus asks the driver.)
	CaptureID() uint64
	// CaptureStatus asks the driver (cuStreamIsCapturing).
	CaptureStatus() (CaptureStatus, error)
}

// Graph is a captured graph (CUgraph).
type Graph interface {
	Device() Device
	// Instantiate makes an executable graph.
	Instantiate(flags InstantiateFlags) (GraphExec, error)
	// Destroy destroys the graph; executables made from it stay usable.
	Destroy() error
}

// GraphExec is an executable graph (CUgraphExec).
type GraphExec interface {
	Device() Device
	// Launch enqueues the graph on s, a stream of the same device: it runs
	// after the work enqueued on s before, and after every earlier launch
	// of this executable; work enqueued on s after waits for all of it.
	Launch(s Stream) error
	// Destroy destroys the executable; launches enqueued still run.
	Destroy() error
}

// GraphMemAttr is a CUgraphMem_attribute.
type GraphMemAttr int

// Graph memory attributes, in bytes. The current amounts are read-only;
// the high-water marks may only be set to 0, which resets them.
const (
	GraphMemUsedCurrent     GraphMemAttr = 0
	GraphMemUsedHigh        GraphMemAttr = 1
	GraphMemReservedCurrent GraphMemAttr = 2
	GraphMemReservedHigh    GraphMemAttr = 3
)

// GraphDevice is a Device with graph memory and capture modes.
type GraphDevice interface {
	Device
	// GraphMemAttribute reads a; SetGraphMemAttribute resets a high-water
	// mark (a is GraphMemUsedHigh or GraphMemReservedHigh, v is 0).
	GraphMemAttribute(a GraphMemAttr) (uint64, error)
	SetGraphMemAttribute(a GraphMemAttr, v uint64) error
	// GraphMemTrim gives graph memory that no executable graph holds
	// back to the device.
	GraphMemTrim() error
	// CaptureActive reports whether a capture begun through this interface
	// on one of the device's streams has not ended. It asks no driver.
	CaptureActive() bool
	// RelaxCapture runs fn with its driver calls exempt from what
	// CaptureGlobal captures forbid elsewhere (the calling thread's capture
	// mode set to relaxed for the duration, as cuThreadExchangeStreamCaptureMode
	// does). fn must make its calls on the calling goroutine and must not
	// touch a capturing stream in a way the capture forbids regardless.
	RelaxCapture(fn func() error) error
}

// BeginCapture puts s in capture mode; a stream that cannot be captured
// returns an error matching ErrNotSupported.
func BeginCapture(s Stream, mode CaptureMode) error {
	cs, ok := s.(CaptureStream)
	if !ok {
		return notCapturable("BeginCapture", s)
	}
	return cs.BeginCapture(mode)
}

// EndCapture ends the capture begun on s and returns its graph.
func EndCapture(s Stream) (Graph, error) {
	cs, ok := s.(CaptureStream)
	if !ok {
		return nil, notCapturable("EndCapture", s)
	}
	return cs.EndCapture()
}

// CaptureID is s's CaptureID, and 0 for a stream that cannot be captured
// (or nil). It calls no driver, so resources may call it on every request.
func CaptureID(s Stream) uint64 {
	if cs, ok := s.(CaptureStream); ok {
		return cs.CaptureID()
	}
	return 0
}

// Capturing reports whether s is part of a capture: CaptureID(s) != 0.
func Capturing(s Stream) bool { return CaptureID(s) != 0 }

// DeviceCapturing reports whether a capture of d is active (CaptureActive);
// false for a device without capture.
func DeviceCapturing(d Device) bool {
	if gd, ok := d.(GraphDevice); ok {
		return gd.CaptureActive()
	}
	return false
}

// RelaxCapture runs fn under d's RelaxCapture, or as it is on a device
// without capture.
func RelaxCapture(d Device, fn func() error) error {
	if gd, ok := d.(GraphDevice); ok {
		return gd.RelaxCapture(fn)
	}
	return fn()
}

func notCapturable(op string, s Stream) error {
	if s == nil {
		return fmt.Errorf("gpu: %s: nil stream: %w", op, ErrInvalidHandle)
	}
	return fmt.Errorf("gpu: %s: stream %T cannot be captured: %w", op, s, ErrNotSupported)
}
