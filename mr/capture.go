// CUDA graph capture: how every resource serves a stream that is being
// captured into a graph. This file and graphpool.go are the whole of it;
// the resources call in with one line at the top of Allocate and
// Deallocate.
//
// A capture records work instead of running it, and the graph then replays
// it many times with the same addresses. A suballocator that handed a
// capturing stream a block from its free lists would bake the block's
// address into the graph and then treat it as free after the captured
// Deallocate: every replay would write memory that someone else owns. The
// rules, decided once for all resources:
//
//   - Begin captures with BeginCapture (not gpu.BeginCapture): it gives the
//     capture a GraphPool that owns what suballocators serve to it, and a
//     handle (*Capture) whose Release gives that memory back.
//   - Pool, Arena and FixedSize (and Binning, whose bins are FixedSize
//     resources and whose large requests go upstream) serve a request on a
//     capturing stream from the capture's GraphPool, a private pool whose
//     chunks come from the resource's upstream and go back to it only at
//     Release. A block allocated and freed inside the capture keeps its
//     address, exclusive to the graph, for every replay; memory freed in
//     the capture is reused by later requests of the capture in the
//     graph's own order (on the same stream, or after a captured event
//     from the stream that freed it, which becomes an edge of the graph).
//     A block the capture allocated and did not free (a graph's output)
//     stays allocated until the program frees it (on any stream, after
//     the capture) or until Release.
//   - A block allocated before the capture and freed inside it is not
//     freed then: the graph's replays still use it. The free is kept by
//     the Capture and done at Release, on Release's stream; until then the
//     block is neither reused inside the graph nor returned to the
//     resource.
//   - Several captures may share a GraphPool (PyTorch's graph_pool_handle):
//     a block freed by one graph may then hold another graph's data. That
//     is safe only if the graphs are replayed in the order they were
//     captured and never concurrently, which is the user's promise when
//     sharing; captures into one GraphPool may not overlap in time.
//   - Async passes through: its cuMemAllocAsync and cuMemFreeAsync in a
//     capture become the graph's memory nodes (graph memory, not the
//     pool's). A pre-capture allocation freed in the capture is kept for
//     Release as above (the driver refuses such a free). A graph
//     allocation the graph does not free is allocated again by every
//     launch; Async keeps it until Release and frees it outside the graph
//     as often as the program asks.
//   - Direct and Managed refuse a capturing stream with ErrStreamCapturing,
//     before the driver call, so the capture is not invalidated: cuMemAlloc
//     cannot be captured, and their frees synchronize.
//   - Nothing a resource does on the side touches a capturing stream:
//     cross-stream ordering (events) between a capturing stream and one
//     that is not, which would join the other stream to the capture or
//     make the capture depend on outside work, is refused with
//     ErrStreamCapturing; Pool never steals from, releases on or absorbs
//     through a capturing stream; PendingFrees.Reap (and so Reclaim and
//     Retry) leaves capturing streams pending and makes its queries inside
//     gpu.RelaxCapture, so that a global-mode capture elsewhere does not
//     forbid them. The GraphPool's own driver calls (growing the private
//     pool, on a stream of its own, and releasing it) run inside
//     gpu.RelaxCapture too: in global mode the driver forbids cuMemAlloc,
//     cuMemAllocAsync and stream synchronization on every stream
//     (measured on the H100) unless the calling thread is relaxed.
//   - Requests on streams that do not capture are served as always. In
//     global mode the driver refuses, on any stream, the calls such a
//     request may need (a pool's growth, a synchronous free) and
//     invalidates the capture: that is the program's own concurrency, which
//     the mode exists to forbid. Use CaptureThreadLocal or CaptureRelaxed
//     when other goroutines keep allocating during a capture.
//
// The hot path does not pay for any of this: a resource asks
// gpu.CaptureID(s), which for the streams the backends make is an atomic
// load (they track captures begun and joined through the gpu interface),
// and only a non-zero answer leads here. A stream whose capture began
// outside the gpu interface (a borrowed stream captured by other code) is
// not seen that way; its wrapper must answer CaptureID from the driver
// (cuStreamGetCaptureInfo), at the cost of a call per request.
//
// Lifetimes: Capture.Release refuses while an executable graph made from
// the capture's graph is alive (ErrGraphInUse) and destroys the graph if
// the program has not; a Capture never released keeps its memory, and
// Unreleased lists such captures for leak reports.
//
// Code above mr that keeps state about a capture (package buf's block-use
// tracking, the sanitizer) finds it with CaptureOf and adds a CaptureHook
// (capture_hooks.go), which takes part in End, in every launch of an
// executable made from the graph End returned, and in Release.

package mr

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Errors of the capture wing.
var (
	// ErrStreamCapturing: the request was refused because a stream it
	// involves is being captured into a graph and the resource cannot
	// serve it without disturbing the capture (see the rules above).
	ErrStreamCapturing = errors.New("mr: stream is capturing")
	// ErrGraphInUse: Release while an executable graph of the capture (or
	// a capture of the GraphPool) is alive.
	ErrGraphInUse = errors.New("mr: graph still in use")
	// ErrCaptureActive: an operation that needs the capture ended (or the
	// GraphPool idle) was called during it.
	ErrCaptureActive = errors.New("mr: capture in progress")
	// ErrReleased: the Capture or GraphPool was released.
	ErrReleased = errors.New("mr: capture released")
	// ErrCaptureEnded: an operation that needs the capture running (adding
	// a hook) was called after End.
	ErrCaptureEnded = errors.New("mr: capture ended")
)

// CaptureOptions configure BeginCapture.
type CaptureOptions struct {
	// Pool, if not nil, is the GraphPool the capture draws from, shared
	// with other captures; Release of the capture then leaves the memory
	// in it, and GraphPool.Release gives it back. Nil: a GraphPool of the
	// capture's own, released with it.
	Pool *GraphPool
}

// Capture is a capture begun with BeginCapture. Its methods are safe for
// concurrent use.
type Capture struct {
	id     uint64
	dev    gpu.Device
	origin gpu.Stream
	gp     *GraphPool
	ownGP  bool
	stack  []uintptr // where BeginCapture was called, for leak reports

	released atomic.Bool // read without mu by GraphPool.Release

	mu       sync.Mutex
	ended    bool
	graph    *captureGraph
	deferred []deferredFree
	forget   []func()      // what resources drop at Release (Async's graph allocations)
	hooks    []CaptureHook // capture_hooks.go
}

type deferredFree struct {
	res   Resource
	p     gpu.DevicePtr
	size  int
	owner uint32 // the Owner the memory was allocated for (owner.go)
}

// captures maps the gpu capture ID of every capture begun with
// BeginCapture and not yet ended to its *Capture; unreleased holds every
// Capture not yet released.
var (
	captures   sync.Map // uint64 -> *Capture
	unreleased sync.Map // *Capture -> struct{}
)

// BeginCapture begins a capture on s in the given mode and returns its
// handle. Resources serve s, and every stream that joins the capture,
// by the rules of this file. The handle must be released (Release) after
// the capture ends, whatever its outcome.
func BeginCapture(s gpu.Stream, mode gpu.CaptureMode, opts CaptureOptions) (*Capture, error) {
	if s == nil {
		return nil, fmt.Errorf("mr: begin capture: nil stream: %w", gpu.ErrInvalidHandle)
	}
	dev := s.Device()
	gp, own := opts.Pool, false
	if gp == nil {
		gp, own = NewGraphPool(dev), true
	} else if gp.dev != dev {
		return nil, fmt.Errorf("mr: begin capture: graph pool of device %d, stream of device %d: %w", gp.dev.Ordinal(), dev.Ordinal(), gpu.ErrWrongDevice)
	}
	c := &Capture{dev: dev, origin: s, gp: gp, ownGP: own}
	var pcs [16]uintptr
	c.stack = pcs[:runtime.Callers(2, pcs[:])]
	if err := gp.begin(c); err != nil {
		return nil, err
	}
	if err := gpu.BeginCapture(s, mode); err != nil {
		gp.end(c)
		return nil, fmt.Errorf("mr: begin capture: %w", err)
	}
	c.id = gpu.CaptureID(s)
	if c.id == 0 {
		// A stream whose capture cannot be seen: resources could not
		// route its requests. End the capture and refuse.
		if g, err := gpu.EndCapture(s); err == nil {
			g.Destroy()
		}
		gp.end(c)
		return nil, fmt.Errorf("mr: begin capture: stream %T does not report its capture: %w", s, gpu.ErrNotSupported)
	}
	captures.Store(c.id, c)
	unreleased.Store(c, struct{}{})
	return c, nil
}

// lookupCapture returns the Capture of the capture id, or nil.
func lookupCapture(id uint64) *Capture {
	if v, ok := captures.Load(id); ok {
		return v.(*Capture)
	}
	return nil
}

// ID is the capture's ID (gpu.CaptureID of its streams while it runs).
func (c *Capture) ID() uint64 { return c.id }

// Pool is the GraphPool the capture draws from.
func (c *Capture) Pool() *GraphPool { return c.gp }

// End ends the capture and returns its graph. Executables made from the
// graph count as uses of the capture's memory: Release refuses while one
// is alive. Whatever End returns, the capture is over and Release is due.
// The capture's hooks are told (CaptureHook.CaptureEnded) once it is over.
func (c *Capture) End() (gpu.Graph, error) {
	g, hooks, err := c.end()
	for _, h := range hooks {
		h.CaptureEnded(g != nil)
	}
	return g, err
}

// end is End without the hooks, which are returned to be called without
// c.mu held.
func (c *Capture) end() (gpu.Graph, []CaptureHook, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return nil, nil, fmt.Errorf("mr: end capture %d: already ended: %w", c.id, gpu.ErrIllegalState)
	}
	g, err := gpu.EndCapture(c.origin)
	if err != nil && gpu.CaptureID(c.origin) == c.id {
		// Not ended (the driver refused): the capture goes on.
		return nil, nil, fmt.Errorf("mr: end capture %d: %w", c.id, err)
	}
	c.ended = true
	captures.Delete(c.id)
	c.gp.end(c)
	if err != nil {
		return nil, c.hooks, fmt.Errorf("mr: end capture %d: %w", c.id, err)
	}
	c.graph = &captureGraph{Graph: g, c: c}
	return c.graph, c.hooks, nil
}

// Release gives back what the capture holds: its hooks are told
// (CaptureHook.Released), the frees it deferred are done, in stream order
// on s, and, if the capture has a GraphPool of its own, every chunk of it
// goes back to the resources' upstreams on s. s must be ordered after every launch of the capture's graph (the stream
// they ran on, say); it must not be capturing. Release fails with
// ErrCaptureActive before End, with ErrGraphInUse while an executable of
// the graph is alive; it destroys the graph if the program has not.
// Pointers the capture handed out are invalid after it. Calling it again
// returns ErrReleased.
func (c *Capture) Release(s gpu.Stream) error {
	if err := checkStream("mr", "release capture", c.dev, s); err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("mr: release capture %d on stream %d: %w", c.id, s.ID(), ErrStreamCapturing)
	}
	var errs []error
	c.mu.Lock()
	switch {
	case c.released.Load():
		c.mu.Unlock()
		return fmt.Errorf("mr: release capture %d: %w", c.id, ErrReleased)
	case !c.ended:
		c.mu.Unlock()
		return fmt.Errorf("mr: release capture %d: %w", c.id, ErrCaptureActive)
	case c.graph != nil && c.graph.execs > 0:
		c.mu.Unlock()
		return fmt.Errorf("mr: release capture %d: %d executable graphs alive: %w", c.id, c.graph.execs, ErrGraphInUse)
	}
	if c.graph != nil && !c.graph.destroyed {
		if err := c.graph.Graph.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy graph: %w", err))
		}
		c.graph.destroyed = true
	}
	// From here on the capture is released for everyone; what it held is
	// given back below without c.mu, so that the hooks and the resources
	// may take locks that they hold while calling into the capture wing.
	hooks, deferred, forget := c.hooks, c.deferred, c.forget
	c.hooks, c.deferred, c.forget = nil, nil, nil
	c.released.Store(true)
	c.mu.Unlock()

	for _, h := range hooks {
		if err := h.Released(s); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range deferred {
		var err error
		if or, ok := f.res.(OwnedResource); ok && f.owner != 0 {
			err = or.DeallocateOwned(f.p, f.size, s, Owner{f.owner})
		} else {
			err = f.res.Deallocate(f.p, f.size, s)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("deferred free of %#x: %w", uint64(f.p), err))
		}
	}
	for _, f := range forget {
		f()
	}
	if c.ownGP {
		if err := c.gp.Release(s); err != nil {
			errs = append(errs, err)
		}
	}
	unreleased.Delete(c)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mr: release capture %d: %w", c.id, err)
	}
	return nil
}

// deferFree keeps the free of p (allocated by res before the capture) for
// Release. A second free of the same pointer is ErrDoubleFree.
func (c *Capture) deferFree(res Resource, p gpu.DevicePtr, size int) error {
	return c.deferOwnedFree(res, p, size, 0)
}

// deferOwnedFree is deferFree of memory of owner, freed at Release with
// DeallocateOwned (res is then an OwnedResource).
func (c *Capture) deferOwnedFree(res Resource, p gpu.DevicePtr, size int, owner uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.deferred {
		if f.p == p && f.res == res {
			return fmt.Errorf("mr: capture %d: %#x freed twice: %w", c.id, uint64(p), ErrDoubleFree)
		}
	}
	c.deferred = append(c.deferred, deferredFree{res, p, size, owner})
	return nil
}

// onRelease registers f to run at Release.
func (c *Capture) onRelease(f func()) {
	c.mu.Lock()
	c.forget = append(c.forget, f)
	c.mu.Unlock()
}

// captureGraph is the capture's graph; it counts the executables made
// from it.
type captureGraph struct {
	gpu.Graph
	c         *Capture
	execs     int  // guarded by c.mu
	destroyed bool // guarded by c.mu
}

// Instantiate makes an executable that counts as a use of the capture. It
// is always made with gpu.InstantiateAutoFreeOnLaunch, so that the graph's
// outputs (allocations it does not free) behave alike with every
// resource: valid after a launch until the next one, freed once by the
// program when it is done with them.
func (g *captureGraph) Instantiate(flags gpu.InstantiateFlags) (gpu.GraphExec, error) {
	x, err := g.Graph.Instantiate(flags | gpu.InstantiateAutoFreeOnLaunch)
	if err != nil {
		return nil, err
	}
	g.c.mu.Lock()
	g.execs++
	g.c.mu.Unlock()
	return &captureExec{GraphExec: x, g: g}, nil
}

// Destroy destroys the graph (Release does it otherwise).
func (g *captureGraph) Destroy() error {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	if g.destroyed {
		return fmt.Errorf("mr: graph of capture %d: %w", g.c.id, gpu.ErrDestroyed)
	}
	g.destroyed = true
	return g.Graph.Destroy()
}

type captureExec struct {
	gpu.GraphExec
	g    *captureGraph
	once sync.Once
}

// Destroy destroys the executable; the capture can be released after the
// last one is destroyed.
func (x *captureExec) Destroy() error {
	err := x.GraphExec.Destroy()
	if err == nil {
		x.once.Do(func() {
			x.g.c.mu.Lock()
			x.g.execs--
			x.g.c.mu.Unlock()
		})
	}
	return err
}

// UnreleasedCapture describes a capture begun with BeginCapture and not
// released: its ID, its device, whether it ended, and where it began.
type UnreleasedCapture struct {
	ID     uint64
	Device gpu.Device
	Ended  bool
	Stack  []uintptr
	Bytes  uint64 // bytes its GraphPool reserves (0 for a shared pool)
}

// Unreleased lists the captures not yet released, for leak reports
// (Tracking.Leaks includes them).
func Unreleased() []UnreleasedCapture {
	var out []UnreleasedCapture
	unreleased.Range(func(k, _ any) bool {
		c := k.(*Capture)
		c.mu.Lock()
		u := UnreleasedCapture{ID: c.id, Device: c.dev, Ended: c.ended, Stack: c.stack}
		c.mu.Unlock()
		if c.ownGP {
			u.Bytes = c.gp.Usage().Reserved
		}
		out = append(out, u)
		return true
	})
	slices.SortFunc(out, func(a, b UnreleasedCapture) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// captureOf returns the Capture of capture id for a resource's request, or
// an error naming the operation when the capture was not begun with
// BeginCapture (a suballocator then has no owner for the graph's memory).
func captureOf(op string, id uint64, s gpu.Stream) (*Capture, error) {
	if c := lookupCapture(id); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%s on stream %d: capture %d was not begun with mr.BeginCapture, so nothing owns the memory its graph keeps: %w",
		op, s.ID(), id, ErrStreamCapturing)
}

// writeUnreleasedCaptures appends to a leak report the captures of dev not
// released.
func writeUnreleasedCaptures(w io.Writer, dev gpu.Device) {
	var us []UnreleasedCapture
	for _, u := range Unreleased() {
		if u.Device == dev {
			us = append(us, u)
		}
	}
	if len(us) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d captures not released (mr.Capture.Release):\n", len(us))
	for _, u := range us {
		state := "running"
		if u.Ended {
			state = "ended"
		}
		fmt.Fprintf(w, "\ncapture %d, %s, holding %d bytes of graph pool, begun at:\n", u.ID, state, u.Bytes)
		for _, f := range trimFrames(Allocation{Stack: u.Stack}.Frames()) {
			fmt.Fprintf(w, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		}
	}
}
