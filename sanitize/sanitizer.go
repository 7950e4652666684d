// Package sanitize is a stream-order sanitizer: it watches the stream
// operations of a program (allocations, frees, declared uses, event
// records and waits, synchronizations) and reports, with the call stacks of
// both sides, the orderings that are missing:
//
//   - a use on a stream not ordered after the allocation (UseBeforeAlloc);
//   - a use of memory already freed (UseAfterFree);
//   - a free not ordered after a use on another stream (FreeBeforeUse);
//   - memory handed to a new owner before the previous free is ordered
//     before it (ReuseBeforeFree);
//   - two uses on different streams, one a write, unordered (Race);
//   - a use reaching past its allocation (OutOfBounds).
//
// It needs no driver support: it only observes calls, so it works the same
// on the simulator and on a GPU.
//
// # What it sees
//
// Three front ends feed one Sanitizer:
//
//   - Resource, an mr adaptor over any resource, sees every allocation and
//     free, and implements buf.Observer, so buffers made from it report
//     every use they declare (and, when the device is not instrumented,
//     every event they record or wait on).
//   - Device wraps a gpu.Device. Streams and events made through it report
//     records, waits and host synchronizations, so the orderings made by the
//     caller's own code, by buffers and by resources built on the wrapped
//     device (a pool ordering a reuse with an event) are all seen. It also
//     models the driver's stream-ordered pool (driverpool.go): memory the
//     driver hands out again is ordered after its free, as the driver
//     guarantees. Other memory operations pass through unobserved: uses
//     are what buffers declare.
//   - Methods for code that uses raw handles: Use, Synchronize,
//     SynchronizeEvent, SynchronizeDevice, RecordEvent and WaitEvent.
//
// # The model
//
// Happens-before is kept with vector clocks (clock.go): one per stream,
// one per recorded event (a copy of its stream's clock at the record), and
// one for the host. A wait joins the event's clock into the stream's. A
// host synchronization (stream, event, device, or a Query that reports
// completion) joins the completed clock into the host's, and every later
// operation on any stream joins the host's clock first: work enqueued after
// the host saw something complete is ordered after it. The host is one
// participant for the whole process; orderings between goroutines are not
// modelled (that can hide a bug, never invent one).
//
// Each allocation is a region (index.go) holding the epoch and stack of its
// allocation, its last write and the reads since (as buffers track them),
// and after the free the free's epoch and stack; freed regions are
// remembered (up to Options.MaxFreed, oldest first out) to catch uses after
// free and early reuse, and are trimmed away where a new allocation covers
// them.
//
// A free is modelled as streamalloc's resources implement it (a free on
// another stream than the allocation's is ordered after that stream by an
// event): Deallocate(p, n, s) is ordered after all work enqueued on p's
// allocation stream before the call, so only uses on third streams need
// the caller's ordering. Options.StrictCrossStreamFree
// drops that assumption, for resources that do not give it.
//
// # Reports
//
// With Options.OnReport set, each report goes to it and the operation
// proceeds. Without it, the operation that revealed the hazard is refused
// and returns the *Report as its error: a use is not enqueued (buf
// enqueues nothing), a free is not made (the buffer stays open), an
// allocation is given back. Reports match their Kind with errors.Is.
//
// # CUDA graphs
//
// Work captured on the streams of an instrumented Device is not checked
// when it is captured (it does not run then): it is recorded as a graph
// with the capture's edges, checked on its own when the capture ends (two
// nodes the graph leaves unordered that conflict), and checked again at
// every launch against the world outside, each launch's nodes ordered
// after the launch stream's earlier work and the executable's previous
// launch, and among themselves by the graph's edges; the launch stream's
// later work is ordered after all of them. A graph that reads memory
// freed before the launch, or handed to someone else since, is a
// UseAfterFree; memory the graph allocates is allocated at each launch.
// graph.go has the details and what is not modelled.
//
// A Sanitizer is safe for concurrent use; one mutex guards its state, and
// stacks are captured and symbolized outside it. Callbacks run without it
// held, in the goroutine of the operation.
package sanitize

import (
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
)

// Options configure a Sanitizer. The zero value returns reports as errors,
// keeps 16 frames per stack and remembers 8192 freed regions.
type Options struct {
	// OnReport, if set, receives every report, and the operation goes on.
	// If nil, reported operations are refused and return the report.
	OnReport func(*Report)
	// StackDepth is the number of frames kept per operation (at most 16);
	// 0 means 16 and a negative value keeps none, which makes the
	// sanitizer much cheaper and its reports anonymous.
	StackDepth int
	// MaxFreed bounds the freed regions remembered; 0 means 8192.
	MaxFreed int
	// StrictCrossStreamFree stops assuming that a resource orders a free
	// after the allocation's stream (see the package comment).
	StrictCrossStreamFree bool
	// UpstreamOrdersReuse says that the resource may hand memory freed on
	// one stream to another stream before the free is ordered there,
	// because it makes the allocating stream wait on the free itself (the
	// driver's pool with internal dependencies allowed does). The
	// sanitizer then models that wait instead of reporting
	// ReuseBeforeFree. Without it, such a reuse is still accepted when the
	// freeing stream has no work left (the free has completed). Resource
	// sets it by itself over a driver pool that allows such reuse.
	UpstreamOrdersReuse bool
}

const (
	defaultDepth    = 16
	defaultMaxFreed = 8192
)

// Sanitizer holds the happens-before state of one program (or test).
type Sanitizer struct {
	opts     Options
	depth    int
	maxFreed int
	reports  atomic.Int64

	mu      sync.Mutex
	streams map[uint64]*streamState
	byIdx   []*streamState
	host    clock
	hostVer uint64
	events  map[gpu.Event]clock
	idx     index
	freed   freedQueue // the freed regions in idx, oldest first
	scratch []*region

	drv driverPool // the driver's pools, as the instrumented devices see them

	devMu   sync.Mutex
	devices map[gpu.Device]*Device

	graphs graphState // captures and graphs (graph.go), under mu
}

type streamState struct {
	idx     int
	id      uint64
	raw     gpu.Stream // unwrapped, for Query
	dev     gpu.Device // raw device, for device synchronization
	clock   clock
	hostVer uint64
}

// site is one observed operation.
type site struct {
	ep   epoch
	sid  uint64
	op   string
	ptr  gpu.DevicePtr
	size int
	st   stack
}

// region is one allocation, live or freed.
type region struct {
	base gpu.DevicePtr
	size int
	live bool
	dead bool // no longer in the index (evicted, trimmed or reused)
	// graph: allocated by a graph launch (graph.go); a free of it is not
	// ordered after the graph by the resource, so checkFree does not
	// assume it.
	graph bool

	allocStream *streamState
	alloc, free site
	lastWrite   site // ep.t == 0: none since the allocation
	reads       []site

	left, right *region
	prio        uint64

	freeClock clock // a range the driver's pool freed: its free's clock (driverpool.go)
}

// New returns a Sanitizer configured by opts.
func New(opts Options) *Sanitizer {
	z := &Sanitizer{
		opts:     opts,
		depth:    opts.StackDepth,
		maxFreed: opts.MaxFreed,
		streams:  make(map[uint64]*streamState),
		events:   make(map[gpu.Event]clock),
		devices:  make(map[gpu.Device]*Device),
	}
	if z.depth == 0 {
		z.depth = defaultDepth
	}
	if z.maxFreed <= 0 {
		z.maxFreed = defaultMaxFreed
	}
	return z
}

// Count is the number of hazards reported so far.
func (z *Sanitizer) Count() int { return int(z.reports.Load()) }

// stream returns s's state, creating it on first sight; z.mu is held.
func (z *Sanitizer) stream(s gpu.Stream) *streamState {
	id := s.ID()
	if st, ok := z.streams[id]; ok {
		return st
	}
	raw := unwrapStream(s)
	st := &streamState{idx: len(z.byIdx), id: id, raw: raw, dev: raw.Device(), hostVer: z.hostVer}
	st.clock.join(z.host)
	z.streams[id] = st
	z.byIdx = append(z.byIdx, st)
	return st
}

// joinHost brings st up to what the host has seen complete; z.mu is held.
func (z *Sanitizer) joinHost(st *streamState) {
	if st.hostVer != z.hostVer {
		st.clock.join(z.host)
		st.hostVer = z.hostVer
	}
}

// pending is a report built under the lock and finished outside it.
type pending struct {
	kind        Kind
	base        gpu.DevicePtr
	size        int
	this, other site
}

func (z *Sanitizer) note(out []pending, k Kind, r *region, this, other *site) []pending {
	return append(out, pending{kind: k, base: r.base, size: r.size, this: *this, other: *other})
}

// deliver turns pending reports into Reports and hands them to the
// callback; without one it returns the first as an error. Called without
// z.mu.
func (z *Sanitizer) deliver(ps []pending) error {
	if len(ps) == 0 {
		return nil
	}
	z.reports.Add(int64(len(ps)))
	var first *Report
	for i := range ps {
		p := &ps[i]
		r := &Report{
			Kind: p.kind, Alloc: p.base, AllocSize: p.size,
			This:  side(&p.this),
			Other: side(&p.other),
		}
		if z.opts.OnReport != nil {
			z.opts.OnReport(r)
		} else if first == nil {
			first = r
		}
	}
	if first != nil {
		return first
	}
	return nil
}

func side(s *site) Side {
	return Side{Op: s.op, Stream: s.sid, Ptr: s.ptr, Size: s.size, Stack: s.st.frames()}
}

// refuse reports whether reported operations are refused.
func (z *Sanitizer) refuse() bool { return z.opts.OnReport == nil }

// use checks and records a use; see buf.Observer.ObserveUse.
func (z *Sanitizer) use(p gpu.DevicePtr, n int, s gpu.Stream, a buf.Access, st *stack) error {
	this := site{sid: s.ID(), op: a.String(), ptr: p, size: n}
	this.st = *st
	var ps []pending
	z.mu.Lock()
	ss := z.stream(s)
	z.joinHost(ss)
	r := z.idx.containing(p)
	if r == nil {
		// Memory this sanitizer never saw allocated (another resource,
		// or a freed region it has forgotten): nothing to check.
		z.mu.Unlock()
		return nil
	}
	c := ss.clock
	if !r.live {
		ps = z.note(ps, UseAfterFree, r, &this, &r.free)
	} else {
		if n > 0 && uint64(p-r.base)+uint64(n) > uint64(r.size) {
			ps = z.note(ps, OutOfBounds, r, &this, &r.alloc)
		}
		if !r.alloc.ep.before(c) {
			ps = z.note(ps, UseBeforeAlloc, r, &this, &r.alloc)
		}
		if !r.lastWrite.ep.before(c) {
			ps = z.note(ps, Race, r, &this, &r.lastWrite)
		}
		if a.Writes() {
			for i := range r.reads {
				if !r.reads[i].ep.before(c) {
					ps = z.note(ps, Race, r, &this, &r.reads[i])
				}
			}
		}
	}
	if len(ps) > 0 && z.refuse() {
		z.mu.Unlock()
		return z.deliver(ps)
	}
	this.ep = epoch{ss.idx, ss.clock.tick(ss.idx)}
	if r.live {
		if a.Writes() {
			r.lastWrite = this
			r.reads = r.reads[:0]
		} else {
			replaced := false
			for i := range r.reads {
				if r.reads[i].ep.idx == ss.idx {
					r.reads[i], replaced = this, true
					break
				}
			}
			if !replaced {
				r.reads = append(r.reads, this)
			}
		}
	}
	z.mu.Unlock()
	return z.deliver(ps)
}

// allocated checks and records an allocation the upstream just made. It
// returns an error only in refusing mode, and then has recorded nothing.
func (z *Sanitizer) allocated(p gpu.DevicePtr, n int, s gpu.Stream, st *stack, ordersReuse bool) error {
	if p == 0 {
		return nil // the null allocation of size 0
	}
	this := site{sid: s.ID(), op: "allocation", ptr: p, size: n}
	this.st = *st
	var ps []pending
	z.mu.Lock()
	ss := z.stream(s)
	z.joinHost(ss)
	over := z.idx.overlapping(p, max(n, 1), z.scratch[:0])
	for _, r := range over {
		if r.live {
			prev := r.alloc
			prev.op = "allocation (not freed)"
			ps = z.note(ps, ReuseBeforeFree, r, &this, &prev)
			continue
		}
		if r.free.ep.before(ss.clock) {
			continue
		}
		fs := z.byIdx[r.free.ep.idx]
		if ordersReuse || (fs.raw != nil && fs.raw.Query() == nil) {
			// The upstream made s wait on the free, or the free has
			// already completed: either way s is now after it.
			ss.clock.join(fs.clock)
			continue
		}
		ps = z.note(ps, ReuseBeforeFree, r, &this, &r.free)
	}
	if len(ps) > 0 && z.refuse() {
		clear(over)
		z.scratch = over[:0]
		z.mu.Unlock()
		return z.deliver(ps)
	}
	z.reclaim(p, n, over)
	this.ep = epoch{ss.idx, ss.clock.tick(ss.idx)}
	z.idx.insert(&region{base: p, size: n, live: true, allocStream: ss, alloc: this})
	z.mu.Unlock()
	return z.deliver(ps)
}

// fragment is a freed region covering [base, base+size) of r.
func (z *Sanitizer) fragment(r *region, base gpu.DevicePtr, size int) *region {
	return &region{base: base, size: size, allocStream: r.allocStream, alloc: r.alloc, free: r.free}
}

// addFreed inserts a freed region and evicts the oldest beyond MaxFreed;
// z.mu is held.
func (z *Sanitizer) addFreed(r *region) {
	z.idx.insert(r)
	z.freed.push(r)
	z.evict()
}

// evict forgets the oldest freed regions beyond MaxFreed; z.mu is held.
func (z *Sanitizer) evict() { z.freed.evict(&z.idx, z.maxFreed) }

// checkFree checks a free about to be made; it returns the region (nil if
// the pointer is not a live allocation this sanitizer knows, which the
// upstream will reject) and the reports. Unless the free is to be refused,
// it also gives the free its epoch: the free happens at the call, before
// whatever the upstream enqueues inside it (an event a pool records after
// a free must cover the free), and after the modelled wait on the
// allocation's stream.
func (z *Sanitizer) checkFree(p gpu.DevicePtr, n int, s gpu.Stream, this *site) (*region, []pending) {
	if p == 0 {
		return nil, nil
	}
	var ps []pending
	z.mu.Lock()
	defer z.mu.Unlock()
	ss := z.stream(s)
	z.joinHost(ss)
	r := z.idx.containing(p)
	if r == nil || !r.live || r.base != p {
		return nil, nil
	}
	c := ss.clock
	cross := !z.opts.StrictCrossStreamFree && r.allocStream != ss && !r.graph
	if cross {
		c = c.clone()
		c.join(r.allocStream.clock)
	}
	if !r.alloc.ep.before(c) {
		ps = z.note(ps, FreeBeforeUse, r, this, &r.alloc)
	}
	if !r.lastWrite.ep.before(c) {
		ps = z.note(ps, FreeBeforeUse, r, this, &r.lastWrite)
	}
	for i := range r.reads {
		if !r.reads[i].ep.before(c) {
			ps = z.note(ps, FreeBeforeUse, r, this, &r.reads[i])
		}
	}
	if len(ps) > 0 && z.refuse() {
		return r, ps
	}
	if cross {
		// The resource orders the free after the allocation's stream.
		ss.clock.join(r.allocStream.clock)
	}
	this.ep = epoch{ss.idx, ss.clock.tick(ss.idx)}
	// The region is freed from now on, not when the upstream returns:
	// the upstream may hand the memory to another goroutine's allocation
	// before this one gets the lock back, and that is no reuse of live
	// memory.
	r.live = false
	r.free = *this
	return r, ps
}

// commitFree finishes a free the upstream made.
func (z *Sanitizer) commitFree(r *region) {
	z.mu.Lock()
	defer z.mu.Unlock()
	r.lastWrite = site{}
	r.reads = nil
	if !r.dead {
		z.freed.push(r) // already indexed
		z.evict()
	}
}

// revertFree undoes checkFree's marking when the upstream refused the
// free: the memory is still the caller's.
func (z *Sanitizer) revertFree(r *region) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !r.dead {
		r.live = true
		r.free = site{}
	}
}

// record notes that e (keyed by its raw handle) was recorded on s.
func (z *Sanitizer) record(key gpu.Event, s gpu.Stream) {
	z.mu.Lock()
	if z.captureRecord(key, s) {
		z.mu.Unlock()
		return
	}
	ss := z.stream(s)
	z.joinHost(ss)
	z.events[key] = append(z.events[key][:0], ss.clock...)
	z.mu.Unlock()
}

// wait notes that s waits on e.
func (z *Sanitizer) wait(s gpu.Stream, key gpu.Event) {
	z.mu.Lock()
	if z.captureWait(s, key) {
		z.mu.Unlock()
		return
	}
	ss := z.stream(s)
	z.joinHost(ss)
	if c, ok := z.events[key]; ok {
		ss.clock.join(c)
	}
	z.mu.Unlock()
}

// hostSawStream notes that the host saw all work on s complete.
func (z *Sanitizer) hostSawStream(s gpu.Stream) {
	z.mu.Lock()
	ss := z.stream(s)
	z.joinHost(ss)
	z.host.join(ss.clock)
	z.hostVer++
	z.mu.Unlock()
}

// hostSawEvent notes that the host saw e complete.
func (z *Sanitizer) hostSawEvent(key gpu.Event) {
	z.mu.Lock()
	if c, ok := z.events[key]; ok {
		z.host.join(c)
		z.hostVer++
	}
	z.mu.Unlock()
}

// hostSawDevice notes that the host saw all work on the raw device dev
// complete.
func (z *Sanitizer) hostSawDevice(dev gpu.Device) {
	z.mu.Lock()
	for _, ss := range z.byIdx {
		if ss.dev == dev {
			z.joinHost(ss)
			z.host.join(ss.clock)
		}
	}
	z.hostVer++
	z.mu.Unlock()
}

// forget drops an event's clock (the event was destroyed).
func (z *Sanitizer) forget(key gpu.Event) {
	z.mu.Lock()
	delete(z.events, key)
	delete(z.graphs.events, key)
	z.mu.Unlock()
}
