// Package replay replays an allocation trace against a memory resource
// and measures what the resource did with it: peak reserved memory next
// to the trace's peak live memory (their ratio is the fragmentation), the
// host time per allocation and free, and the allocations it refused.
//
// # What a replay keeps
//
// Order, sizes and streams. Events are replayed one at a time in the
// trace's order, on the calling goroutine (a multi-threaded log is
// serialized in the order it was written). Each distinct stream id of the
// trace becomes one stream of the device, created when the trace first
// uses it; every allocation and free is made on the stream of its event,
// so a block allocated on one stream and freed on another exercises the
// resource's cross-stream path as the program did. Addresses of the trace
// are only names: the replay keeps a table from trace address to the
// block the resource returned.
//
// # What a replay forgives
//
// A trace is evidence, not a specification, and real logs are cut short
// or start late. A free of an address that is not live is counted
// (UnknownFrees) and skipped. An allocation the resource refuses with
// mr.ErrOutOfMemory is counted (Failures) and the replay goes on; the
// trace's later free of that address is then skipped quietly. An address
// allocated twice without a free in between is freed first. Blocks the
// trace never frees are freed after the last event. Anything else the
// resource or the device returns (a refused free, a failed stream) stops
// the replay with an error naming the trace line.
//
// # Cleanup
//
// On every path, success, error or cancellation, Run frees every block it
// still holds on the stream it was allocated on, asks the resource to
// release what it caches if it is an mr.Releaser (a cache may be tied to
// the replay's streams), then synchronizes each stream it created and
// destroys it. Nothing the replay allocated outlives Run. Peaks are
// measured before the release. A resource that caches per stream but
// cannot be reached through Releaser (hidden behind an adaptor that does
// not forward Release) should not be used again after Run: its cache
// refers to destroyed streams. Give each replay a fresh resource.
//
// # What a replay records
//
// Always the Result's counts and peaks; with Options.SeriesPoints a
// bounded series of live and reserved bytes; with Options.Timeline the
// event-by-event record a viewer draws (timeline.go): every block's life
// and address, the allocation stacks of a trace that has them, the
// reserved bytes at each change and the resource's segments over time.
package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// block is a live allocation of the replay. It is held inline in the
// table of live blocks (idtable.go), 32 bytes with its key, two slots to a
// cache line, so that the lookup at every event touches one line or two.
type block struct {
	p    gpu.DevicePtr
	size int64
	// at holds the allocation's place in the trace's allocations (its
	// seq: the final frees go in that order, so that they are
	// deterministic) above the number of its stream (its index in
	// runner.order).
	at uint64
}

// A replay numbers up to maxStreams streams and maxSeq allocations: a
// trace with more (16.7 million streams; a trillion allocations, tens of
// terabytes of CSV) is refused with an error matching ErrTraceTooLarge
// when it reaches the limit.
const (
	streamBits = 24
	maxStreams = 1 << streamBits
	maxSeq     = 1<<(64-streamBits) - 1
)

// streamLimit and seqLimit are the limits Run enforces: maxStreams and
// maxSeq, which a block's at word packs. Tests lower them to reach the
// errors without a trace of that size.
var (
	streamLimit = maxStreams
	seqLimit    = int64(maxSeq)
)

// ErrTraceTooLarge is matched by the error of a trace with more streams
// or allocations than a replay numbers.
var ErrTraceTooLarge = errors.New("replay: trace beyond the replay's limits")

func (b block) stream() uint32 { return uint32(b.at & (maxStreams - 1)) }
func (b block) seq() uint64    { return b.at >> streamBits }

type runner struct {
	ctx  context.Context
	tr   trace.Reader
	dev  gpu.Device
	res  mr.Resource
	rep  mr.UsageReporter // nil if res does not report usage
	opts Options

	// The trace's streams, numbered in the order the trace first used
	// them: streams maps the trace's id to the number, order and sids
	// hold each number's device stream and trace id.
	streams  idTable[uint32]
	order    []gpu.Stream // creation order, for cleanup
	sids     []uint64
	lastID   uint64
	lastIdx  uint32
	lastLive bool // lastID and lastIdx are set

	live   idTable[block]   // trace address -> block the resource gave
	failed map[uint64]int64 // trace address -> size, refused by the resource

	// epoch: the calls are timed as offsets from it, each a read of the
	// monotonic clock alone (time.Now reads the wall clock too).
	epoch time.Time

	// The events read ahead (next): ahead[pos:], then aheadErr, the
	// reader's error after them (sticky, as the reader's own is); depth
	// events at a time. touched sums what next's touches load, so that
	// the loads stay.
	depth    int
	ahead    []trace.Event
	aheadPos int
	aheadErr error
	touched  uint64

	traceLive uint64 // bytes live by the trace's account
	heldLive  uint64 // bytes the replay holds from the resource
	peakRes   uint64
	resTime   time.Duration
	calls     int64
	// upTime and upCalls: Options.Upstream's time and calls during the
	// timed calls, less up0 and upCalls0, its counters when Run began.
	upTime, up0       time.Duration
	upCalls, upCalls0 int64
	// lastReserved is the reserved bytes last read from rep, after the
	// upstream's polledCalls-th call (sample).
	lastReserved uint64
	polledCalls  int64
	series       *series
	tl           *timeline // nil unless Options.Timeline
	clock        *clock    // nil unless Options.Timed

	r Result
}

// Run replays tr against res on dev and reports what it measured. It
// returns an error for a trace that cannot be read (a *trace.ParseError),
// for one with more streams or allocations than a replay numbers
// (ErrTraceTooLarge), for a resource or device that fails other than by running out of
// memory, and for ctx's cancellation; in every case it first frees what
// it allocated and destroys the streams it created (see the package
// comment).
func Run(ctx context.Context, tr trace.Reader, dev gpu.Device, res mr.Resource, opts Options) (*Result, error) {
	if tr == nil || dev == nil || res == nil {
		return nil, errors.New("replay: nil trace, device or resource")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	r := &runner{
		ctx: ctx, tr: tr, dev: dev, res: res, opts: opts,
		failed: make(map[uint64]int64),
		epoch:  start,
	}
	r.r.Trace = tr.Name()
	r.r.Resource = opts.Resource
	if r.r.Resource == "" {
		r.r.Resource = fmt.Sprintf("%T", res)
	}
	props := dev.Properties()
	r.r.Device = opts.Device
	if r.r.Device == "" {
		r.r.Device = props.Name
	}
	r.r.Simulated = props.Simulated
	// Adaptors (logging, the sanitizer) seldom report usage themselves:
	// the first resource of the chain that does speaks for the stack.
	fresh := false
	for _, c := range mr.Chain(res) {
		if rep, ok := c.(mr.UsageReporter); ok {
			r.rep = rep
			u := rep.Usage()
			fresh = u.PeakReserved == 0
			r.peakRes = u.Reserved
			break
		}
	}
	if opts.SeriesPoints > 0 {
		r.series = newSeries(opts.SeriesPoints)
	}
	r.depth = readAhead
	if opts.Timeline {
		r.tl = newTimeline(opts, tr, res)
		// The timeline asks a StackReader for the stack of the event
		// it returned last: read one event at a time.
		r.depth = 1
	}
	if opts.Timed {
		scale := opts.TimeScale
		if scale == 0 {
			scale = 1
		}
		c, err := newClock(dev, scale, opts.TimedMinKernel)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		r.clock = c
	}
	if r.opts.ProgressEvery <= 0 {
		r.opts.ProgressEvery = 1 << 16
	}

	if opts.Upstream != nil {
		r.up0, r.upCalls0 = opts.Upstream.Elapsed()
	}
	err := r.loop()
	if err == nil {
		r.progress(true)
	}
	// Free what the trace left live, then take the streams down.
	r.r.FreedAtEnd = int64(r.live.len())
	err = errors.Join(err, r.cleanup())
	if err != nil {
		return nil, err
	}

	if r.rep != nil && fresh {
		r.peakRes = max(r.peakRes, r.rep.Usage().PeakReserved)
	}
	r.r.PeakReservedBytes = r.peakRes
	if p, ok := r.res.(interface{ Stats() mr.PoolStats }); ok {
		st := p.Stats()
		r.r.Pool = &st
	}
	if r.r.PeakLiveBytes > 0 {
		r.r.Fragmentation = float64(r.r.PeakReservedBytes) / float64(r.r.PeakLiveBytes)
	}
	if r.calls > 0 {
		r.r.NsPerEvent = float64(r.resTime.Nanoseconds()) / float64(r.calls)
		r.r.UpstreamNsPerEvent = float64(r.upTime.Nanoseconds()) / float64(r.calls)
		r.r.OwnNsPerEvent = max(0, r.r.NsPerEvent-r.r.UpstreamNsPerEvent)
	}
	if opts.Upstream != nil {
		r.r.Upstream = opts.Upstream.Name()
		r.r.UpstreamCalls = r.upCalls
		r.r.PeakUpstreamReservedBytes = opts.Upstream.PeakReserved()
	}
	r.r.Streams = len(r.order)
	if r.series != nil {
		r.r.Series = r.series.samples()
	}
	if r.tl != nil {
		r.r.Timeline = r.tl.finish()
	}
	if r.clock != nil {
		r.r.Timed = true
		r.r.TimedBehind = r.clock.behind
		r.r.TimedKernels = r.clock.spins
		r.r.TimedWork = r.clock.spun
	}
	r.r.Wall = time.Since(start)
	return &r.r, nil
}

// loop replays every event of the trace.
func (r *runner) loop() error {
	for i := int64(0); ; i++ {
		if i&1023 == 0 {
			if err := r.ctx.Err(); err != nil {
				return fmt.Errorf("replay: %s: stopped after %d events: %w", r.r.Trace, i, err)
			}
		}
		ev, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		r.r.Events++
		if r.clock != nil && ev.Op != trace.AllocFailure {
			if err := r.timed(ev); err != nil {
				return fmt.Errorf("replay: %s:%d: %w", r.r.Trace, ev.Line, err)
			}
		}
		switch ev.Op {
		case trace.Alloc:
			err = r.alloc(ev)
		case trace.Free:
			err = r.free(ev)
		case trace.AllocFailure:
			r.r.TraceFailures++
		default:
			err = fmt.Errorf("event with invalid op %v", ev.Op)
		}
		if err != nil {
			return fmt.Errorf("replay: %s:%d: %w", r.r.Trace, ev.Line, err)
		}
		reserved := r.sample(i, ev.Time)
		if r.tl != nil {
			r.tl.after(ev, reserved)
		}
		if r.opts.Progress != nil && r.r.Events%int64(r.opts.ProgressEvery) == 0 {
			r.progress(false)
		}
	}
}

// readAhead is how many events next reads at once.
const readAhead = 16

// next returns the trace's next event, or its error once the events
// before it are done. It reads readAhead events at a time (one with a
// timeline, which reads each event's stack from the reader) and touches the
// slot of the table of live blocks where each one's address will be
// looked up: the trace's addresses are random across a table of many
// megabytes, so each lookup would wait for memory alone, while these
// loads, independent of each other, wait together. Only the replay's own
// table is touched, never the resource's memory, so the resource's time
// per call is what it would be without the touches.
func (r *runner) next() (trace.Event, error) {
	if r.aheadPos == len(r.ahead) {
		if r.aheadErr != nil {
			return trace.Event{}, r.aheadErr
		}
		r.ahead, r.aheadPos = r.ahead[:0], 0
		for len(r.ahead) < r.depth {
			ev, err := r.tr.Next()
			if err != nil {
				r.aheadErr = err
				break
			}
			r.ahead = append(r.ahead, ev)
		}
		if len(r.ahead) == 0 {
			return trace.Event{}, r.aheadErr
		}
		for i := range r.ahead {
			r.touched += r.live.touch(r.ahead[i].Ptr)
		}
	}
	ev := r.ahead[r.aheadPos]
	r.aheadPos++
	return ev, nil
}

func (r *runner) alloc(ev trace.Event) error {
	r.r.Allocations++
	if ev.Size > math.MaxInt {
		return fmt.Errorf("allocation of %d bytes does not fit an int", ev.Size)
	}
	if r.r.Allocations > seqLimit {
		return fmt.Errorf("a replay numbers at most %d allocations: %w", seqLimit, ErrTraceTooLarge)
	}
	si, err := r.stream(ev.Stream)
	if err != nil {
		return err
	}
	s := r.order[si]
	if r.tl != nil {
		r.tl.end(ev.Ptr, ev.Stream) // a block the trace did not free ends here
	}
	// An address still live: its free is missing from the trace.
	if old, ok := r.live.get(ev.Ptr); ok {
		r.r.DuplicateAllocations++
		if err := r.release(ev.Ptr, old, r.order[old.stream()]); err != nil {
			return err
		}
	} else if size, ok := r.failed[ev.Ptr]; ok {
		r.r.DuplicateAllocations++
		delete(r.failed, ev.Ptr)
		r.traceLive -= uint64(size)
	}
	r.traceLive += uint64(ev.Size)
	r.r.PeakLiveBytes = max(r.r.PeakLiveBytes, r.traceLive)

	t0 := time.Since(r.epoch)
	p, err := r.res.Allocate(int(ev.Size), s)
	r.resTime += time.Since(r.epoch) - t0
	r.calls++
	if err != nil {
		if errors.Is(err, mr.ErrOutOfMemory) {
			r.r.Failures++
			r.failed[ev.Ptr] = ev.Size
			if r.tl != nil {
				r.tl.alloc(ev, 0, true)
			}
			return nil
		}
		r.traceLive -= uint64(ev.Size)
		return fmt.Errorf("allocate %d bytes on trace stream %#x: %w", ev.Size, ev.Stream, err)
	}
	r.live.put(ev.Ptr, block{p: p, size: ev.Size, at: uint64(r.r.Allocations)<<streamBits | uint64(si)})
	r.heldLive += uint64(ev.Size)
	if r.tl != nil {
		r.tl.alloc(ev, uint64(p), false)
	}
	return nil
}

func (r *runner) free(ev trace.Event) error {
	r.r.Frees++
	if r.tl != nil {
		r.tl.end(ev.Ptr, ev.Stream)
	}
	b, ok := r.live.get(ev.Ptr)
	if !ok {
		if size, ok := r.failed[ev.Ptr]; ok {
			// The resource refused this block; the trace's free of
			// it is not an unknown free.
			delete(r.failed, ev.Ptr)
			r.traceLive -= uint64(size)
			return nil
		}
		r.r.UnknownFrees++
		return nil
	}
	// Most frees are on the allocation's stream: no lookup then.
	si := b.stream()
	if r.sids[si] != ev.Stream {
		var err error
		if si, err = r.stream(ev.Stream); err != nil {
			return err
		}
	}
	return r.release(ev.Ptr, b, r.order[si])
}

// release frees b (live under trace address addr) on s.
func (r *runner) release(addr uint64, b block, s gpu.Stream) error {
	t0 := time.Since(r.epoch)
	err := r.res.Deallocate(b.p, int(b.size), s)
	r.resTime += time.Since(r.epoch) - t0
	r.calls++
	if err != nil {
		return fmt.Errorf("free %#x (%d bytes): %w", addr, b.size, err)
	}
	r.live.delete(addr)
	r.traceLive -= uint64(b.size)
	r.heldLive -= uint64(b.size)
	return nil
}

// timed keeps a timed replay to the trace's schedule before ev
// (timed.go).
func (r *runner) timed(ev trace.Event) error {
	si, err := r.stream(ev.Stream)
	if err != nil {
		return err
	}
	return r.clock.before(r, ev.Time, r.order[si])
}

// stream returns the number of the device stream standing for trace
// stream id (its index in r.order), creating the stream on first use.
func (r *runner) stream(id uint64) (uint32, error) {
	if r.lastLive && r.lastID == id {
		return r.lastIdx, nil
	}
	si, ok := r.streams.get(id)
	if !ok {
		if len(r.order) >= streamLimit {
			return 0, fmt.Errorf("create a stream for trace stream %#x: a replay numbers at most %d streams: %w",
				id, streamLimit, ErrTraceTooLarge)
		}
		s, err := r.dev.NewStream()
		if err != nil {
			return 0, fmt.Errorf("create a stream for trace stream %#x: %w", id, err)
		}
		si = uint32(len(r.order))
		r.streams.put(id, si)
		r.order = append(r.order, s)
		r.sids = append(r.sids, id)
		if r.tl != nil {
			r.tl.deviceStream(s.ID(), id)
		}
	}
	r.lastID, r.lastIdx, r.lastLive = id, si, true
	return si, nil
}

// sample records the state after event i and returns the reserved bytes.
func (r *runner) sample(i int64, t time.Duration) uint64 {
	reserved := r.heldLive
	switch {
	case r.rep == nil:
	case r.opts.Upstream == nil:
		reserved = r.rep.Usage().Reserved
	default:
		// A suballocator's reserved bytes change only through its
		// upstream: ask it again only after events that called it.
		if n := r.opts.Upstream.Calls(); n != r.polledCalls || i == 0 {
			r.lastReserved, r.polledCalls = r.rep.Usage().Reserved, n
		}
		reserved = r.lastReserved
	}
	r.peakRes = max(r.peakRes, reserved)
	if r.series != nil {
		r.series.add(i, t, r.traceLive, reserved)
	}
	return reserved
}

func (r *runner) progress(final bool) {
	if r.opts.Progress == nil {
		return
	}
	p := Progress{Events: r.r.Events, Final: final}
	if pr, ok := r.tr.(trace.Progresser); ok {
		p.Done, p.Total = pr.Progress()
	}
	r.opts.Progress(p)
}

// cleanup frees every live block on its allocation stream, releases what
// the resource caches (mr.Releaser), then synchronizes and destroys the
// streams. It goes on past errors so that
// one failure does not strand the rest, and returns them all.
func (r *runner) cleanup() error {
	var errs []error
	type held struct {
		addr uint64
		b    block
	}
	left := make([]held, 0, r.live.len())
	r.live.each(func(addr uint64, b block) { left = append(left, held{addr, b}) })
	slices.SortFunc(left, func(x, y held) int { return cmp.Compare(x.b.seq(), y.b.seq()) })
	for _, h := range left {
		if err := r.release(h.addr, h.b, r.order[h.b.stream()]); err != nil {
			errs = append(errs, fmt.Errorf("replay: %s: at the end: %w", r.r.Trace, err))
		}
	}
	// The upstream's time counts up to here: Release below is not timed.
	if r.opts.Upstream != nil {
		d, n := r.opts.Upstream.Elapsed()
		r.upTime, r.upCalls = d-r.up0, n-r.upCalls0
	}
	// A caching resource may hold memory whose reuse is tied to the
	// streams about to be destroyed; give it back while they still work.
	if rel, ok := r.res.(mr.Releaser); ok {
		if err := rel.Release(); err != nil {
			errs = append(errs, fmt.Errorf("replay: %s: release: %w", r.r.Trace, err))
		}
	}
	for _, s := range r.order {
		if err := s.Synchronize(); err != nil {
			errs = append(errs, fmt.Errorf("replay: %s: synchronize: %w", r.r.Trace, err))
		}
		if err := s.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("replay: %s: destroy stream: %w", r.r.Trace, err))
		}
	}
	return errors.Join(errs...)
}
