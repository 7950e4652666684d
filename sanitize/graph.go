// Graphs: the sanitizer's model of CUDA graph capture and launch.
//
// A capture begun on a stream of an instrumented Device is modelled: what
// the sanitizer observes on the capture's streams while it runs (declared
// uses, allocations and frees through a Resource, events recorded and
// waited on) does not run then, so it is recorded as nodes of a shadow
// graph instead of being checked. A node depends on its stream's tail (the
// nodes the stream's next operation is ordered after); an event recorded
// in the capture keeps its stream's tail, and a wait on it adds that tail
// to the waiter's (that is how a stream joins the capture, and how the
// graph's edges between streams are made). Each stream of the capture is a
// lane of the graph.
//
// When the capture ends, the graph is checked once on its own (check):
// its nodes are replayed in capture order, a topological order, with a
// clock per lane, on fresh copies of the memory they touch, so that two
// nodes the graph leaves unordered and that conflict (a race, a use
// before the graph's allocation or after its free, a free before a use, a
// reuse before the free) are reported then, whatever they touch outside.
// In refusing mode the graph is then refused: EndCapture destroys it and
// returns the report.
//
// A launch of an executable made from the graph on stream L is checked
// against the world outside (precheck) and then applied (commit). Every
// node of the launch is ordered after the work enqueued on L before it and
// after the executable's previous launch (the driver orders launches of
// one executable), so what the graph touches of the outside is checked
// against that point, base: a use of memory freed before the launch (or
// freed and handed out again: the node keeps the region it was captured
// against, and a new allocation at the address is another region) is a
// UseAfterFree; a use not ordered after the memory's allocation, its last
// write or (for a write) its reads is reported as for any use; a graph
// allocation over memory whose free is not ordered before the launch, or
// over the graph's previous output still in use, is reported too. In
// refusing mode a launch with reports is not made. The commit then runs
// the nodes on lane streams of the executable (sanitizer streams of their
// own, carried from launch to launch), each lane starting at base and
// joining the clocks of the nodes of other lanes it depends on, and makes
// L wait on every lane at the end: work enqueued on L after the launch is
// ordered after the whole graph, and the regions the graph used carry the
// epochs of its nodes, so uses after the launch are checked against them.
//
// Graph memory. An allocation in the capture is made by every launch: the
// commit adds the region at the node (trimming what it covers, as any
// allocation does); a free in the capture frees it at its node. An
// allocation the graph does not free is the graph's output, live after
// the launch until the program frees it or the next launch allocates it
// again. Memory allocated before the capture and freed in it is not freed
// then: mr defers that free to Capture.Release, and the sanitizer frees
// such regions, and the outputs still live, at the Release (through an
// mr.CaptureHook), on Release's stream.
//
// What is not modelled: captures begun on streams the sanitizer does not
// instrument (their work is ignored, neither checked nor recorded), events
// of a capture recorded or waited on through handles it does not see (a
// stream joined that way is a lane with no edges), and launches through
// an executable the instrumented Device did not make.
//
// All the state is guarded by Sanitizer.mu but the set of captures hooked
// (a sync.Map): hooks are added without the lock, since mr's End holds the
// capture's lock while the instrumented EndCapture takes it.

package sanitize

import (
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

type nodeKind uint8

const (
	nodeUse nodeKind = iota
	nodeAlloc
	nodeFree
)

// gnode is one node of a shadow graph.
type gnode struct {
	kind   nodeKind
	lane   int
	index  int
	deps   []*gnode
	site   site // ep unused: each launch gives the node an epoch
	access buf.Access
	reg    *region // nodeUse of memory from outside the capture
	alloc  *gnode  // nodeUse and nodeFree of graph memory: its allocation
	freed  bool    // nodeAlloc: a node of the capture frees it
	cross  bool    // a node of another lane depends on it
}

// gcapture is a capture in progress.
type gcapture struct {
	id     uint64
	dev    gpu.Device
	nodes  []*gnode
	lanes  map[uint64]int // stream ID -> lane
	tails  map[uint64][]*gnode
	allocs []*gnode
}

// capRecord is an event recorded in a capture: the tail it keeps.
type capRecord struct {
	id   uint64
	tail []*gnode
}

// graphModel is a captured graph.
type graphModel struct {
	id      uint64
	dev     gpu.Device
	nodes   []*gnode
	lanes   int
	outputs map[*gnode]*region // regions the latest launch allocated, still live
}

// execModel is an executable graph.
type execModel struct {
	g     *graphModel
	mu    sync.Mutex // held across a launch: the model's order is the launches'
	lanes []*streamState
	last  clock // after the latest launch
}

// heldFree is a free of memory from outside a capture made in it, which
// mr makes at the capture's Release.
type heldFree struct {
	r    *region
	site site
}

// graphState is what the Sanitizer keeps of captures and graphs.
type graphState struct {
	caps   map[uint64]*gcapture
	events map[gpu.Event]capRecord
	models map[uint64]*graphModel // by capture ID, of captures hooked, until their Release
	held   map[uint64][]heldFree

	hooked sync.Map // capture ID -> true: its mr.Capture has our hook
}

// beginCapture starts the model of the capture s (instrumented) began.
func (z *Sanitizer) beginCapture(s gpu.Stream) {
	id := gpu.CaptureID(s)
	if id == 0 {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	g := &z.graphs
	if g.caps == nil {
		g.caps = make(map[uint64]*gcapture)
		g.events = make(map[gpu.Event]capRecord)
		g.models = make(map[uint64]*graphModel)
		g.held = make(map[uint64][]heldFree)
	}
	g.caps[id] = &gcapture{id: id, dev: unwrapStream(s).Device(), lanes: map[uint64]int{s.ID(): 0}, tails: map[uint64][]*gnode{}}
}

// modelled returns the capture s is part of, if it is modelled; z.mu is
// held.
func (z *Sanitizer) modelled(s gpu.Stream) *gcapture {
	if id := gpu.CaptureID(s); id != 0 {
		return z.graphs.caps[id]
	}
	return nil
}

// addNode appends n, captured on s, to c; z.mu is held.
func (c *gcapture) addNode(s gpu.Stream, n *gnode) {
	id := s.ID()
	lane, ok := c.lanes[id]
	if !ok {
		lane = len(c.lanes)
		c.lanes[id] = lane
	}
	n.lane = lane
	n.index = len(c.nodes)
	n.deps = c.tails[id]
	for _, d := range n.deps {
		if d.lane != lane {
			d.cross = true
		}
	}
	c.nodes = append(c.nodes, n)
	c.tails[id] = []*gnode{n}
}

// allocOf is the latest allocation node of c that holds p, or nil.
func (c *gcapture) allocOf(p gpu.DevicePtr) *gnode {
	for i := len(c.allocs) - 1; i >= 0; i-- {
		a := c.allocs[i]
		if a.site.ptr <= p && p < a.site.ptr+gpu.DevicePtr(max(a.site.size, 1)) {
			return a
		}
	}
	return nil
}

// captureUse records a use on capturing stream s as a node. It checks
// only the bounds (the rest is checked at each launch); handled is false
// when the capture is not modelled.
func (z *Sanitizer) captureUse(p gpu.DevicePtr, n int, s gpu.Stream, a buf.Access, st *stack) (handled bool, err error) {
	this := site{sid: s.ID(), op: a.String(), ptr: p, size: n}
	this.st = *st
	var ps []pending
	z.mu.Lock()
	c := z.modelled(s)
	if c == nil {
		z.mu.Unlock()
		return gpu.CaptureID(s) != 0, nil
	}
	node := &gnode{kind: nodeUse, site: this, access: a}
	base, size := gpu.DevicePtr(0), 0
	if al := c.allocOf(p); al != nil {
		node.alloc = al
		base, size = al.site.ptr, al.site.size
	} else if r := z.idx.containing(p); r != nil {
		node.reg = r
		base, size = r.base, r.size
	} else {
		// Memory this sanitizer never saw allocated: nothing to check,
		// and the tails already carry the ordering.
		z.mu.Unlock()
		return true, nil
	}
	if n > 0 && uint64(p-base)+uint64(n) > uint64(size) {
		other := site{sid: s.ID(), op: "allocation", ptr: base, size: size}
		if node.alloc != nil {
			other = node.alloc.site
		} else {
			other = node.reg.alloc
		}
		ps = append(ps, pending{kind: OutOfBounds, base: base, size: size, this: this, other: other})
		if z.refuse() {
			z.mu.Unlock()
			return true, z.deliver(ps)
		}
	}
	c.addNode(s, node)
	z.mu.Unlock()
	return true, z.deliver(ps)
}

// captureAlloc records an allocation the upstream made on capturing
// stream s; handled is false when s does not capture.
func (z *Sanitizer) captureAlloc(p gpu.DevicePtr, n int, s gpu.Stream, st *stack) (handled bool) {
	if gpu.CaptureID(s) == 0 {
		return false
	}
	if p == 0 {
		return true
	}
	this := site{sid: s.ID(), op: "allocation", ptr: p, size: n}
	this.st = *st
	z.mu.Lock()
	defer z.mu.Unlock()
	if c := z.modelled(s); c != nil {
		node := &gnode{kind: nodeAlloc, site: this}
		c.addNode(s, node)
		c.allocs = append(c.allocs, node)
	}
	return true
}

// captureFree records a free the upstream made on capturing stream s: of
// graph memory, a node; of memory from outside the capture, a free that
// mr makes at the capture's Release. handled is false when s does not
// capture; hook reports that the capture's Release must be seen.
func (z *Sanitizer) captureFree(p gpu.DevicePtr, n int, s gpu.Stream, st *stack) (handled, hook bool) {
	id := gpu.CaptureID(s)
	if id == 0 {
		return false, false
	}
	if p == 0 {
		return true, false
	}
	this := site{sid: s.ID(), op: "free", ptr: p, size: n}
	this.st = *st
	z.mu.Lock()
	defer z.mu.Unlock()
	c := z.modelled(s)
	if c == nil {
		return true, false
	}
	if al := c.allocOf(p); al != nil && al.site.ptr == p && !al.freed {
		al.freed = true
		c.addNode(s, &gnode{kind: nodeFree, site: this, alloc: al})
		return true, false
	}
	if r := z.idx.containing(p); r != nil && r.live && r.base == p {
		z.graphs.held[id] = append(z.graphs.held[id], heldFree{r: r, site: this})
		return true, true
	}
	return true, false
}

// captureRecord records that e (keyed by its raw handle) was recorded on
// capturing stream s; it reports whether s captures.
func (z *Sanitizer) captureRecord(key gpu.Event, s gpu.Stream) bool {
	id := gpu.CaptureID(s)
	if id == 0 {
		if z.graphs.events != nil {
			delete(z.graphs.events, key)
		}
		return false
	}
	delete(z.events, key)
	if c := z.graphs.caps[id]; c != nil {
		z.graphs.events[key] = capRecord{id: id, tail: c.tails[s.ID()]}
	}
	return true
}

// captureWait records that s waits on e, recorded in a capture; it
// reports whether e was.
func (z *Sanitizer) captureWait(s gpu.Stream, key gpu.Event) bool {
	r, ok := z.graphs.events[key]
	if !ok {
		return false
	}
	c := z.graphs.caps[r.id]
	if c == nil {
		return true
	}
	id := s.ID()
	if _, ok := c.lanes[id]; !ok {
		c.lanes[id] = len(c.lanes)
		c.tails[id] = r.tail
		return true
	}
	c.tails[id] = unionNodes(c.tails[id], r.tail)
	return true
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

// endCapture ends the model of capture id. With a graph (ok), it returns
// the graph's model and the reports of its check.
func (z *Sanitizer) endCapture(id uint64, ok bool) (*graphModel, error) {
	z.mu.Lock()
	c := z.graphs.caps[id]
	if c == nil {
		z.mu.Unlock()
		return nil, nil
	}
	delete(z.graphs.caps, id)
	for k, r := range z.graphs.events {
		if r.id == id {
			delete(z.graphs.events, k)
		}
	}
	if !ok {
		z.mu.Unlock()
		return nil, nil
	}
	g := &graphModel{id: id, dev: c.dev, nodes: c.nodes, lanes: len(c.lanes), outputs: make(map[*gnode]*region)}
	if _, ok := z.graphs.hooked.Load(id); ok {
		z.graphs.models[id] = g // for its outputs, at the Release
	}
	ps := g.check()
	z.mu.Unlock()
	return g, z.deliver(ps)
}

// inGraph names a node's operation in a report.
func inGraph(op string, id uint64) string { return fmt.Sprintf("%s (graph of capture %d)", op, id) }

// check replays g on its own: each lane a clock of the graph's, the memory
// it touches fresh copies (nothing outside is ordered after or before
// anything), so that the conflicts the graph's own order leaves are found.
func (g *graphModel) check() []pending {
	var ps []pending
	lanes := make([]clock, g.lanes)
	post := make([]clock, len(g.nodes))
	outside := make(map[*region]*region)
	mem := make(map[*gnode]*region)
	var memList []*region
	for _, n := range g.nodes {
		c := &lanes[n.lane]
		for _, d := range n.deps {
			if d.lane != n.lane {
				c.join(post[d.index])
			}
		}
		this := n.site
		this.op = inGraph(this.op, g.id)
		var r *region
		switch {
		case n.kind == nodeAlloc:
		case n.alloc != nil:
			r = mem[n.alloc]
		default:
			r = outside[n.reg]
			if r == nil {
				r = &region{base: n.reg.base, size: n.reg.size, live: true}
				outside[n.reg] = r
			}
		}
		note := func(k Kind, other *site) {
			ps = append(ps, pending{kind: k, base: r.base, size: r.size, this: this, other: *other})
		}
		switch n.kind {
		case nodeUse:
			if !r.live {
				note(UseAfterFree, &r.free)
				break
			}
			if !r.alloc.ep.before(*c) {
				note(UseBeforeAlloc, &r.alloc)
			}
			if !r.lastWrite.ep.before(*c) {
				note(Race, &r.lastWrite)
			}
			if n.access.Writes() {
				for i := range r.reads {
					if !r.reads[i].ep.before(*c) {
						note(Race, &r.reads[i])
					}
				}
			}
		case nodeAlloc:
			end := n.site.ptr + gpu.DevicePtr(max(n.site.size, 1))
			for _, o := range memList {
				if o.base < end && n.site.ptr < o.base+gpu.DevicePtr(max(o.size, 1)) && !o.live && !o.free.ep.before(*c) {
					r = o
					note(ReuseBeforeFree, &o.free)
				}
			}
		case nodeFree:
			if !r.alloc.ep.before(*c) {
				note(FreeBeforeUse, &r.alloc)
			}
			if !r.lastWrite.ep.before(*c) {
				note(FreeBeforeUse, &r.lastWrite)
			}
			for i := range r.reads {
				if !r.reads[i].ep.before(*c) {
					note(FreeBeforeUse, &r.reads[i])
				}
			}
		}
		this.ep = epoch{n.lane, c.tick(n.lane)}
		switch n.kind {
		case nodeUse:
			if r.live {
				apply(r, this, n.access)
			}
		case nodeAlloc:
			r = &region{base: n.site.ptr, size: n.site.size, live: true, alloc: this}
			mem[n] = r
			memList = append(memList, r)
		case nodeFree:
			r.live, r.free, r.lastWrite, r.reads = false, this, site{}, nil
		}
		if n.cross {
			post[n.index] = c.clone()
		}
	}
	return ps
}

// apply records a use with access a at this in r's state.
func apply(r *region, this site, a buf.Access) {
	if a.Writes() {
		r.lastWrite = this
		r.reads = r.reads[:0]
		return
	}
	for i := range r.reads {
		if r.reads[i].ep.idx == this.ep.idx {
			r.reads[i] = this
			return
		}
	}
	r.reads = append(r.reads, this)
}

// newExec makes the model of an executable of g.
func newExec(g *graphModel) *execModel { return &execModel{g: g} }

// launch checks a launch of x on s, makes it with do, and applies it to the
// model. In refusing mode a launch with reports is not made.
func (z *Sanitizer) launch(x *execModel, s gpu.Stream, do func() error) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	z.mu.Lock()
	ls := z.stream(s)
	z.joinHost(ls)
	base := ls.clock.clone()
	base.join(x.last)
	ps := z.precheck(x.g, s.ID(), base)
	if len(ps) > 0 && z.refuse() {
		z.mu.Unlock()
		return z.deliver(ps)
	}
	if err := do(); err != nil {
		z.mu.Unlock()
		return err
	}
	z.commit(x, ls, base)
	z.mu.Unlock()
	return z.deliver(ps)
}

// launchSite is n's site as launched on stream sid.
func (g *graphModel) launchSite(n *gnode, sid uint64) site {
	this := n.site
	this.op = fmt.Sprintf("%s (graph of capture %d launched on stream %d)", this.op, g.id, sid)
	this.sid = sid
	return this
}

// precheck checks what g touches outside itself against base, the point
// every node of a launch on stream sid is ordered after; z.mu is held.
func (z *Sanitizer) precheck(g *graphModel, sid uint64, base clock) []pending {
	var ps []pending
	seen := make(map[*region]buf.Access)
	for _, n := range g.nodes {
		switch n.kind {
		case nodeUse:
			r := n.reg
			if r == nil {
				continue
			}
			// A region is checked once for reads and once for writes:
			// what it is checked against does not change during the
			// launch.
			prev, checked := seen[r]
			if checked && (prev.Writes() || !n.access.Writes()) {
				continue
			}
			seen[r] = prev | n.access
			this := g.launchSite(n, sid)
			note := func(k Kind, other *site) {
				ps = append(ps, pending{kind: k, base: r.base, size: r.size, this: this, other: *other})
			}
			if !r.live {
				if !checked {
					note(UseAfterFree, &r.free)
				}
				continue
			}
			if !checked {
				if !r.alloc.ep.before(base) {
					note(UseBeforeAlloc, &r.alloc)
				}
				if !r.lastWrite.ep.before(base) {
					note(Race, &r.lastWrite)
				}
			}
			if n.access.Writes() {
				for i := range r.reads {
					if !r.reads[i].ep.before(base) {
						note(Race, &r.reads[i])
					}
				}
			}
		case nodeAlloc:
			this := g.launchSite(n, sid)
			for _, r := range z.idx.overlapping(n.site.ptr, max(n.site.size, 1), nil) {
				note := func(k Kind, other *site) {
					ps = append(ps, pending{kind: k, base: r.base, size: r.size, this: this, other: *other})
				}
				switch {
				case r == g.outputs[n]:
					// The previous launch's output, freed by this one.
					if !r.lastWrite.ep.before(base) {
						note(FreeBeforeUse, &r.lastWrite)
					}
					for i := range r.reads {
						if !r.reads[i].ep.before(base) {
							note(FreeBeforeUse, &r.reads[i])
						}
					}
				case r.live:
					prev := r.alloc
					prev.op = "allocation (not freed)"
					note(ReuseBeforeFree, &prev)
				case !r.free.ep.before(base) && !z.freeDone(r):
					note(ReuseBeforeFree, &r.free)
				}
			}
		}
	}
	return ps
}

// freeDone reports whether freed region r may be reused regardless of
// order: its free has completed, or the upstream orders reuse itself.
func (z *Sanitizer) freeDone(r *region) bool {
	if z.opts.UpstreamOrdersReuse {
		return true
	}
	fs := z.byIdx[r.free.ep.idx]
	return fs.raw != nil && fs.raw.Query() == nil
}

// newLane makes a sanitizer stream for a lane of an executable; z.mu is
// held.
func (z *Sanitizer) newLane(dev gpu.Device) *streamState {
	st := &streamState{idx: len(z.byIdx), dev: dev, hostVer: z.hostVer}
	st.clock.join(z.host)
	z.byIdx = append(z.byIdx, st)
	return st
}

// commit applies a launch of x on ls to the model; z.mu is held.
func (z *Sanitizer) commit(x *execModel, ls *streamState, base clock) {
	g := x.g
	for len(x.lanes) < g.lanes {
		x.lanes = append(x.lanes, z.newLane(g.dev))
	}
	for _, l := range x.lanes {
		l.clock.join(base)
	}
	post := make([]clock, len(g.nodes))
	mem := make(map[*gnode]*region)
	for _, n := range g.nodes {
		l := x.lanes[n.lane]
		for _, d := range n.deps {
			if d.lane != n.lane {
				l.clock.join(post[d.index])
			}
		}
		this := g.launchSite(n, ls.id)
		this.ep = epoch{l.idx, l.clock.tick(l.idx)}
		switch n.kind {
		case nodeUse:
			r := n.reg
			if n.alloc != nil {
				r = mem[n.alloc]
			}
			if r != nil && r.live && !r.dead {
				apply(r, this, n.access)
			}
		case nodeAlloc:
			z.place(n.site.ptr, n.site.size)
			r := &region{base: n.site.ptr, size: n.site.size, live: true, graph: true, allocStream: l, alloc: this}
			z.idx.insert(r)
			mem[n] = r
			g.outputs[n] = r
		case nodeFree:
			if r := mem[n.alloc]; r != nil && r.live {
				r.live, r.free, r.lastWrite, r.reads = false, this, site{}, nil
				delete(g.outputs, n.alloc)
				if !r.dead {
					z.freed.push(r)
					z.evict()
				}
			}
		}
		if n.cross {
			post[n.index] = l.clock.clone()
		}
	}
	for _, l := range x.lanes {
		ls.clock.join(l.clock)
	}
	x.last = ls.clock.clone()
}

// place removes from the index what an allocation of [p, p+n) covers,
// keeping the uncovered parts of freed regions; z.mu is held.
func (z *Sanitizer) place(p gpu.DevicePtr, n int) {
	z.reclaim(p, n, z.idx.overlapping(p, max(n, 1), z.scratch[:0]))
}

// reclaim removes over, the regions of the index an allocation of
// [p, p+n) overlaps, keeping the parts of freed regions it does not cover
// (uses there are still uses after free), and returns over's storage to
// z.scratch; z.mu is held.
func (z *Sanitizer) reclaim(p gpu.DevicePtr, n int, over []*region) {
	for _, r := range over {
		z.idx.remove(r)
		r.dead = true
		if r.live {
			continue
		}
		end := r.base + gpu.DevicePtr(r.size)
		if r.base < p {
			z.addFreed(z.fragment(r, r.base, int(p-r.base)))
		}
		if nend := p + gpu.DevicePtr(max(n, 1)); end > nend {
			z.addFreed(z.fragment(r, nend, int(end-nend)))
		}
	}
	clear(over)
	z.scratch = over[:0]
}

// captureHook is the sanitizer's mr.CaptureHook: it sees the Release of
// a capture whose graph holds memory.
type captureHook struct {
	z  *Sanitizer
	id uint64
}

func (h captureHook) CaptureEnded(bool) {}

func (h captureHook) BeforeLaunch(gpu.Stream) (func(bool), error) { return nil, nil }

func (h captureHook) Released(s gpu.Stream) error { return h.z.captureReleased(h.id, s) }

// hookCapture adds the sanitizer's hook to the mr capture s is part of,
// once. It is called without z.mu: mr's End holds the capture's lock
// while the instrumented stream's EndCapture takes z.mu.
func (z *Sanitizer) hookCapture(s gpu.Stream) {
	c := mr.CaptureOf(s)
	if c == nil {
		return
	}
	if _, loaded := z.graphs.hooked.LoadOrStore(c.ID(), true); loaded {
		return
	}
	if c.AddHook(captureHook{z: z, id: c.ID()}) != nil {
		z.graphs.hooked.Delete(c.ID())
	}
}

// captureReleased frees on s what capture id still held: the memory from
// outside it that it freed, and the outputs of its graph's last launch.
func (z *Sanitizer) captureReleased(id uint64, s gpu.Stream) error {
	var ps []pending
	z.mu.Lock()
	g := &z.graphs
	held := g.held[id]
	delete(g.held, id)
	if m := g.models[id]; m != nil {
		for n, r := range m.outputs {
			held = append(held, heldFree{r: r, site: site{op: "free of the graph's output", ptr: r.base, size: r.size, st: n.site.st}})
		}
		delete(g.models, id)
	}
	ss := z.stream(s)
	z.joinHost(ss)
	for _, h := range held {
		r := h.r
		if !r.live || r.dead {
			continue
		}
		this := h.site
		this.op = fmt.Sprintf("%s (made at the Release of capture %d on stream %d)", this.op, id, s.ID())
		this.sid = s.ID()
		for _, other := range append([]site{r.alloc, r.lastWrite}, r.reads...) {
			if !other.ep.before(ss.clock) {
				ps = append(ps, pending{kind: FreeBeforeUse, base: r.base, size: r.size, this: this, other: other})
			}
		}
		this.ep = epoch{ss.idx, ss.clock.tick(ss.idx)}
		r.live, r.free, r.lastWrite, r.reads = false, this, site{}, nil
		z.freed.push(r)
		z.evict()
	}
	z.mu.Unlock()
	g.hooked.Delete(id)
	return z.deliver(ps)
}
