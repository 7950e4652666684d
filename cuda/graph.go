// CUDA graphs: stream capture, graphs and their executables, and the
// device's graph memory.
//
// A stream in capture mode records the work enqueued on it (and on streams
// that join the capture by waiting on an event recorded in it) into a
// CUgraph instead of running it. StreamEndCapture returns the graph;
// GraphInstantiate makes an executable graph of it, which GraphLaunch runs
// on any stream of the context as one unit of stream-ordered work.
// cuMemAllocAsync and cuMemFreeAsync inside a capture become memory nodes
// of the graph, backed by the device's graph memory (DeviceGraphMemTrim and
// the GraphMem attributes), not by a memory pool.
//
// Capture modes and threads. The driver keeps a capture interaction mode
// per OS thread, and checks, for a capture begun in global or
// thread-local mode, that StreamEndCapture is called on the thread that
// began it (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD otherwise). Goroutines
// move between threads, so this package leaves the choice of thread to the
// caller: a caller that begins a non-relaxed capture must end it on the
// same OS thread (runtime.LockOSThread), and ThreadExchangeCaptureMode
// changes the mode of the calling thread only. The layer above
// (gpu/cudagpu) does both for its users.
//
// Handles are plain integers, as elsewhere in this package, and are not
// checked against destruction: the layer above keeps track.

package cuda

// Graph is a CUgraph.
type Graph uintptr

// GraphExec is a CUgraphExec, an instantiated graph.
type GraphExec uintptr

// CaptureMode is a CUstreamCaptureMode: how a capture interacts with API
// calls that are "potentially unsafe" while it runs (cuMemAlloc,
// synchronous calls, ...).
type CaptureMode int32

// Capture modes (cuda.h's values).
const (
	// CaptureModeGlobal forbids potentially unsafe calls on every thread
	// (except threads whose own mode is relaxed) while the capture runs.
	CaptureModeGlobal CaptureMode = 0
	// CaptureModeThreadLocal forbids them on the capturing thread only.
	CaptureModeThreadLocal CaptureMode = 1
	// CaptureModeRelaxed forbids nothing beyond what conflicts with the
	// capture itself (querying or synchronizing the capturing stream, a
	// captured event).
	CaptureModeRelaxed CaptureMode = 2
)

// CaptureStatus is a CUstreamCaptureStatus.
type CaptureStatus int32

// Capture statuses (cuda.h's values).
const (
	CaptureStatusNone        CaptureStatus = 0 // not capturing
	CaptureStatusActive      CaptureStatus = 1 // capturing
	CaptureStatusInvalidated CaptureStatus = 2 // capturing, but an error invalidated the capture: EndCapture will fail
)

// GraphMemAttribute is a CUgraphMem_attribute.
type GraphMemAttribute int32

// Graph memory attributes (cuda.h's values), all byte counts. The current
// amounts are read-only; the high-water marks may only be set to 0, which
// resets them.
const (
	GraphMemUsedCurrent     GraphMemAttribute = 0
	GraphMemUsedHigh        GraphMemAttribute = 1
	GraphMemReservedCurrent GraphMemAttribute = 2
	GraphMemReservedHigh    GraphMemAttribute = 3
)

// Flags of GraphInstantiate (CUgraphInstantiate_flags).
const (
	// GraphInstantiateAutoFreeOnLaunch: a launch frees the allocations a
	// previous launch made and did not free, instead of failing.
	GraphInstantiateAutoFreeOnLaunch uint64 = 1
	// GraphInstantiateUpload: upload the graph at instantiation.
	GraphInstantiateUpload uint64 = 2
)

// StreamBeginCapture puts s in capture mode. Work enqueued on s from now on
// is recorded into a graph, not run.
func (c Context) StreamBeginCapture(s Stream, mode CaptureMode) error {
	if err := c.ok(); err != nil {
		return err
	}
	if s == 0 {
		// The legacy default stream cannot be captured; say so before
		// the driver does it less clearly.
		return &Error{Op: "cuStreamBeginCapture", Code: ErrStreamCaptureUnsupported}
	}
	return check("cuStreamBeginCapture", rawStreamBeginCapture(c, s, mode))
}

// StreamEndCapture ends the capture begun on s and returns its graph. A
// capture that was invalidated ends with an error matching
// ErrStreamCaptureInvalidated and no graph.
func (c Context) StreamEndCapture(s Stream) (Graph, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, g := rawStreamEndCapture(c, s)
	if r != Success {
		if g != 0 {
			// Not expected from the driver; do not leak what it gave.
			rawGraphDestroy(c, Graph(g))
		}
		return 0, &Error{Op: "cuStreamEndCapture", Code: r}
	}
	return Graph(g), nil
}

// StreamIsCapturing returns the capture status of s.
func (c Context) StreamIsCapturing(s Stream) (CaptureStatus, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, st := rawStreamIsCapturing(c, s)
	if r != Success {
		return 0, &Error{Op: "cuStreamIsCapturing", Code: r}
	}
	return CaptureStatus(st), nil
}

// StreamCaptureInfo returns the capture status of s and the ID of its
// capture, unique over the life of the process (0 when not capturing).
func (c Context) StreamCaptureInfo(s Stream) (CaptureStatus, uint64, error) {
	if err := c.ok(); err != nil {
		return 0, 0, err
	}
	r, st, id := rawStreamGetCaptureInfo(c, s)
	if r != Success {
		return 0, 0, &Error{Op: "cuStreamGetCaptureInfo", Code: r}
	}
	if st == CaptureStatusNone {
		id = 0
	}
	return st, id, nil
}

// GraphInstantiate makes an executable graph of g (cuGraphInstantiate
// with flags, GraphInstantiateAutoFreeOnLaunch and the like).
func (c Context) GraphInstantiate(g Graph, flags uint64) (GraphExec, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, &Error{Op: "cuGraphInstantiate", Code: ErrInvalidHandle}
	}
	r, x := rawGraphInstantiate(c, g, flags)
	if r != Success {
		return 0, &Error{Op: "cuGraphInstantiate", Code: r}
	}
	return GraphExec(x), nil
}

// GraphLaunch runs x on s, ordered after the work enqueued on s before it
// and after every earlier launch of x.
func (c Context) GraphLaunch(x GraphExec, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if x == 0 {
		return &Error{Op: "cuGraphLaunch", Code: ErrInvalidHandle}
	}
	return check("cuGraphLaunch", rawGraphLaunch(c, x, s))
}

// GraphExecDestroy destroys x; launches already enqueued still run.
func (c Context) GraphExecDestroy(x GraphExec) error {
	if err := c.ok(); err != nil {
		return err
	}
	if x == 0 {
		return &Error{Op: "cuGraphExecDestroy", Code: ErrInvalidHandle}
	}
	return check("cuGraphExecDestroy", rawGraphExecDestroy(c, x))
}

// GraphDestroy destroys g. Executables made from it are unaffected.
func (c Context) GraphDestroy(g Graph) error {
	if err := c.ok(); err != nil {
		return err
	}
	if g == 0 {
		return &Error{Op: "cuGraphDestroy", Code: ErrInvalidHandle}
	}
	return check("cuGraphDestroy", rawGraphDestroy(c, g))
}

// DeviceGraphMemTrim gives the graph memory of d that no graph uses back
// to the system.
func (c Context) DeviceGraphMemTrim(d Device) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuDeviceGraphMemTrim", rawDeviceGraphMemTrim(c, d))
}

// DeviceGraphMemAttribute reads a graph memory attribute of d.
func (c Context) DeviceGraphMemAttribute(d Device, a GraphMemAttribute) (uint64, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawDeviceGetGraphMemAttribute(c, d, a)
	if r != Success {
		return 0, &Error{Op: "cuDeviceGetGraphMemAttribute", Code: r}
	}
	return v, nil
}

// DeviceSetGraphMemAttribute writes a graph memory attribute of d (only
// the high-water marks, only to 0).
func (c Context) DeviceSetGraphMemAttribute(d Device, a GraphMemAttribute, v uint64) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuDeviceSetGraphMemAttribute", rawDeviceSetGraphMemAttribute(c, d, a, v))
}

// ThreadExchangeCaptureMode sets the capture interaction mode of the
// calling OS thread and returns its previous mode. It is only meaningful
// to a goroutine locked to its thread (runtime.LockOSThread) that puts the
// previous mode back before unlocking.
func ThreadExchangeCaptureMode(mode CaptureMode) (CaptureMode, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, prev := rawThreadExchangeCaptureMode(mode)
	if r != Success {
		return 0, &Error{Op: "cuThreadExchangeStreamCaptureMode", Code: r}
	}
	return prev, nil
}
