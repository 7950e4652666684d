// Stream capture: work enqueued on a capturing stream is recorded into a
// graph, not run; the calls the driver forbids meanwhile fail as they do on
// the card.
//
// A capture begins on one stream (its origin) and spreads to every stream
// that waits on an event recorded in it; those streams are its members,
// each a lane of the graph. A captured operation becomes a node that
// depends on its stream's capture tail (the nodes the next operation
// depends on), and becomes the tail. Recording an event in a capture keeps
// the tail in the event; a wait on it adds that tail to the waiter's. No
// operation is enqueued and nothing runs while a stream captures.
//
// The rules, as measured on an H100 (driver 580) by the conformance suite
// (gpu/gputest's capture rules), where "refused" means the call fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture:
//
//   - querying or synchronizing a capturing stream, or the device, is
//     refused in every mode; so is querying or synchronizing an event last
//     recorded in a capture (CUDA_ERROR_CAPTURED_EVENT), and a capturing
//     stream waiting on an event recorded outside it
//     (CUDA_ERROR_STREAM_CAPTURE_ISOLATION) or in another capture
//     (CUDA_ERROR_STREAM_CAPTURE_MERGE, both captures invalidated);
//   - while a global-mode capture runs, every "potentially unsafe" call
//     is refused, on any stream, unless made inside RelaxCapture: stream
//     and event queries and synchronization, cuMemAlloc, cuMemFree,
//     managed and page-locked host memory, cuMemAllocAsync and
//     cuMemFreeAsync on streams that do not capture, a pool's attributes
//     and trimming; asynchronous work on other streams, events, stream
//     creation, loading a module and MemGetInfo are allowed. Thread-local mode
//     refuses them on the capturing thread only, which never runs a call
//     of the program (the backends capture on a thread of their own), so
//     it behaves like relaxed mode;
//   - operations enqueued on an invalidated capture fail with
//     CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so does EndCapture, which
//     ends it without a graph;
//   - mistakes that do not touch the captured work fail and leave the
//     capture alone: beginning a capture on a stream that captures and
//     ending one on a stream that does not (CUDA_ERROR_ILLEGAL_STATE), and
//     freeing inside the capture memory allocated outside it
//     (CUDA_ERROR_INVALID_VALUE);
//   - EndCapture on a member that joined (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
//     invalidates the capture; on the origin with a member whose work the
//     origin's tail does not depend on, it ends the capture without a
//     graph (CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
//   - an event recorded in a capture that has ended cannot be queried or
//     waited on (CUDA_ERROR_INVALID_VALUE) until it is recorded again.
//
// The backend decides too: a copy between a capturing stream and host
// memory that MallocHost did not return is refused (matching
// gpu.ErrStreamCaptureUnsupported) without invalidating the capture,
// because the graph would keep the Go pointer (gpu/cudagpu does the same);
// Hold on a capturing stream holds nothing; launching a graph on a
// capturing stream (a child graph on the card) is gpu.ErrNotSupported.
//
// Locks: all capture state (a capture's fields, a stream's capture tail,
// an event's captured record) is guarded by Backend.capMu, taken after
// Device.mu and stream.mu. A stream's capture pointer is also an atomic,
// so that CaptureID and the enqueue paths read it without the lock.

package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.GatedCaptureStream = (*stream)(nil)
	_ gpu.GraphDevice        = (*Device)(nil)
)

// captureIDs numbers captures; IDs are unique in the process.
var captureIDs atomic.Uint64

// capture is one capture in progress.
type capture struct {
	id     uint64
	mode   gpu.CaptureMode
	dev    *Device
	origin *stream

	// Guarded by Backend.capMu.
	lanes   []*stream // members, the origin first; a node's lane indexes it
	nodes   []*gnode  // in capture order, which is a topological order
	allocs  []*graphAlloc
	invalid error // why the capture was invalidated, or nil
	ended   bool
}

// capState is a stream's part in a capture.
type capState struct {
	capt atomic.Pointer[capture] // written under Backend.capMu
	tail []*gnode                // guarded by Backend.capMu
	lane int
}

// capRecord is an event's record in a capture: the tail it captured.
type capRecord struct {
	c    *capture
	tail []*gnode
}

// captureState is what the Backend keeps of captures.
type captureState struct {
	capMu   sync.Mutex
	active  map[*capture]struct{} // not ended; guarded by capMu
	global  atomic.Int32          // active captures in global mode
	relaxed atomic.Int32          // goroutines inside RelaxCapture
}

func (c *capture) String() string { return fmt.Sprintf("capture %d", c.id) }

// invalidateLocked invalidates c (once) for why.
func (c *capture) invalidateLocked(why error) {
	if c.invalid == nil && !c.ended {
		c.invalid = why
	}
}

// endLocked ends c for all its members. Device.mu and capMu are held.
func (c *capture) endLocked() {
	if c.ended {
		return
	}
	c.ended = true
	b := c.dev.b
	delete(b.active, c)
	c.dev.captures.Add(-1)
	if c.mode == gpu.CaptureGlobal {
		b.global.Add(-1)
	}
	for _, s := range c.lanes {
		s.cs.capt.CompareAndSwap(c, nil)
		s.cs.tail = nil
		s.cs.lane = 0
	}
	gpu.CaptureFinished() // after no stream reports it (gpu/capturegate.go)
}

// forbidden is the error of a call refused by a capture.
func forbidden(call string, c *capture) error {
	return driverErrf(call, gpu.ErrStreamCaptureUnsupported, "not permitted while %v captures", c)
}

// unsafeCall is the check of a "potentially unsafe" call: while a
// global-mode capture runs and the caller is not inside RelaxCapture, it
// invalidates every global-mode capture and refuses the call.
func (d *Device) unsafeCall(call string) error {
	b := d.b
	if b.global.Load() == 0 || b.relaxed.Load() > 0 {
		return nil
	}
	b.capMu.Lock()
	defer b.capMu.Unlock()
	var first *capture
	for c := range b.active {
		if c.mode == gpu.CaptureGlobal {
			if first == nil {
				first = c
			}
			c.invalidateLocked(fmt.Errorf("%s was called during the capture", call))
		}
	}
	if first == nil {
		return nil
	}
	return forbidden(call, first)
}

// streamGate is the check of Query and Synchronize of s.
func (s *stream) streamGate(call string) error {
	if c := s.cs.capt.Load(); c != nil {
		b := s.dev.b
		b.capMu.Lock()
		defer b.capMu.Unlock()
		if c := s.cs.capt.Load(); c != nil {
			c.invalidateLocked(fmt.Errorf("%s of a capturing stream", call))
			return forbidden(call, c)
		}
	}
	return s.dev.unsafeCall(call)
}

// deviceGate is the check of Device.Synchronize: refused while any capture
// of the device runs, in any mode.
func (d *Device) deviceGate(call string) error {
	b := d.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	var first *capture
	for c := range b.active {
		if c.dev == d {
			if first == nil {
				first = c
			}
			c.invalidateLocked(fmt.Errorf("%s during the capture", call))
		}
	}
	if first != nil {
		return forbidden(call, first)
	}
	return nil
}

// eventGate is the check of Query and Synchronize of e.
func (e *event) eventGate(call string) error {
	b := e.dev.b
	b.capMu.Lock()
	r := e.capRec
	if r != nil {
		defer b.capMu.Unlock()
		if r.c.ended {
			return driverErrf(call, gpu.ErrInvalidValue, "the event was recorded in %v, which has ended", r.c)
		}
		r.c.invalidateLocked(fmt.Errorf("%s of an event recorded in the capture", call))
		return driverErrf(call, gpu.ErrCapturedEvent, "the event was recorded in %v", r.c)
	}
	b.capMu.Unlock()
	return e.dev.unsafeCall(call)
}

// captureLiveLocked returns the error of an operation enqueued on a
// capturing stream whose capture was invalidated.
func (c *capture) liveLocked(call string) error {
	if c.invalid != nil {
		return driverErrf(call, gpu.ErrStreamCaptureInvalidated, "%v was invalidated: %v", c, c.invalid)
	}
	return nil
}

// addNodeLocked appends a node captured on s and makes it s's tail.
func (s *stream) addNodeLocked(c *capture, n *gnode) {
	n.lane = s.cs.lane
	n.deps = s.cs.tail
	n.index = len(c.nodes)
	c.nodes = append(c.nodes, n)
	s.cs.tail = []*gnode{n}
}

// captureOp records the operation o enqueued on capturing stream s.
// host is the host memory a copy reads or writes (nil for others).
func (s *stream) captureOp(o *op, host []byte) error {
	if host != nil && !s.dev.isHostMemory(host) {
		return fmt.Errorf("sim: %s: a copy with Go memory cannot be captured (the graph would keep a pointer into the Go heap; copy through MallocHost memory): %w",
			o.name, &gpu.Error{Op: o.name, Code: gpu.ErrStreamCaptureUnsupported})
	}
	b := s.dev.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	if c == nil {
		return fmt.Errorf("sim: %s: the capture ended while the call was made: %w", o.name, gpu.ErrInvalidValue)
	}
	if err := c.liveLocked(o.name); err != nil {
		return err
	}
	n := &gnode{kind: o.kind, name: o.name, dst: o.dst, src: o.src, n: o.n, val: o.val, host: o.host, launch: o.launch}
	if host != nil {
		n.host = host // the graph reads and writes the caller's memory on every launch
	}
	s.addNodeLocked(c, n)
	return nil
}

// captureRecord records e in the capture of s.
func (e *event) captureRecord(s *stream, call string) error {
	b := s.dev.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	if c == nil {
		return fmt.Errorf("sim: %s: the capture ended while the call was made: %w", call, gpu.ErrInvalidValue)
	}
	if err := c.liveLocked(call); err != nil {
		return err
	}
	e.mu.Lock()
	e.capRec = &capRecord{c: c, tail: s.cs.tail}
	e.rec = nil
	e.mu.Unlock()
	return nil
}

// captureWait handles a wait that involves a capture: s captures, or e
// was recorded in one. done is false when neither is the case.
func (s *stream) captureWait(e *event, call string) (done bool, err error) {
	b := s.dev.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	sc := s.cs.capt.Load()
	e.mu.Lock()
	r, rec := e.capRec, e.rec
	e.mu.Unlock()
	switch {
	case r != nil && r.c.ended:
		return true, driverErrf(call, gpu.ErrInvalidValue, "the event was recorded in %v, which has ended", r.c)
	case r != nil && sc == nil:
		// s joins the capture.
		if err := r.c.liveLocked(call); err != nil {
			return true, err
		}
		s.cs.lane = len(r.c.lanes)
		r.c.lanes = append(r.c.lanes, s)
		s.cs.tail = r.tail
		s.cs.capt.Store(r.c)
		return true, nil
	case r != nil && sc == r.c:
		if err := sc.liveLocked(call); err != nil {
			return true, err
		}
		s.cs.tail = unionNodes(s.cs.tail, r.tail)
		return true, nil
	case r != nil:
		sc.invalidateLocked(fmt.Errorf("%s would merge it with %v", call, r.c))
		r.c.invalidateLocked(fmt.Errorf("%s would merge it with %v", call, sc))
		return true, driverErrf(call, gpu.ErrStreamCaptureMerge, "%v and %v", sc, r.c)
	case sc == nil:
		return false, nil
	case rec == nil:
		return true, sc.liveLocked(call) // never recorded: nothing to wait for
	default:
		sc.invalidateLocked(fmt.Errorf("%s on an event recorded outside the capture", call))
		return true, driverErrf(call, gpu.ErrStreamCaptureIsolation, "the event was recorded outside %v", sc)
	}
}

// unionNodes is a ∪ b, keeping a's order.
func unionNodes(a, b []*gnode) []*gnode {
	out := append([]*gnode(nil), a...)
next:
	for _, n := range b {
		for _, m := range out {
			if m == n {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// BeginCapture puts s in capture mode.
func (s *stream) BeginCapture(mode gpu.CaptureMode) error {
	const call = "cuStreamBeginCapture"
	if s == nil {
		return wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return wrap(call, gpu.ErrDestroyed)
	}
	if mode < gpu.CaptureGlobal || mode > gpu.CaptureRelaxed {
		return driverErrf(call, gpu.ErrInvalidValue, "capture mode %d", int(mode))
	}
	b := s.dev.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	if c := s.cs.capt.Load(); c != nil {
		return driverErrf(call, gpu.ErrIllegalState, "the stream is already part of %v", c)
	}
	c := &capture{id: captureIDs.Add(1), mode: mode, dev: s.dev, origin: s, lanes: []*stream{s}}
	b.active[c] = struct{}{}
	s.dev.captures.Add(1)
	if mode == gpu.CaptureGlobal {
		b.global.Add(1)
	}
	gpu.CaptureStarted() // before any stream reports it (gpu/capturegate.go)
	s.cs.tail, s.cs.lane = nil, 0
	s.cs.capt.Store(c)
	return nil
}

// EndCapture ends the capture begun on s and returns its graph.
func (s *stream) EndCapture() (gpu.Graph, error) {
	const call = "cuStreamEndCapture"
	if s == nil {
		return nil, wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return nil, wrap(call, gpu.ErrDestroyed)
	}
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	switch {
	case c == nil:
		return nil, driverErrf(call, gpu.ErrIllegalState, "the stream does not capture")
	case c.origin != s:
		c.invalidateLocked(fmt.Errorf("%s on a stream that joined it", call))
		return nil, driverErrf(call, gpu.ErrStreamCaptureUnmatched, "%v began on another stream", c)
	}
	var lane *stream
	if c.invalid == nil {
		lane = c.unjoined()
	}
	c.endLocked()
	if c.invalid != nil {
		d.dropAllocsLocked(c.allocs, nil)
		return nil, driverErrf(call, gpu.ErrStreamCaptureInvalidated, "%v was invalidated: %v", c, c.invalid)
	}
	if lane != nil {
		d.dropAllocsLocked(c.allocs, nil)
		return nil, driverErrf(call, gpu.ErrStreamCaptureUnjoined, "the work captured on %v was not joined back into the origin", lane)
	}
	return newGraph(c), nil
}

// unjoined returns a member whose capture tail the origin's tail does not
// depend on, or nil.
func (c *capture) unjoined() *stream {
	seen := make(map[*gnode]bool)
	var walk func(n *gnode)
	walk = func(n *gnode) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, m := range n.deps {
			walk(m)
		}
	}
	for _, n := range c.origin.cs.tail {
		walk(n)
	}
	// A lane's nodes are each ordered after the one before, so the
	// origin depends on all of them if it depends on the last.
	last := make(map[int]*gnode)
	for _, n := range c.nodes {
		last[n.lane] = n
	}
	for lane, n := range last {
		if lane != 0 && !seen[n] {
			return c.lanes[lane]
		}
	}
	return nil
}

// CaptureGated is true: every capture a simulated stream can be part of
// begins and ends here, and is counted by the process-wide capture gate.
func (s *stream) CaptureGated() bool { return true }

// CaptureID is the ID of the capture s is part of, or 0.
func (s *stream) CaptureID() uint64 {
	if c := s.cs.capt.Load(); c != nil {
		return c.id
	}
	return 0
}

// CaptureStatus reports whether s captures, and whether its capture was
// invalidated.
func (s *stream) CaptureStatus() (gpu.CaptureStatus, error) {
	const call = "cuStreamIsCapturing"
	if s == nil {
		return 0, wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return 0, wrap(call, gpu.ErrDestroyed)
	}
	if err := s.dev.inject(OpStreamIsCapturing); err != nil {
		return 0, err
	}
	b := s.dev.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	switch {
	case c == nil:
		return gpu.CaptureNone, nil
	case c.invalid != nil:
		return gpu.CaptureInvalidated, nil
	}
	return gpu.CaptureActive, nil
}

// CaptureActive reports whether a capture of the device has not ended.
func (d *Device) CaptureActive() bool { return d.captures.Load() > 0 }

// RelaxCapture runs fn with global-mode captures forbidding nothing. The
// simulator does not tell goroutines apart: while fn runs, calls of every
// goroutine are exempt (the card exempts the calling thread only).
func (d *Device) RelaxCapture(fn func() error) error {
	d.b.relaxed.Add(1)
	defer d.b.relaxed.Add(-1)
	return fn()
}

// isHostMemory reports whether b lies inside one live MallocHost
// allocation.
func (d *Device) isHostMemory(b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	d.mu.Lock()
	defer d.mu.Unlock()
	for first, n := range d.hostAllocs {
		start := uintptr(unsafe.Pointer(first))
		if start <= lo && hi <= start+uintptr(n) {
			return true
		}
	}
	return false
}
