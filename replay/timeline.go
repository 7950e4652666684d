// The timeline of a replay: the life of every block, the resource's
// reserved bytes at every change and, for a resource that reports them
// (mr.SegmentReporter), its segments over time, so that a report can show
// what was live at any moment, where the resource put it and which block
// kept which segment reserved.
//
// The recorder sits beside the runner and is called from four places: an
// allocation (granted or refused), the end of a block's life (a free, or a
// duplicate allocation of its address), the creation of a device stream,
// and the end of every event. It is nil unless Options.Timeline is set, so
// a replay that does not ask pays one nil check per call site.
//
// Invariants:
//   - Event indexes count from 0 in trace order, as Sample.Event does; the
//     timeline covers events [0, Events). Past TimelineEvents nothing is
//     recorded (Truncated), and blocks still open then keep Free == -1.
//   - Blocks are in allocation order, so Alloc never decreases; a block is
//     open (Free == -1) until the trace frees its address, allocates the
//     address again (the older block ends there, as the replay frees it), or
//     the timeline ends. Refused allocations are blocks too (Failed, Addr
//     0): the trace's live bytes count them until their free, as
//     Result.PeakLiveBytes does.
//   - Reserved holds a step at event 0 and at every event after which the
//     resource's reserved bytes differ from the step before; between steps
//     the value holds.
//   - A SegmentSpan is a segment (base, size, owning stream) that existed
//     unchanged after every event from From through To-1; To is -1 if it
//     still existed after the last recorded event. The segments are polled
//     after every event (AppendSegments takes no lock and allocates
//     nothing) and compared with the open spans; a change of owner closes
//     the span and opens another.

package replay

import (
	"slices"
	"time"

	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// DefaultTimelineEvents is the number of events a timeline covers when
// Options.TimelineEvents is 0: about 150 MB of timeline for a trace of
// allocations and frees, ample for an interactive page.
const DefaultTimelineEvents = 1 << 21

// maxTimelineEvents keeps event indexes in an int32 (the report stores
// them so).
const maxTimelineEvents = 1<<31 - 1

// Timeline is what a replay recorded, event by event, with
// Options.Timeline.
type Timeline struct {
	// Events is the number of events covered, from the first: all of the
	// trace's, or TimelineEvents if the trace is longer (Truncated).
	Events    int64
	Truncated bool
	// Times[i] is the trace's time of event i (trace.Event.Time: the
	// time of day of an RMM log, time_us of a snapshot); nil if the
	// trace gives every event time 0.
	Times []time.Duration
	// Streams are the trace's stream IDs in the order of their first
	// event; Block and SegmentSpan refer to them by index.
	Streams []uint64
	// Blocks are the trace's allocations, in order.
	Blocks []Block
	// Reserved is the resource's reserved bytes (as Result's peak: the
	// first mr.UsageReporter of its chain, else the bytes the replay
	// held) at event 0 and after every event that changed it.
	Reserved []Step
	// SegmentsKnown says whether the resource reports its segments (the
	// first mr.SegmentReporter of its chain); Segments is then their
	// history.
	SegmentsKnown bool
	Segments      []SegmentSpan
	// Stacks are the distinct allocation stacks of the trace, if it
	// records them (trace.StackReader); Block.Stack indexes it.
	Stacks [][]trace.Frame
}

// Block is the life of one allocation of the trace.
type Block struct {
	// Alloc is the event that allocated it; Free the event that ended it,
	// or -1 if the trace did not free it within the timeline.
	Alloc, Free int64
	// Size is the size the trace asked for.
	Size int64
	// Stream and FreeStream index Timeline.Streams: the streams of the
	// allocation and of the free (-1 while Free is -1).
	Stream, FreeStream int32
	// Addr is the pointer the resource returned, 0 if it refused the
	// allocation (Failed) or the size was 0.
	Addr   uint64
	Failed bool
	// Stack indexes Timeline.Stacks, -1 if the trace recorded none.
	Stack int32
}

// Step is a value from event Event on.
type Step struct {
	Event int64
	Bytes uint64
}

// SegmentSpan is one segment of the resource over the events it existed
// unchanged through.
type SegmentSpan struct {
	Base uint64
	Size int64
	// Stream indexes Timeline.Streams: the stream that owned the
	// segment, -1 if none (idle in a shared cache, or a resource whose
	// segments belong to no stream).
	Stream int32
	// From is the first event after which the segment existed; To the
	// first after which it no longer did, or -1.
	From, To int64
}

// timeline records a Timeline; nil when the replay does not ask for one.
type timeline struct {
	t       Timeline
	limit   int64
	event   int64 // index of the event being replayed
	stacks  trace.StackReader
	segRep  mr.SegmentReporter
	timed   bool
	streams map[uint64]int32 // trace stream ID -> index in t.Streams
	devices map[uint64]int32 // device stream ID -> index in t.Streams
	open    map[uint64]int32 // trace address -> index of its open block
	stackID map[*trace.Frame]int32
	segs    []mr.Segment         // the latest poll
	prev    []mr.Segment         // the poll before
	openSeg map[mr.Segment]int32 // open span of each segment -> index in t.Segments
}

func newTimeline(opts Options, tr trace.Reader, res mr.Resource) *timeline {
	limit := int64(opts.TimelineEvents)
	if limit <= 0 {
		limit = DefaultTimelineEvents
	}
	tl := &timeline{
		limit:   min(limit, maxTimelineEvents),
		streams: map[uint64]int32{},
		devices: map[uint64]int32{},
		open:    map[uint64]int32{},
		stackID: map[*trace.Frame]int32{},
		openSeg: map[mr.Segment]int32{},
	}
	tl.stacks, _ = tr.(trace.StackReader)
	for _, c := range mr.Chain(res) {
		if sr, ok := c.(mr.SegmentReporter); ok {
			tl.segRep = sr
			tl.t.SegmentsKnown = true
			break
		}
	}
	return tl
}

// recording reports whether the current event is within the timeline.
func (tl *timeline) recording() bool { return tl.event < tl.limit }

// stream returns the index of trace stream id, adding it on first use.
func (tl *timeline) stream(id uint64) int32 {
	i, ok := tl.streams[id]
	if !ok {
		i = int32(len(tl.t.Streams))
		tl.t.Streams = append(tl.t.Streams, id)
		tl.streams[id] = i
	}
	return i
}

// deviceStream notes that device stream devID replays trace stream id.
func (tl *timeline) deviceStream(devID, id uint64) { tl.devices[devID] = tl.stream(id) }

// alloc records an allocation of ev: granted at p, or refused (failed).
func (tl *timeline) alloc(ev trace.Event, p uint64, failed bool) {
	if !tl.recording() {
		return
	}
	b := Block{Alloc: tl.event, Free: -1, Size: ev.Size, Stream: tl.stream(ev.Stream), FreeStream: -1,
		Addr: p, Failed: failed, Stack: -1}
	if tl.stacks != nil {
		if st := tl.stacks.Stack(); len(st) > 0 {
			id, ok := tl.stackID[&st[0]]
			if !ok {
				id = int32(len(tl.t.Stacks))
				tl.t.Stacks = append(tl.t.Stacks, st)
				tl.stackID[&st[0]] = id
			}
			b.Stack = id
		}
	}
	tl.open[ev.Ptr] = int32(len(tl.t.Blocks))
	tl.t.Blocks = append(tl.t.Blocks, b)
}

// end ends the open block at trace address addr, if any, at the current
// event, on trace stream id.
func (tl *timeline) end(addr, id uint64) {
	if !tl.recording() {
		return
	}
	i, ok := tl.open[addr]
	if !ok {
		return
	}
	delete(tl.open, addr)
	b := &tl.t.Blocks[i]
	b.Free = tl.event
	b.FreeStream = tl.stream(id)
}

// after records the state after the current event: its time, the
// resource's reserved bytes and its segments; then moves to the next.
func (tl *timeline) after(ev trace.Event, reserved uint64) {
	if !tl.recording() {
		tl.t.Truncated = true
		tl.event++
		return
	}
	tl.stream(ev.Stream)
	tl.t.Times = append(tl.t.Times, ev.Time)
	tl.timed = tl.timed || ev.Time != 0
	if n := len(tl.t.Reserved); n == 0 || tl.t.Reserved[n-1].Bytes != reserved {
		tl.t.Reserved = append(tl.t.Reserved, Step{Event: tl.event, Bytes: reserved})
	}
	if tl.segRep != nil {
		tl.pollSegments()
	}
	tl.event++
}

// pollSegments compares the resource's segments with the open spans,
// closing those that are gone and opening the new ones.
func (tl *timeline) pollSegments() {
	tl.prev, tl.segs = tl.segs, tl.segRep.AppendSegments(tl.prev[:0])
	if slices.Equal(tl.segs, tl.prev) {
		return // the common case: nothing grew or was released
	}
	now := make(map[mr.Segment]bool, len(tl.segs))
	for _, s := range tl.segs {
		now[s] = true
		if _, ok := tl.openSeg[s]; ok {
			continue
		}
		owner, ok := tl.devices[s.Stream]
		if !ok {
			owner = -1
		}
		tl.openSeg[s] = int32(len(tl.t.Segments))
		tl.t.Segments = append(tl.t.Segments, SegmentSpan{Base: uint64(s.Base), Size: int64(s.Size),
			Stream: owner, From: tl.event, To: -1})
	}
	for s, i := range tl.openSeg {
		if !now[s] {
			tl.t.Segments[i].To = tl.event
			delete(tl.openSeg, s)
		}
	}
}

// finish returns the timeline.
func (tl *timeline) finish() *Timeline {
	tl.t.Events = min(tl.event, tl.limit)
	if !tl.timed {
		tl.t.Times = nil
	}
	return &tl.t
}
