// The allocation stacks of a PyTorch snapshot.
//
// Every trace entry of a snapshot carries "frames": a list of
// {"filename": str, "line": int, "name": str}, and so does every block of
// its segments. The reader keeps the frames of allocations only (an alloc
// entry, or a block that was live before the history began), because that
// is what a report shows next to a block. Stacks repeat (a training step
// allocates from the same few call sites every iteration), so each
// distinct stack is kept once and events refer to it by index: the cost is
// one int32 per event once any event has frames, none before.
//
// Frames are evidence for people, not input to the replay: a "frames"
// value that is not a list of dictionaries, or a frame without a name or
// a file, is dropped (the event has no stack, or the frame is left out)
// and never makes the snapshot unreadable.

package torchsnap

import (
	"strings"

	pickle "github.com/kisielk/og-rek"

	"github.com/streamalloc/streamalloc/trace"
)

// snapshotStacks collects stacks while a snapshot is built and answers
// Stack afterwards.
type snapshotStacks struct {
	of   []int32         // of[i]: index in list of event i's stack, -1 if none; nil if no event has one
	list [][]trace.Frame // distinct stacks

	// While building: stacks by key, and the noted events of the trace
	// entries (main) and of the synthetic allocations put in front (pre).
	byKey     map[string]int32
	main, pre []notedStack
}

type notedStack struct {
	event int
	stack int32
}

// note records the frames of event i of the trace entries (pre false) or
// of synthetic allocation i (pre true).
func (st *snapshotStacks) note(pre bool, i int, frames any) {
	fs := decodeFrames(frames)
	if len(fs) == 0 {
		return
	}
	var key strings.Builder
	for _, f := range fs {
		key.WriteString(f.String())
		key.WriteByte(0)
	}
	id, ok := st.byKey[key.String()]
	if !ok {
		if st.byKey == nil {
			st.byKey = map[string]int32{}
		}
		id = int32(len(st.list))
		st.list = append(st.list, fs)
		st.byKey[key.String()] = id
	}
	n := notedStack{event: i, stack: id}
	if pre {
		st.pre = append(st.pre, n)
	} else {
		st.main = append(st.main, n)
	}
}

// finish builds the per-event index once the events are final: nPre
// synthetic events were put in front of the trace entries' events, total
// events in all.
func (st *snapshotStacks) finish(nPre, total int) {
	if len(st.main)+len(st.pre) > 0 {
		st.of = make([]int32, total)
		for i := range st.of {
			st.of[i] = -1
		}
		for _, n := range st.pre {
			st.of[n.event] = n.stack
		}
		for _, n := range st.main {
			st.of[nPre+n.event] = n.stack
		}
	}
	st.byKey, st.main, st.pre = nil, nil, nil
}

// stack returns the stack of event i, or nil.
func (st *snapshotStacks) stack(i int) []trace.Frame {
	if i < 0 || i >= len(st.of) || st.of[i] < 0 {
		return nil
	}
	return st.list[st.of[i]]
}

// decodeFrames converts a snapshot's frame list, dropping what does not
// decode.
func decodeFrames(v any) []trace.Frame {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil
	}
	fs := make([]trace.Frame, 0, len(list))
	for _, fv := range list {
		m, ok := fv.(map[any]any)
		if !ok {
			continue
		}
		var f trace.Frame
		f.Function, _ = pickle.AsString(m["name"])
		f.File, _ = pickle.AsString(m["filename"])
		if line, err := pickle.AsInt64(m["line"]); err == nil && line > 0 && line <= 1<<31 {
			f.Line = int(line)
		}
		if f.Function == "" && f.File == "" {
			continue
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil
	}
	return fs
}

// Stack returns the call stack PyTorch recorded for the allocation Next
// returned last (see trace.StackReader), or nil.
func (sr *Reader) Stack() []trace.Frame { return sr.stacks.stack(sr.next - 1) }

var _ trace.StackReader = (*Reader)(nil)
