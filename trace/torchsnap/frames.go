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
// PyTorch's snapshot shares what repeats: one list of frames for each
// captured traceback (the entries and the block of one allocation), and
// one dict for each distinct frame, referenced from every list that holds
// it. So does any pickle, since a memo reference costs two to five bytes:
// one long string can be the name of a million frames, one list of
// frames the stack of a million entries. The stacks are therefore built
// by identity first, each step costing what its input costs:
//
//   - a frames list met before is its stack again (one map lookup);
//   - a frame dict met before is its frame again;
//   - a string met before (the same decoded string, by the address of its
//     bytes) is its text again; a string met for the first time is hashed
//     once, so the text hashed is at most the pickle's size;
//   - frames are equal when their texts and lines are, stacks when their
//     frames are (compared as frame numbers, four bytes each).
//
// Frames are evidence for people, not input to the replay: a "frames"
// value that is not a list of dictionaries, or a frame without a name or
// a file, is dropped (the event has no stack, or the frame is left out)
// and never makes the snapshot unreadable.

package torchsnap

import (
	"encoding/binary"
	"unsafe"

	"github.com/streamalloc/streamalloc/internal/unpickle"
	"github.com/streamalloc/streamalloc/trace"
)

// snapshotStacks collects stacks while a snapshot is built and answers
// Stack afterwards.
type snapshotStacks struct {
	of   []int32         // of[i]: index in list of event i's stack, -1 if none; nil if no event has one
	list [][]trace.Frame // distinct stacks

	// While building: the noted events of the trace entries (main) and of
	// the synthetic allocations put in front (pre), and the tables that
	// turn decoded frames into stacks (see the file comment).
	main, pre []notedStack
	byList    map[*unpickle.List]int32 // a frames list -> its stack, -1 for none
	byKey     map[string]int32         // a stack's frame numbers -> its stack
	byDict    map[*unpickle.Dict]int32 // a frame dict -> its frame number, -1 if dropped
	byFrame   map[frameKey]int32       // a frame -> its number
	frames    []trace.Frame            // the distinct frames, by number
	byString  map[stringID]int32       // a decoded string -> its text's number
	byText    map[string]int32         // a text -> its number
	texts     []string                 // the distinct texts, by number
}

type notedStack struct {
	event int
	stack int32
}

// frameKey is a frame as texts' numbers and a line.
type frameKey struct {
	function, file int32
	line           int
}

// stringID is a decoded string's identity: where its bytes are, and how
// many. Every reference to one memo entry yields the same bytes.
type stringID struct {
	p *byte
	n int
}

// note records the frames of event i of the trace entries (pre false) or
// of synthetic allocation i (pre true).
func (st *snapshotStacks) note(pre bool, i int, frames any) {
	id := st.stackOf(frames)
	if id < 0 {
		return
	}
	n := notedStack{event: i, stack: id}
	if pre {
		st.pre = append(st.pre, n)
	} else {
		st.main = append(st.main, n)
	}
}

// stackOf returns the number of the stack of a "frames" value, or -1 if
// it has none.
func (st *snapshotStacks) stackOf(v any) int32 {
	l, ok := v.(*unpickle.List)
	if !ok || len(l.Items) == 0 {
		return -1
	}
	if id, ok := st.byList[l]; ok {
		return id
	}
	if st.byList == nil {
		st.byList = map[*unpickle.List]int32{}
	}
	key := make([]byte, 0, 4*len(l.Items))
	for _, fv := range l.Items {
		if f := st.frameOf(fv); f >= 0 {
			key = binary.LittleEndian.AppendUint32(key, uint32(f))
		}
	}
	id := int32(-1)
	if len(key) > 0 {
		var ok bool
		if id, ok = st.byKey[string(key)]; !ok {
			if st.byKey == nil {
				st.byKey = map[string]int32{}
			}
			fs := make([]trace.Frame, len(key)/4)
			for i := range fs {
				fs[i] = st.frames[binary.LittleEndian.Uint32(key[4*i:])]
			}
			id = int32(len(st.list))
			st.list = append(st.list, fs)
			st.byKey[string(key)] = id
		}
	}
	st.byList[l] = id
	return id
}

// frameOf returns the number of the frame of a frame dict, or -1 if it is
// dropped.
func (st *snapshotStacks) frameOf(v any) int32 {
	d, ok := v.(*unpickle.Dict)
	if !ok {
		return -1
	}
	if id, ok := st.byDict[d]; ok {
		return id
	}
	if st.byDict == nil {
		st.byDict, st.byFrame = map[*unpickle.Dict]int32{}, map[frameKey]int32{}
	}
	name, _ := asString(field(d, "name"))
	file, _ := asString(field(d, "filename"))
	id := int32(-1)
	if name != "" || file != "" {
		k := frameKey{function: st.textOf(name), file: st.textOf(file)}
		if line, err := asInt64(field(d, "line")); err == nil && line > 0 && line <= 1<<31 {
			k.line = int(line)
		}
		var ok bool
		if id, ok = st.byFrame[k]; !ok {
			id = int32(len(st.frames))
			st.frames = append(st.frames, trace.Frame{Function: st.texts[k.function], File: st.texts[k.file], Line: k.line})
			st.byFrame[k] = id
		}
	}
	st.byDict[d] = id
	return id
}

// textOf returns the number of s's text, hashing s only the first time
// this string (not merely this text) is met.
func (st *snapshotStacks) textOf(s string) int32 {
	sid := stringID{unsafe.StringData(s), len(s)}
	if id, ok := st.byString[sid]; ok {
		return id
	}
	if st.byString == nil {
		st.byString, st.byText = map[stringID]int32{}, map[string]int32{}
	}
	id, ok := st.byText[s]
	if !ok {
		id = int32(len(st.texts))
		st.texts = append(st.texts, s)
		st.byText[s] = id
	}
	st.byString[sid] = id
	return id
}

// finish builds the per-event index once the events are final: nPre
// synthetic events were put in front of the trace entries' events, total
// events in all. It drops the tables of the build.
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
	*st = snapshotStacks{of: st.of, list: st.list}
}

// stack returns the stack of event i, or nil.
func (st *snapshotStacks) stack(i int) []trace.Frame {
	if i < 0 || i >= len(st.of) || st.of[i] < 0 {
		return nil
	}
	return st.list[st.of[i]]
}

// Stack returns the call stack PyTorch recorded for the allocation Next
// returned last (see trace.StackReader), or nil.
func (sr *Reader) Stack() []trace.Frame { return sr.stacks.stack(sr.next - 1) }

var _ trace.StackReader = (*Reader)(nil)
