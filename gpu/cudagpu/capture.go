// Stream capture, graphs and graph memory on the real driver.
//
// Capture state is tracked in Go, so that CaptureID, which resources call
// on every request, costs an atomic load and no cgo call. A capture begun
// with BeginCapture is a *capture shared by every stream that is part of
// it: the stream it began on, and each stream that joined it by waiting on
// an event recorded in it (Event.Record remembers the capture of the
// stream it recorded on; Stream.WaitEvent joins the waiter). After
// cuStreamEndCapture the driver is asked whether the stream still
// captures, and when it does not, the capture is over for every member.
// What goes around this package (cuStreamBeginCapture on a raw handle, a
// wait enqueued through the raw handles) is not seen on our own streams:
// CaptureStatus asks the driver. Adopted streams, whose owner may capture
// them, ask the driver in CaptureID too, except the legacy default stream
// (0 or CU_STREAM_LEGACY): the driver refuses to begin a capture on it
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and no capture can join it, so it
// never captures, and PyTorch's allocations, made on it unless a program
// picks another stream, pay no query.
//
// Threads. The driver requires a capture begun in global or thread-local
// mode to be ended on the OS thread that began it, and goroutines move
// between threads. Such a capture therefore begins and ends on an OS
// thread of its own: a goroutine locked to its thread that runs the two
// calls and exits (destroying the thread) when the capture is over. Any
// goroutine may end the capture. A consequence: in thread-local mode the
// capturing thread makes no other call, so no call of the program's
// goroutines is forbidden by it, as in relaxed mode. Relaxed captures need
// no thread of their own.
//
// Copies with Go memory are refused on a capturing stream: the driver
// would record the Go pointer in the graph and read or write it on every
// replay, long after the call that borrowed it returned, and the garbage
// collector may have reused the memory by then. Copies with MallocHost
// memory, which the device owns, are captured.
//
// RelaxCapture locks the calling goroutine to its thread, sets the
// thread's capture mode to relaxed (cuThreadExchangeStreamCaptureMode),
// runs fn, and puts the mode back.

package cudagpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.GatedCaptureStream = (*Stream)(nil)
	_ gpu.GraphDevice        = (*Device)(nil)
	_ gpu.Graph              = (*Graph)(nil)
	_ gpu.GraphExec          = (*GraphExec)(nil)
)

// capture is one capture in progress, shared by its member streams.
type capture struct {
	id     uint64 // the driver's capture ID
	mode   gpu.CaptureMode
	origin *Stream
	thread *osThread // nil for relaxed captures

	mu      sync.Mutex
	members []*Stream // streams that joined, the origin excluded
	ended   bool
}

// osThread runs functions on one locked OS thread until stopped.
type osThread struct{ work chan func() }

func startOSThread() *osThread {
	t := &osThread{work: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range t.work {
			f()
		}
		// Returning while locked ends the thread, and with it whatever
		// per-thread state the driver kept for it.
	}()
	return t
}

func (t *osThread) do(f func()) {
	if t == nil {
		f()
		return
	}
	done := make(chan struct{})
	t.work <- func() { defer close(done); f() }
	<-done
}

func (t *osThread) stop() {
	if t != nil {
		close(t.work)
	}
}

// BeginCapture is cuStreamBeginCapture.
func (s *Stream) BeginCapture(mode gpu.CaptureMode) error {
	if err := s.live("Stream.BeginCapture"); err != nil {
		return err
	}
	if mode < gpu.CaptureGlobal || mode > gpu.CaptureRelaxed {
		return fmt.Errorf("cudagpu: Stream.BeginCapture: mode %d: %w", int(mode), gpu.ErrInvalidValue)
	}
	var t *osThread
	if mode != gpu.CaptureRelaxed {
		t = startOSThread()
	}
	var err error
	t.do(func() { err = s.dev.ctx.StreamBeginCapture(s.h, cuda.CaptureMode(mode)) })
	if err != nil {
		t.stop()
		return err
	}
	_, id, err := s.dev.ctx.StreamCaptureInfo(s.h)
	if err != nil {
		// The capture began; end it so that the stream is usable.
		t.do(func() {
			if g, err := s.dev.ctx.StreamEndCapture(s.h); err == nil {
				s.dev.ctx.GraphDestroy(g)
			}
		})
		t.stop()
		return err
	}
	s.dev.captures.Add(1)
	gpu.CaptureStarted() // before any stream reports it (capturegate.go)
	s.capt.Store(&capture{id: id, mode: mode, origin: s, thread: t})
	return nil
}

// EndCapture is cuStreamEndCapture, on the thread that began the capture.
func (s *Stream) EndCapture() (gpu.Graph, error) {
	if err := s.live("Stream.EndCapture"); err != nil {
		return nil, err
	}
	c := s.capt.Load()
	var t *osThread
	if c != nil {
		t = c.thread
	}
	var g cuda.Graph
	var err error
	t.do(func() { g, err = s.dev.ctx.StreamEndCapture(s.h) })
	if c != nil && c.origin == s {
		if st, qerr := s.dev.ctx.StreamIsCapturing(s.h); qerr == nil && st == cuda.CaptureStatusNone {
			c.end()
		}
	}
	if err != nil {
		return nil, err
	}
	return &Graph{dev: s.dev, h: g}, nil
}

// end marks the capture over for its origin and every member.
func (c *capture) end() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	c.origin.dev.captures.Add(-1)
	members := c.members
	c.members = nil
	c.mu.Unlock()
	c.origin.capt.CompareAndSwap(c, nil)
	for _, m := range members {
		m.capt.CompareAndSwap(c, nil)
	}
	gpu.CaptureFinished() // after no stream reports it (capturegate.go)
	c.thread.stop()
}

// joinCapture makes s a member of the capture e was recorded in, if s is
// part of none: the driver has just made it one by the wait.
func (s *Stream) joinCapture(e *Event) {
	c := e.capt.Load()
	if c == nil || s.capt.Load() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.members = append(c.members, s)
	s.capt.Store(c)
}

// CaptureID is the driver's ID of the capture s is part of, or 0 (0 too
// for a nil *Stream). For a stream of ours it is the capture tracked in
// Go (an atomic load). An adopted stream belongs to code that may begin a
// capture on it behind our back (PyTorch capturing a CUDA graph on the
// stream it hands its allocator), so it asks the driver
// (cuStreamGetCaptureInfo, one cgo call): a capture that the resources do
// not know is then refused with mr.ErrStreamCapturing instead of being
// served from free lists whose addresses the graph would keep.
func (s *Stream) CaptureID() uint64 {
	if s == nil {
		return 0
	}
	if c := s.capt.Load(); c != nil {
		return c.id
	}
	if queryForeignCapture && s.borrowed && !s.legacy() && !s.dead.Load() {
		if _, id, err := s.dev.ctx.StreamCaptureInfo(s.h); err == nil {
			return id
		}
	}
	return 0
}

// CaptureGated reports whether the process-wide capture gate covers s
// (gpu.CaptureGated): whether CaptureID never asks the driver for it. True
// for a stream of ours, whose captures begin and end here, and for an
// adopted legacy default stream, which the driver never lets capture;
// false for any other adopted stream, whose owner may capture it through
// the driver, and for a nil *Stream (whose every use is then refused).
func (s *Stream) CaptureGated() bool {
	return s != nil && !(queryForeignCapture && s.borrowed && !s.legacy())
}

// legacy reports whether s is the legacy default stream, which the driver
// never lets capture (see the file comment).
func (s *Stream) legacy() bool { return s.h == 0 || s.h == cuda.StreamLegacy }

// CaptureStatus is cuStreamIsCapturing.
func (s *Stream) CaptureStatus() (gpu.CaptureStatus, error) {
	if err := s.live("Stream.CaptureStatus"); err != nil {
		return 0, err
	}
	st, err := s.dev.ctx.StreamIsCapturing(s.h)
	return gpu.CaptureStatus(st), err
}

// Graph is the CUDA implementation of gpu.Graph.
type Graph struct {
	dev  *Device
	h    cuda.Graph
	dead atomic.Bool
}

// Device is the device the graph was captured on.
func (g *Graph) Device() gpu.Device { return g.dev }

// Handle is the driver's CUgraph.
func (g *Graph) Handle() cuda.Graph { return g.h }

func (g *Graph) live(op string) error {
	if g == nil {
		return fmt.Errorf("cudagpu: %s: nil graph: %w", op, gpu.ErrInvalidHandle)
	}
	if g.dead.Load() {
		return fmt.Errorf("cudagpu: %s: graph: %w", op, gpu.ErrDestroyed)
	}
	return nil
}

// Instantiate is cuGraphInstantiateWithFlags.
func (g *Graph) Instantiate(flags gpu.InstantiateFlags) (gpu.GraphExec, error) {
	if err := g.live("Graph.Instantiate"); err != nil {
		return nil, err
	}
	x, err := g.dev.ctx.GraphInstantiate(g.h, uint64(flags))
	if err != nil {
		return nil, err
	}
	return &GraphExec{dev: g.dev, h: x}, nil
}

// Destroy is cuGraphDestroy. A second Destroy returns ErrDestroyed.
func (g *Graph) Destroy() error {
	if g == nil {
		return fmt.Errorf("cudagpu: Graph.Destroy: nil graph: %w", gpu.ErrInvalidHandle)
	}
	if !g.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: Graph.Destroy: %w", gpu.ErrDestroyed)
	}
	return g.dev.ctx.GraphDestroy(g.h)
}

// GraphExec is the CUDA implementation of gpu.GraphExec.
type GraphExec struct {
	dev  *Device
	h    cuda.GraphExec
	dead atomic.Bool
}

// Device is the device the executable runs on.
func (x *GraphExec) Device() gpu.Device { return x.dev }

// Handle is the driver's CUgraphExec.
func (x *GraphExec) Handle() cuda.GraphExec { return x.h }

// Launch is cuGraphLaunch on s, a stream of the same device.
func (x *GraphExec) Launch(s gpu.Stream) error {
	if x == nil {
		return fmt.Errorf("cudagpu: GraphExec.Launch: nil executable graph: %w", gpu.ErrInvalidHandle)
	}
	if x.dead.Load() {
		return fmt.Errorf("cudagpu: GraphExec.Launch: %w", gpu.ErrDestroyed)
	}
	cs, err := x.dev.stream("GraphExec.Launch", s)
	if err != nil {
		return err
	}
	return x.dev.ctx.GraphLaunch(x.h, cs.h)
}

// Destroy is cuGraphExecDestroy. A second Destroy returns ErrDestroyed.
func (x *GraphExec) Destroy() error {
	if x == nil {
		return fmt.Errorf("cudagpu: GraphExec.Destroy: nil executable graph: %w", gpu.ErrInvalidHandle)
	}
	if !x.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: GraphExec.Destroy: %w", gpu.ErrDestroyed)
	}
	return x.dev.ctx.GraphExecDestroy(x.h)
}

// GraphMemAttribute is cuDeviceGetGraphMemAttribute.
func (d *Device) GraphMemAttribute(a gpu.GraphMemAttr) (uint64, error) {
	return d.ctx.DeviceGraphMemAttribute(d.dev, cuda.GraphMemAttribute(a))
}

// SetGraphMemAttribute is cuDeviceSetGraphMemAttribute.
func (d *Device) SetGraphMemAttribute(a gpu.GraphMemAttr, v uint64) error {
	return d.ctx.DeviceSetGraphMemAttribute(d.dev, cuda.GraphMemAttribute(a), v)
}

// GraphMemTrim is cuDeviceGraphMemTrim.
func (d *Device) GraphMemTrim() error { return d.ctx.DeviceGraphMemTrim(d.dev) }

// CaptureActive reports whether a capture begun with BeginCapture on one
// of the device's streams has not ended.
func (d *Device) CaptureActive() bool { return d.captures.Load() > 0 }

// RelaxCapture runs fn on the calling goroutine, locked to its OS thread,
// with the thread's capture mode relaxed; the mode is put back after.
func (d *Device) RelaxCapture(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cuda.ThreadExchangeCaptureMode(cuda.CaptureModeRelaxed)
	if err != nil {
		return err
	}
	defer cuda.ThreadExchangeCaptureMode(prev)
	return fn()
}

// captureCopy refuses a copy between a capturing stream and host memory b
// that is not a live MallocHost allocation. The capture is not disturbed.
func (d *Device) captureCopy(op string, s *Stream, b []byte) error {
	if s.capt.Load() == nil || len(b) == 0 || d.isHostMemory(b) {
		return nil
	}
	return fmt.Errorf("cudagpu: %s: a copy with Go memory cannot be captured (the graph would keep a pointer into the Go heap; copy through MallocHost memory): %w",
		op, &cuda.Error{Op: "cuMemcpyAsync", Code: cuda.ErrStreamCaptureUnsupported})
}

// isHostMemory reports whether b lies inside one live MallocHost
// allocation.
func (d *Device) isHostMemory(b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	for first, n := range d.host {
		start := uintptr(unsafe.Pointer(first))
		if start <= lo && hi <= start+uintptr(n) {
			return true
		}
	}
	return false
}
