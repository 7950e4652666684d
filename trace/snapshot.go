// The PyTorch memory snapshot reader.
//
// torch.cuda.memory._dump_snapshot pickles the dictionary that
// torch.cuda.memory._snapshot returns:
//
//	{"segments": [Segment...], "device_traces": [[TraceEntry...] per device],
//	 "allocator_settings": {...}}
//	TraceEntry: {"action": str, "addr": int, "size": int, "stream": int,
//	             "time_us": int, "frames": [...], ...}
//	Segment:    {"device": int, "address": int, "stream": int,
//	             "blocks": [{"address": int, "size": int, "requested_size": int,
//	                         "state": "active_allocated" | "active_pending_free" | "inactive"}]}
//
// The trace entries record what the caching allocator did, in order. We
// replay what the program asked of it, so the actions map as follows:
//
//	alloc           -> Alloc  (addr, size, stream)
//	free_completed  -> Free   (the block is back in the allocator: the end
//	                           of its life as memory_viz draws it)
//	free_requested  -> Free only in a trace that has no free_completed at
//	                   all (else ignored: it is followed by free_completed,
//	                   later if the block was in use on other streams)
//	free            -> Free   (the name PyTorch 1.13 used)
//	oom             -> AllocFailure (size, stream; the pointer is 0)
//	segment_alloc, segment_free, segment_map, segment_unmap, snapshot,
//	annotate, and actions unknown to this reader -> skipped: they describe
//	the caching allocator's own cudaMalloc traffic and metadata, which the
//	replayed resource replaces. Unknown actions are skipped rather than
//	refused so that snapshots of newer PyTorch versions still replay.
//
// PyTorch's history is a ring of max_entries entries, so a trace usually
// starts in the middle of the program: blocks allocated before it began
// are freed without ever being allocated. As memory_viz does, the reader
// emits a synthetic Alloc at the start for every address whose first
// event is a free, and for every block the snapshot's segments hold as
// active whose address never appears in the trace (it was live through
// the whole window). Synthetic events have Line 0.
//
// A pickle cannot be streamed (its root object is complete only at the
// STOP opcode), so the file is decoded whole with github.com/kisielk/og-rek,
// which never executes code from the pickle (classes decode as inert
// values) and bounds what a lying length field can make it allocate. The
// events are then copied into a slice of Events, the allocations' frames
// into a table of distinct stacks (snapshot_frames.go), and the decoded
// tree is dropped before the first Next.

package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"time"

	pickle "github.com/kisielk/og-rek"
)

// SnapshotReader reads the allocation events of a PyTorch memory
// snapshot. Create one with NewSnapshotReader or Open.
type SnapshotReader struct {
	name   string
	events []Event
	next   int
	// Skipped counts trace entries that map to no event (segment
	// traffic, snapshots, annotations, unknown actions, and the
	// free_requested entries of a trace that has free_completed).
	Skipped int
	// Preexisting counts the synthetic allocations of blocks that were
	// live before the recorded history began.
	Preexisting int
	stacks      snapshotStacks // allocation stacks (snapshot_frames.go)
}

// NewSnapshotReader decodes the pickled snapshot in r. o may be nil.
func NewSnapshotReader(r io.Reader, name string, o *Options) (*SnapshotReader, error) {
	if o == nil {
		o = &Options{}
	}
	// A pickle has no lines: a bad one is placed by the bytes the
	// decoder had consumed when it stopped, counted below its buffer.
	cr := &countingReader{r: r}
	br := bufio.NewReaderSize(cr, 64<<10)
	root, err := decodePickle(br)
	consumed := cr.n - int64(br.Buffered())
	if err == nil {
		// Read to the end, ignoring anything after the STOP opcode as
		// Python does, so that a gzip layer below checks its trailer:
		// a truncated or corrupt compressed snapshot must not pass.
		_, err = io.Copy(io.Discard, br)
	}
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) { // the gzip layer below failed
			return nil, pe
		}
		return nil, &ParseError{File: name,
			Msg: fmt.Sprintf("unreadable pickle (decoding stopped after byte %d): %v", consumed, err),
			Err: errors.Join(ErrPickle, err)}
	}
	sr := &SnapshotReader{name: name}
	if err := sr.build(root, o); err != nil {
		return nil, err
	}
	return sr, nil
}

// decodePickle decodes one pickle. og-rek reports bad input as errors;
// the recover is a second line of defence, so that a bug in a dependency
// meeting hostile input is a ParseError and not a crash of the command.
func decodePickle(r io.Reader) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("decoder panic: %v", p)
		}
	}()
	return pickle.NewDecoder(r).Decode()
}

// Name returns the snapshot's name.
func (sr *SnapshotReader) Name() string { return sr.name }

// Next returns the next event, or io.EOF after the last.
func (sr *SnapshotReader) Next() (Event, error) {
	if sr.next >= len(sr.events) {
		return Event{}, io.EOF
	}
	ev := sr.events[sr.next]
	sr.next++
	return ev, nil
}

// Len is the number of events in the snapshot.
func (sr *SnapshotReader) Len() int { return len(sr.events) }

// Progress reports events returned out of events.
func (sr *SnapshotReader) Progress() (done, total int64) {
	return int64(sr.next), int64(len(sr.events))
}

// entry is one decoded trace entry, with where it came from.
type entry struct {
	device, index int
	action        string
	fields        map[any]any
	time          int64
	hasTime       bool
}

func (sr *SnapshotReader) build(root any, o *Options) error {
	top, ok := root.(map[any]any)
	if !ok {
		return sr.errorf(0, "the pickle holds a %s, not a snapshot dictionary", pyType(root))
	}
	dt, ok := top["device_traces"]
	if !ok {
		return sr.errorf(0, "no device_traces: was memory history recorded (torch.cuda.memory._record_memory_history)?")
	}
	devices, ok := dt.([]any)
	if !ok {
		return sr.errorf(0, "device_traces is a %s, not a list", pyType(dt))
	}
	selected := func(d int) bool { return o.Devices == nil || slices.Contains(o.Devices, d) }

	// Collect the selected entries.
	var entries []entry
	haveCompleted, allTimed := false, true
	for d, dv := range devices {
		if !selected(d) {
			continue
		}
		list, ok := dv.([]any)
		if !ok {
			return sr.errorf(0, "device_traces[%d] is a %s, not a list", d, pyType(dv))
		}
		for i, ev := range list {
			m, ok := ev.(map[any]any)
			if !ok {
				return sr.errorf(int64(i+1), "device_traces[%d][%d] is a %s, not a dictionary", d, i, pyType(ev))
			}
			action, err := pickle.AsString(m["action"])
			if err != nil {
				return sr.errorf(int64(i+1), "device_traces[%d][%d] has no action string", d, i)
			}
			e := entry{device: d, index: i, action: action, fields: m}
			if t, ok := m["time_us"]; ok {
				e.time, err = pickle.AsInt64(t)
				e.hasTime = err == nil
			}
			allTimed = allTimed && e.hasTime
			haveCompleted = haveCompleted || action == "free_completed"
			entries = append(entries, e)
		}
	}
	// Several devices: merge by time when every entry has one (each
	// device's list is already in time order).
	if allTimed && len(o.Devices) != 1 && len(devices) > 1 {
		slices.SortStableFunc(entries, func(a, b entry) int {
			switch {
			case a.time < b.time:
				return -1
			case a.time > b.time:
				return 1
			}
			return 0
		})
	}

	freeAction := "free_completed"
	if !haveCompleted {
		freeAction = "free_requested"
	}
	seen := make(map[uint64]bool) // addresses met so far
	var pre []Event               // synthetic allocations of preexisting blocks
	sr.events = make([]Event, 0, len(entries))
	for _, e := range entries {
		var op Op
		switch e.action {
		case "alloc":
			op = Alloc
		case freeAction, "free":
			op = Free
		case "oom":
			op = AllocFailure
		default:
			sr.Skipped++
			continue
		}
		line := int64(e.index + 1)
		where := fmt.Sprintf("device_traces[%d][%d] (%s)", e.device, e.index, e.action)
		ev := Event{Op: op, Line: line}
		if e.hasTime {
			ev.Time = time.Duration(e.time) * time.Microsecond
		}
		size, err := pickle.AsInt64(e.fields["size"])
		if err != nil {
			return sr.errorf(line, "%s: size: %v", where, err)
		}
		if size < 0 {
			return &ParseError{File: sr.name, Line: line, Msg: fmt.Sprintf("%s: size %d is negative", where, size),
				Err: errors.Join(ErrSnapshot, ErrNegativeSize)}
		}
		ev.Size = size
		if s, ok := e.fields["stream"]; ok {
			if ev.Stream, err = asUint64(s); err != nil {
				return sr.errorf(line, "%s: stream: %v", where, err)
			}
		}
		if op != AllocFailure {
			if ev.Ptr, err = asUint64(e.fields["addr"]); err != nil {
				return sr.errorf(line, "%s: addr: %v", where, err)
			}
			if op == Free && !seen[ev.Ptr] {
				pre = append(pre, Event{Op: Alloc, Ptr: ev.Ptr, Size: ev.Size, Stream: ev.Stream})
			}
			seen[ev.Ptr] = true
		}
		sr.events = append(sr.events, ev)
		if op == Alloc {
			sr.stacks.note(false, len(sr.events)-1, e.fields["frames"])
		}
	}
	// Blocks live now that the trace never mentions were live throughout.
	if segs, ok := top["segments"].([]any); ok {
		for _, sv := range segs {
			seg, ok := sv.(map[any]any)
			if !ok {
				continue
			}
			if dev, err := pickle.AsInt64(seg["device"]); err == nil && !selected(int(dev)) {
				continue
			}
			stream, _ := asUint64(seg["stream"])
			blocks, _ := seg["blocks"].([]any)
			for _, bv := range blocks {
				b, ok := bv.(map[any]any)
				if !ok {
					continue
				}
				state, _ := pickle.AsString(b["state"])
				if state != "active_allocated" && state != "active_pending_free" {
					continue
				}
				addr, err1 := asUint64(b["address"])
				size, err2 := pickle.AsInt64(b["requested_size"])
				if err2 != nil {
					size, err2 = pickle.AsInt64(b["size"])
				}
				if err1 != nil || err2 != nil || size < 0 || seen[addr] {
					continue
				}
				seen[addr] = true
				pre = append(pre, Event{Op: Alloc, Ptr: addr, Size: size, Stream: stream})
				sr.stacks.note(true, len(pre)-1, b["frames"])
			}
		}
	}
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

func (sr *SnapshotReader) errorf(line int64, format string, args ...any) error {
	return &ParseError{File: sr.name, Line: line, Msg: fmt.Sprintf(format, args...), Err: ErrSnapshot}
}

// asUint64 accepts a Python int as an address or a stream handle. Negative
// values are the two's complement of a pointer that libtorch stored in an
// int64, so they keep their bits.
func asUint64(x any) (uint64, error) {
	switch v := x.(type) {
	case int64:
		return uint64(v), nil
	case *big.Int:
		if v.IsUint64() {
			return v.Uint64(), nil
		}
		if v.IsInt64() {
			return uint64(v.Int64()), nil
		}
		return 0, fmt.Errorf("integer %v does not fit in 64 bits", v)
	case nil:
		return 0, errors.New("missing")
	}
	return 0, fmt.Errorf("expected an int, got %s", pyType(x))
}

// pyType names the Python type of a decoded value, for error messages.
func pyType(x any) string {
	switch x.(type) {
	case nil:
		return "nothing"
	case pickle.None:
		return "None"
	case map[any]any:
		return "dict"
	case []any:
		return "list"
	case pickle.Tuple:
		return "tuple"
	case string, pickle.ByteString:
		return "str"
	case pickle.Bytes:
		return "bytes"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", x)
}
