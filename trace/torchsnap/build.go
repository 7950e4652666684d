// From the decoded snapshot to events, in four steps, each a function:
//
//  1. deviceTraces finds the per-device lists of trace entries;
//  2. collect takes the entries of the selected devices, merged in time
//     order when there are several and every entry has a time;
//  3. mapEntries turns each entry into an event (or skips it), and notes
//     the addresses whose first event is a free;
//  4. liveBlocks finds the blocks the segments hold as active that the
//     trace never names.
//
// The synthetic allocations of steps 3 and 4 go in front of the events,
// at the time of the first one. The mapping of actions is in the package
// comment. The first bad entry stops the build with a *trace.ParseError
// naming it; the segments are a summary, so a malformed one is skipped.

package torchsnap

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/streamalloc/streamalloc/internal/unpickle"

	"github.com/streamalloc/streamalloc/trace"
)

// entry is one decoded trace entry, with where it came from.
type entry struct {
	device, index int
	action        string
	fields        *unpickle.Dict
	time          int64
	hasTime       bool
}

// build fills sr.events (and the counters) from the decoded snapshot.
func (sr *Reader) build(root any, o *trace.Options) error {
	top, devices, err := sr.deviceTraces(root)
	if err != nil {
		return err
	}
	selected := func(d int) bool { return o.Devices == nil || slices.Contains(o.Devices, d) }
	entries, err := sr.collect(devices, selected)
	if err != nil {
		return err
	}
	// Several devices: merge by time when every entry has one (each
	// device's list is already in time order).
	if len(o.Devices) != 1 && len(devices) > 1 && allTimed(entries) {
		slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(a.time, b.time) })
	}
	pre, seen, err := sr.mapEntries(entries)
	if err != nil {
		return err
	}
	live, liveFrames, err := sr.liveBlocks(field(top, "segments"), selected, seen)
	if err != nil {
		return err
	}
	for k, f := range liveFrames {
		sr.stacks.note(true, len(pre)+k, f)
	}
	pre = append(pre, live...)
	if len(pre) > 0 {
		var t0 time.Duration
		if len(sr.events) > 0 {
			t0 = sr.events[0].Time
		}
		for i := range pre {
			pre[i].Time = t0
		}
		sr.Preexisting = len(pre)
		sr.events = append(pre, sr.events...)
	}
	sr.stacks.finish(len(pre), len(sr.events))
	return nil
}

// deviceTraces checks that root is a snapshot dictionary with recorded
// history, and returns it and its list of per-device traces.
func (sr *Reader) deviceTraces(root any) (*unpickle.Dict, []any, error) {
	top, ok := root.(*unpickle.Dict)
	if !ok {
		return nil, nil, sr.errorf(0, "the pickle holds a %s, not a snapshot dictionary", pyType(root))
	}
	dt, ok := top.Get("device_traces")
	if !ok {
		return nil, nil, sr.errorf(0, "no device_traces: was memory history recorded (torch.cuda.memory._record_memory_history)?")
	}
	devices, ok := dt.(*unpickle.List)
	if !ok {
		return nil, nil, sr.errorf(0, "device_traces is a %s, not a list", pyType(dt))
	}
	return top, devices.Items, nil
}

// collect returns the entries of the selected devices' traces, device by
// device, each in its recorded order.
func (sr *Reader) collect(devices []any, selected func(int) bool) ([]entry, error) {
	n := 0
	for d, dv := range devices {
		if list, ok := dv.(*unpickle.List); ok && selected(d) {
			n += len(list.Items)
		}
	}
	// At most the budget: one list referenced a million times is refused
	// by spend below before its entries are taken.
	entries := make([]entry, 0, min(int64(n), sr.budget))
	for d, dv := range devices {
		if !selected(d) {
			continue
		}
		list, ok := dv.(*unpickle.List)
		if !ok {
			return nil, sr.errorf(0, "device_traces[%d] is a %s, not a list", d, pyType(dv))
		}
		for i, ev := range list.Items {
			if err := sr.spend(); err != nil {
				return nil, err
			}
			m, ok := ev.(*unpickle.Dict)
			if !ok {
				return nil, sr.errorf(int64(i+1), "device_traces[%d][%d] is a %s, not a dictionary", d, i, pyType(ev))
			}
			action, ok := asString(field(m, "action"))
			if !ok {
				return nil, sr.errorf(int64(i+1), "device_traces[%d][%d] has no action string", d, i)
			}
			e := entry{device: d, index: i, action: action, fields: m}
			var err error
			if e.time, e.hasTime, err = sr.timeOf(field(m, "time_us"), d, i); err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// maxTimeUS is the largest time_us whose nanoseconds fit a
// time.Duration (about 292 years after the epoch).
const maxTimeUS = math.MaxInt64 / int64(time.Microsecond)

// timeOf reads the time_us of entry i of device d: absent or None is no
// time; an int from 0 to maxTimeUS is one; anything else is an error
// matching trace.ErrSnapshot and trace.ErrTime, never a time wrapped by
// the conversion to nanoseconds.
func (sr *Reader) timeOf(t any, d, i int) (us int64, ok bool, err error) {
	if t == nil || t == (unpickle.None{}) {
		return 0, false, nil
	}
	us, err = asInt64(t)
	if err == nil && (us < 0 || us > maxTimeUS) {
		err = fmt.Errorf("%d is outside 0 to %d, the times a trace can hold", us, maxTimeUS)
	}
	if err != nil {
		return 0, false, &trace.ParseError{File: sr.name, Line: int64(i + 1),
			Msg: fmt.Sprintf("device_traces[%d][%d]: time_us: %v", d, i, err),
			Err: errors.Join(trace.ErrSnapshot, trace.ErrTime)}
	}
	return us, true, nil
}

// allTimed reports whether every entry has a time.
func allTimed(entries []entry) bool {
	return !slices.ContainsFunc(entries, func(e entry) bool { return !e.hasTime })
}

// mapEntries sets sr.events to the events of the entries, in order, and
// counts the entries it skips. It returns the synthetic allocations of the
// blocks whose first event is a free, and every address the events name.
func (sr *Reader) mapEntries(entries []entry) (pre []trace.Event, seen map[uint64]bool, err error) {
	// free_requested is followed by free_completed when the trace has
	// any; otherwise it is the only free there is.
	freeAction := "free_completed"
	if !slices.ContainsFunc(entries, func(e entry) bool { return e.action == "free_completed" }) {
		freeAction = "free_requested"
	}
	seen = make(map[uint64]bool)
	sr.events = make([]trace.Event, 0, len(entries))
	for _, e := range entries {
		var op trace.Op
		switch e.action {
		case "alloc":
			op = trace.Alloc
		case freeAction, "free":
			op = trace.Free
		case "oom":
			op = trace.AllocFailure
		default:
			sr.Skipped++
			continue
		}
		ev, err := sr.event(e, op)
		if err != nil {
			return nil, nil, err
		}
		if op != trace.AllocFailure {
			if op == trace.Free && !seen[ev.Ptr] {
				pre = append(pre, trace.Event{Op: trace.Alloc, Ptr: ev.Ptr, Size: ev.Size, Stream: ev.Stream})
			}
			seen[ev.Ptr] = true
		}
		sr.events = append(sr.events, ev)
		if op == trace.Alloc {
			sr.stacks.note(false, len(sr.events)-1, field(e.fields, "frames"))
		}
	}
	return pre, seen, nil
}

// event reads the fields of entry e, whose action maps to op: size, then
// stream (0 if absent), then the address (but for a failure, which has
// none).
func (sr *Reader) event(e entry, op trace.Op) (trace.Event, error) {
	line := int64(e.index + 1)
	where := func() string { return fmt.Sprintf("device_traces[%d][%d] (%s)", e.device, e.index, e.action) }
	ev := trace.Event{Op: op, Line: line}
	if e.hasTime {
		ev.Time = time.Duration(e.time) * time.Microsecond
	}
	size, err := asInt64(field(e.fields, "size"))
	if err != nil {
		return ev, sr.errorf(line, "%s: size: %v", where(), err)
	}
	if size < 0 {
		return ev, &trace.ParseError{File: sr.name, Line: line, Msg: fmt.Sprintf("%s: size %d is negative", where(), size),
			Err: errors.Join(trace.ErrSnapshot, trace.ErrNegativeSize)}
	}
	ev.Size = size
	if s, ok := e.fields.Get("stream"); ok {
		if ev.Stream, err = asUint64(s); err != nil {
			return ev, sr.errorf(line, "%s: stream: %v", where(), err)
		}
	}
	if op != trace.AllocFailure {
		if ev.Ptr, err = asUint64(field(e.fields, "addr")); err != nil {
			return ev, sr.errorf(line, "%s: addr: %v", where(), err)
		}
	}
	return ev, nil
}

// liveBlocks returns allocations of the blocks that the segments of the
// selected devices hold as active (allocated, or freed but not yet
// completed) at addresses not in seen, which were live through the whole
// recorded window, and adds their addresses to seen. Their size is the
// requested size where the snapshot has it. frames[i] is the "frames"
// value of the block of pre[i]. Its only error is trace.ErrExpansion.
func (sr *Reader) liveBlocks(segments any, selected func(int) bool, seen map[uint64]bool) (pre []trace.Event, frames []any, err error) {
	segs, _ := segments.(*unpickle.List)
	if segs == nil {
		return nil, nil, nil
	}
	for _, seg := range segs.Items {
		if _, ok := seg.(*unpickle.Dict); !ok {
			continue
		}
		if dev, err := asInt64(field(seg, "device")); err == nil && !selected(int(dev)) {
			continue
		}
		stream, _ := asUint64(field(seg, "stream"))
		blocks, _ := field(seg, "blocks").(*unpickle.List)
		if blocks == nil {
			continue
		}
		for _, bv := range blocks.Items {
			if err := sr.spend(); err != nil {
				return nil, nil, err
			}
			addr, size, ok := activeBlock(bv)
			if !ok || seen[addr] {
				continue
			}
			seen[addr] = true
			pre = append(pre, trace.Event{Op: trace.Alloc, Ptr: addr, Size: size, Stream: stream})
			frames = append(frames, field(bv, "frames"))
		}
	}
	return pre, frames, nil
}

// activeBlock returns the address and size of a segment's block if it is
// a well-formed active one.
func activeBlock(bv any) (addr uint64, size int64, ok bool) {
	if _, ok := bv.(*unpickle.Dict); !ok {
		return 0, 0, false
	}
	state, _ := asString(field(bv, "state"))
	if state != "active_allocated" && state != "active_pending_free" {
		return 0, 0, false
	}
	addr, err1 := asUint64(field(bv, "address"))
	size, err2 := asInt64(field(bv, "requested_size"))
	if err2 != nil {
		size, err2 = asInt64(field(bv, "size"))
	}
	if err1 != nil || err2 != nil || size < 0 {
		return 0, 0, false
	}
	return addr, size, true
}
