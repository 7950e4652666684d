// Graphs: what a capture recorded, instantiated and replayed with the
// simulator's stream machinery, so that ordering inside a graph is checked
// like any other.
//
// A graph is its nodes in capture order (a topological order), each on the
// lane of the stream it was captured on. An executable graph has a stream
// of its own for every lane but the first; a launch on stream S enqueues
// the first lane's nodes on S itself and the others on their lane streams,
// each lane starting after S's work before the launch, a node waiting (an
// event wait) on every node of another lane it depends on, and S waiting
// on the last node of every other lane at the end. Two nodes that the
// graph leaves unordered run on two streams with no edge between them, so
// under -race a conflict between them is a data race, as it is a real one
// on the card. A launch is ordered after the executable's previous launch,
// on whatever stream that ran. A failure inside a lane is the launch
// stream's sticky error.
//
// Graph memory. MallocAsync in a capture reserves the address at once (a
// mapped segment, charged nothing; the card reserves the address range at
// capture too) and records an allocation node; FreeAsync of it in the same
// capture records a free node. An allocation the graph does not free is
// live after each launch: the address is the same every launch, a
// FreeAsync outside the graph frees it, and launching again before that
// fails with CUDA_ERROR_INVALID_VALUE unless the executable was made with
// InstantiateAutoFreeOnLaunch, which frees it. A graph with memory nodes
// can have one executable at a time (CUDA_ERROR_NOT_SUPPORTED otherwise).
// Capacity is charged at an executable's first launch: its allocations'
// sizes summed and rounded up to 32 MiB, taken first from graph memory
// that destroyed executables left. As measured on the H100, the graph
// memory attributes count that memory as used and reserved from that
// launch until GraphMemTrim gives it back (an executable's destruction
// does not); the simulator reports used equal to reserved.
//
// All graph state is guarded by Device.mu.

package sim

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// graphGranule is what graph memory grows by (measured on the H100).
const graphGranule = 32 << 20

// gnode is one node of a graph: the template of an operation.
type gnode struct {
	kind  opKind
	lane  int
	index int
	deps  []*gnode
	name  string

	dst, src gpu.DevicePtr
	n        int
	val      byte
	host     []byte
	launch   *Launch
	ga       *graphAlloc // opAlloc and opFree nodes
}

// op makes the operation that runs the node in one launch.
func (n *gnode) op() *op {
	o := &op{kind: n.kind, name: n.name, dst: n.dst, src: n.src, n: n.n, val: n.val, host: n.host}
	if n.launch != nil {
		l := *n.launch
		o.launch = &l
	}
	return o
}

// graphAlloc is an allocation node's memory.
type graphAlloc struct {
	addr, size uint64
	seg        *segment
	c          *capture // the capture that recorded it
	g          *graph   // its graph, once the capture ended with one
	freed      bool     // the graph frees it
	live       bool     // a launch allocated it and nothing freed it yet
}

// graph implements gpu.Graph.
type graph struct {
	dev       *Device
	nodes     []*gnode
	lanes     int
	allocs    []*graphAlloc
	destroyed bool
	execs     int // executables not destroyed
	lastEnd   *op // the end of the latest launch of any of its executables
}

var _ gpu.Graph = (*graph)(nil)

func newGraph(c *capture) *graph {
	g := &graph{dev: c.dev, nodes: c.nodes, lanes: len(c.lanes), allocs: c.allocs}
	for _, a := range g.allocs {
		a.g = g
	}
	return g
}

func (g *graph) Device() gpu.Device { return g.dev }

// captureAllocLocked records an allocation node of size bytes on
// capturing stream s. Device.mu and s.mu are held.
func (d *Device) captureAllocLocked(call string, s *stream, size int) (gpu.DevicePtr, error) {
	b := d.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	if c == nil {
		return 0, fmt.Errorf("sim: %s: the capture ended while the call was made: %w", call, gpu.ErrInvalidValue)
	}
	if err := c.liveLocked(call); err != nil {
		return 0, err
	}
	seg, err := d.mapLocked(call, uint64(size), 0)
	if err != nil {
		return 0, err
	}
	ga := &graphAlloc{addr: seg.base, size: uint64(size), seg: seg, c: c}
	s.addNodeLocked(c, &gnode{kind: opAlloc, name: call, ga: ga})
	c.allocs = append(c.allocs, ga)
	d.allocs[seg.base] = &allocation{ptr: seg.base, size: uint64(size), kind: allocGraph, ga: ga}
	return gpu.DevicePtr(seg.base), nil
}

// captureFreeLocked records a free node of p on capturing stream s: only
// memory the same capture allocated can be freed in it. Device.mu is held.
func (d *Device) captureFreeLocked(call string, p gpu.DevicePtr, s *stream) error {
	b := d.b
	b.capMu.Lock()
	defer b.capMu.Unlock()
	c := s.cs.capt.Load()
	if c == nil {
		return fmt.Errorf("sim: %s: the capture ended while the call was made: %w", call, gpu.ErrInvalidValue)
	}
	if err := c.liveLocked(call); err != nil {
		return err
	}
	a := d.allocs[uint64(p)]
	if a == nil || a.kind != allocGraph || a.ga.c != c || a.ga.freed {
		return driverErrf(call, gpu.ErrInvalidValue, "%#x is not memory %v allocated and has not freed", uint64(p), c)
	}
	a.ga.freed = true
	s.addNodeLocked(c, &gnode{kind: opFree, name: call, ga: a.ga})
	return nil
}

// freeGraphAllocLocked is FreeAsync outside a graph of a graph's
// allocation: allowed only while a launch left it live. Device.mu and
// nothing else is held.
func (d *Device) freeGraphAllocLocked(call string, a *allocation, s *stream) error {
	ga := a.ga
	if !ga.live {
		return driverErrf(call, gpu.ErrInvalidValue, "%#x is a graph's allocation that no launch made live", ga.addr)
	}
	o := &op{kind: opFree, name: call}
	s.mu.Lock()
	s.enqueueLocked(o)
	s.mu.Unlock()
	ga.live = false
	if ga.g == nil || ga.g.gone() {
		delete(d.allocs, ga.addr)
		d.asyncFrees = append(d.asyncFrees, &allocation{ptr: ga.addr, size: ga.size, seg: ga.seg, freeOp: o})
	}
	return nil
}

// gone reports whether the graph and all its executables are destroyed.
func (g *graph) gone() bool { return g.destroyed && g.execs == 0 }

// dropAllocsLocked unmaps the allocations of a graph that is gone, or of
// a capture that ended without one, once after (if not nil) has run.
// Allocations a launch left live stay until they are freed.
func (d *Device) dropAllocsLocked(allocs []*graphAlloc, after *op) {
	for _, ga := range allocs {
		if ga.live {
			continue
		}
		delete(d.allocs, ga.addr)
		if after == nil {
			d.unmapLocked(ga.seg, 0)
		} else {
			d.asyncFrees = append(d.asyncFrees, &allocation{ptr: ga.addr, size: ga.size, seg: ga.seg, freeOp: after})
		}
	}
}

// Instantiate makes an executable graph.
func (g *graph) Instantiate(flags gpu.InstantiateFlags) (gpu.GraphExec, error) {
	const call = "cuGraphInstantiate"
	if g == nil {
		return nil, wrap(call, fmt.Errorf("nil graph: %w", gpu.ErrInvalidHandle))
	}
	d := g.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if g.destroyed {
		return nil, wrap(call, fmt.Errorf("graph: %w", gpu.ErrDestroyed))
	}
	if len(g.allocs) > 0 && g.execs > 0 {
		return nil, driverErrf(call, gpu.ErrNotSupported, "a graph with memory nodes has one executable at a time")
	}
	x := &graphExec{g: g, autoFree: flags&gpu.InstantiateAutoFreeOnLaunch != 0, lanes: make([]*stream, g.lanes)}
	for i := 1; i < g.lanes; i++ {
		ls := newStream(d)
		d.b.streams.Store(ls.id, ls)
		x.lanes[i] = ls
	}
	g.execs++
	return x, nil
}

// Destroy destroys the graph; its executables stay usable.
func (g *graph) Destroy() error {
	const call = "cuGraphDestroy"
	if g == nil {
		return wrap(call, fmt.Errorf("nil graph: %w", gpu.ErrInvalidHandle))
	}
	d := g.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if g.destroyed {
		return wrap(call, fmt.Errorf("graph: %w", gpu.ErrDestroyed))
	}
	g.destroyed = true
	if g.execs == 0 {
		d.dropAllocsLocked(g.allocs, g.lastEnd)
	}
	return nil
}

// graphExec implements gpu.GraphExec.
type graphExec struct {
	g         *graph
	autoFree  bool
	lanes     []*stream // lane i > 0 runs on lanes[i]; lane 0 on the launch stream
	destroyed bool
	charged   uint64 // graph memory charged at the first launch
	launched  bool
	lastEnd   *op // the last operation of the latest launch
}

var _ gpu.GraphExec = (*graphExec)(nil)

func (x *graphExec) Device() gpu.Device { return x.g.dev }

// footprint is the graph memory an executable of g holds.
func (g *graph) footprint() uint64 {
	var sum uint64
	for _, a := range g.allocs {
		sum += roundUp(a.size, align)
	}
	return roundUp(sum, graphGranule)
}

// Launch replays the graph on s.
func (x *graphExec) Launch(gs gpu.Stream) error {
	const call = "cuGraphLaunch"
	if x == nil {
		return wrap(call, fmt.Errorf("nil executable graph: %w", gpu.ErrInvalidHandle))
	}
	g := x.g
	d := g.dev
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if s.cs.capt.Load() != nil {
		return wrap(call, fmt.Errorf("sim: launching a graph into a capture (a child graph) is not modelled: %w", gpu.ErrNotSupported))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.destroyed {
		return wrap(call, fmt.Errorf("executable graph: %w", gpu.ErrDestroyed))
	}
	for _, a := range g.allocs {
		if !a.freed && a.live && !x.autoFree {
			return driverErrf(call, gpu.ErrInvalidValue, "the graph's allocation %#x from the previous launch was not freed", a.addr)
		}
	}
	if !x.launched {
		if err := d.chargeGraphMemLocked(call, g.footprint()); err != nil {
			return err
		}
		x.charged = g.footprint()
		x.launched = true
	}
	x.enqueue(s)
	for _, a := range g.allocs {
		if !a.freed {
			a.live = true
		}
	}
	return nil
}

// enqueue enqueues one launch on s and the lane streams. Device.mu is
// held; stream mutexes are taken one at a time.
func (x *graphExec) enqueue(s *stream) {
	g := x.g
	lane := func(i int) *stream {
		if i == 0 {
			return s
		}
		return x.lanes[i]
	}
	waitOn := func(ls *stream, kind opKind, r *op) {
		ls.joinOpLocked(r)
		ls.enqueueLocked(&op{kind: kind, rec: r, name: "cuGraphLaunch"})
	}
	s.mu.Lock()
	if x.lastEnd != nil && x.lastEnd.s != s {
		waitOn(s, opWait, x.lastEnd)
	}
	start := &op{kind: opNop, name: "cuGraphLaunch"}
	s.enqueueLocked(start)
	s.mu.Unlock()

	ops := make([]*op, len(g.nodes))
	last := make([]*op, g.lanes)
	for _, n := range g.nodes {
		ls := lane(n.lane)
		ls.mu.Lock()
		if n.lane != 0 && last[n.lane] == nil {
			waitOn(ls, opWait, start)
		}
		for _, dep := range n.deps {
			if dep.lane != n.lane {
				waitOn(ls, opWait, ops[dep.index])
			}
		}
		o := n.op()
		ls.enqueueLocked(o)
		ls.mu.Unlock()
		ops[n.index] = o
		last[n.lane] = o
	}
	s.mu.Lock()
	for i := 1; i < g.lanes; i++ {
		if last[i] != nil {
			waitOn(s, opGraphJoin, last[i])
		}
	}
	end := &op{kind: opNop, name: "cuGraphLaunch"}
	s.enqueueLocked(end)
	s.mu.Unlock()
	x.lastEnd = end
	g.lastEnd = end
}

// Destroy destroys the executable; launches enqueued still run.
func (x *graphExec) Destroy() error {
	const call = "cuGraphExecDestroy"
	if x == nil {
		return wrap(call, fmt.Errorf("nil executable graph: %w", gpu.ErrInvalidHandle))
	}
	g := x.g
	d := g.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.destroyed {
		return wrap(call, fmt.Errorf("executable graph: %w", gpu.ErrDestroyed))
	}
	x.destroyed = true
	for _, ls := range x.lanes[1:] {
		ls.mu.Lock()
		ls.destroyed = true
		ls.mu.Unlock()
	}
	d.gmem.idle += x.charged
	g.execs--
	if g.gone() {
		d.dropAllocsLocked(g.allocs, g.lastEnd)
	}
	return nil
}

// graphMem is a device's graph memory (under Device.mu).
type graphMem struct {
	reserved, reservedHigh, usedHigh uint64
	idle                             uint64 // reserved, held by no executable
}

// chargeGraphMemLocked charges need bytes of graph memory, idle memory
// first.
func (d *Device) chargeGraphMemLocked(call string, need uint64) error {
	m := &d.gmem
	reuse := min(m.idle, need)
	charge := need - reuse
	if d.committed+charge > d.capacity {
		return driverErrf(call, gpu.ErrOutOfMemory, "graph memory: %d bytes needed, %d of %d free", charge, d.capacity-d.committed, d.capacity)
	}
	m.idle -= reuse
	d.committed += charge
	m.reserved += charge
	m.reservedHigh = max(m.reservedHigh, m.reserved)
	m.usedHigh = max(m.usedHigh, m.reserved)
	return nil
}

// GraphMemAttribute reads a graph memory attribute.
func (d *Device) GraphMemAttribute(a gpu.GraphMemAttr) (uint64, error) {
	const call = "cuDeviceGetGraphMemAttribute"
	d.mu.Lock()
	defer d.mu.Unlock()
	switch a {
	case gpu.GraphMemUsedCurrent, gpu.GraphMemReservedCurrent:
		return d.gmem.reserved, nil
	case gpu.GraphMemUsedHigh:
		return d.gmem.usedHigh, nil
	case gpu.GraphMemReservedHigh:
		return d.gmem.reservedHigh, nil
	}
	return 0, driverErrf(call, gpu.ErrInvalidValue, "graph memory attribute %d", int(a))
}

// SetGraphMemAttribute resets a high-water mark (v must be 0).
func (d *Device) SetGraphMemAttribute(a gpu.GraphMemAttr, v uint64) error {
	const call = "cuDeviceSetGraphMemAttribute"
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case v != 0:
		return driverErrf(call, gpu.ErrInvalidValue, "a high-water mark can only be reset to 0, not %d", v)
	case a == gpu.GraphMemUsedHigh:
		d.gmem.usedHigh = d.gmem.reserved
	case a == gpu.GraphMemReservedHigh:
		d.gmem.reservedHigh = d.gmem.reserved
	default:
		return driverErrf(call, gpu.ErrInvalidValue, "graph memory attribute %d cannot be set", int(a))
	}
	return nil
}

// GraphMemTrim gives back the graph memory no executable holds.
func (d *Device) GraphMemTrim() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := &d.gmem
	d.committed -= m.idle
	m.reserved -= m.idle
	m.idle = 0
	return nil
}
