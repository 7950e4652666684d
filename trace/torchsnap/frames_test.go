package torchsnap

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/internal/unpickle"
	"github.com/streamalloc/streamalloc/trace"
)

// A snapshot's allocations carry their frames: those of the alloc entries
// and of a block live before the history began (from the segments); a
// block synthesized from its free has none, and neither has a free or an
// oom. Equal stacks are one shared slice.
func TestSnapshotStacks(t *testing.T) {
	frames := func(fs ...trace.Frame) []any {
		out := []any{}
		for _, f := range fs {
			out = append(out, map[any]any{"name": f.Function, "filename": f.File, "line": int64(f.Line)})
		}
		return out
	}
	fwd := []trace.Frame{{Function: "forward", File: "train.py", Line: 42}, {Function: "forward", File: "torch/nn/modules/linear.py", Line: 125}}
	opt := []trace.Frame{{Function: "step", File: "optim.py", Line: 7}}
	entry := func(action string, addr, size int64, fs []trace.Frame) map[any]any {
		return map[any]any{"action": action, "addr": addr, "size": size, "stream": int64(0),
			"time_us": int64(100 + addr), "frames": frames(fs...)}
	}
	snap := map[any]any{
		"segments": []any{map[any]any{"device": int64(0), "address": int64(0x900), "stream": int64(0),
			"blocks": []any{map[any]any{"address": int64(0x900), "size": int64(64), "state": "active_allocated",
				"frames": frames(opt...)}}}},
		"device_traces": []any{[]any{
			entry("free_completed", 0x100, 8, fwd), // allocated before the history: no stack known
			entry("alloc", 0x200, 16, fwd),
			map[any]any{"action": "oom", "size": int64(1 << 40), "stream": int64(0), "frames": frames(fwd...)},
			entry("alloc", 0x300, 32, opt),
			entry("alloc", 0x400, 32, nil),
			entry("free_completed", 0x200, 16, fwd),
			entry("alloc", 0x500, 48, fwd),
		}},
	}
	r := mustSnapshot(t, snap)
	sr, ok := r.(trace.StackReader)
	if !ok {
		t.Fatalf("%T is not a trace.StackReader", r)
	}
	if sr.Stack() != nil {
		t.Error("a stack before the first Next")
	}
	want := map[uint64][]trace.Frame{0x900: opt, 0x200: fwd, 0x300: opt, 0x500: fwd} // allocations with stacks
	var got []string
	shared := map[string]*trace.Frame{}
	for {
		ev, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		st := sr.Stack()
		got = append(got, fmt.Sprintf("%v %#x %v", ev.Op, ev.Ptr, st))
		w := want[ev.Ptr]
		if ev.Op != trace.Alloc {
			w = nil
		}
		if fmt.Sprint(st) != fmt.Sprint(w) {
			t.Errorf("%v %#x: stack %v, want %v", ev.Op, ev.Ptr, st, w)
		}
		if len(st) > 0 {
			k := fmt.Sprint(st)
			if p, ok := shared[k]; ok && p != &st[0] {
				t.Errorf("%v %#x: equal stacks are not one slice", ev.Op, ev.Ptr)
			}
			shared[k] = &st[0]
		}
	}
	if len(got) != 9 {
		t.Errorf("%d events, want 9:\n%s", len(got), strings.Join(got, "\n"))
	}
	// After io.EOF, Next's last event is still the last allocation.
	if fmt.Sprint(sr.Stack()) != fmt.Sprint(fwd) {
		t.Errorf("after io.EOF: %v, want the last allocation's", sr.Stack())
	}
}

// A File forwards Stack to its reader: a snapshot's stacks, a CSV's none.
func TestFileStack(t *testing.T) {
	f, err := trace.Open("testdata/snapshot.pickle", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sr trace.StackReader = f
	n := 0
	for {
		ev, err := sr.Next()
		if err != nil {
			break
		}
		if sr.Stack() != nil {
			n++
			if ev.Op != trace.Alloc {
				t.Errorf("%v has a stack", ev.Op)
			}
		}
	}
	if n == 0 {
		t.Error("no allocation of the fixture has a stack through the File")
	}
	c, err := trace.Open("../../replay/testdata/torch-serve-varlen-b.csv.gz", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Next(); err != nil || c.Stack() != nil {
		t.Errorf("a CSV event: %v, stack %v", err, c.Stack())
	}
}

// decoded returns the value of a pickle.
func decoded(t *testing.T, data string) any {
	t.Helper()
	v, _, err := unpickle.Decode([]byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDecodeFrames(t *testing.T) {
	frame := func(kv ...any) *unpickle.Dict {
		m := unpickle.NewDict()
		for i := 0; i < len(kv); i += 2 {
			if err := m.Set(kv[i], kv[i+1]); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	list := func(items ...any) *unpickle.List { return &unpickle.List{Items: items} }
	tests := []struct {
		name string
		in   any
		want []trace.Frame
	}{
		{"missing", nil, nil},
		{"not a list", "train.py", nil},
		{"empty", list(), nil},
		{"a tuple", &unpickle.Tuple{Items: []any{frame("name", "f", "filename", "a.py", "line", int64(3))}}, nil},
		{"whole", list(frame("name", "f", "filename", "a.py", "line", int64(3))),
			[]trace.Frame{{Function: "f", File: "a.py", Line: 3}}},
		// [{"name": "f", "filename": "a.py", "line": 3}] of Python 2 byte strings.
		{"byte strings", decoded(t, "\x80\x02](}(U\x04nameU\x01fU\x08filenameU\x04a.pyU\x04lineK\x03ue."),
			[]trace.Frame{{Function: "f", File: "a.py", Line: 3}}},
		{"no line", list(frame("name", "f", "filename", "a.py")), []trace.Frame{{Function: "f", File: "a.py"}}},
		{"bad line", list(frame("name", "f", "line", "x"), frame("name", "g", "line", int64(-1))),
			[]trace.Frame{{Function: "f"}, {Function: "g"}}},
		{"nameless frames dropped", list(frame("line", int64(3)), "x", frame("filename", "b.py")),
			[]trace.Frame{{File: "b.py"}}},
		{"nothing usable", list(frame("line", int64(3)), int64(7)), nil},
	}
	for _, tc := range tests {
		var st snapshotStacks
		var got []trace.Frame
		if id := st.stackOf(tc.in); id >= 0 {
			got = st.list[id]
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
	}
}

// A snapshot written by Python's pickler shares its objects: one list of
// frames for every entry of a call stack, one dictionary for every stack
// through a frame, each written once and then referenced from the memo
// (testdata/gen_shared.py). Every allocation keeps its stack through
// every reference.
func TestSnapshotSharedFrames(t *testing.T) {
	f, err := trace.Open("testdata/shared.pickle", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fwd := trace.Frame{Function: "forward", File: "train.py", Line: 42}
	lin := trace.Frame{Function: "forward", File: "torch/nn/modules/linear.py", Line: 125}
	step := trace.Frame{Function: "step", File: "optim.py", Line: 7}
	want := []struct {
		op    trace.Op
		ptr   uint64
		stack []trace.Frame
	}{
		{trace.Alloc, 0x900, []trace.Frame{step}}, // live before the history: from its block
		{trace.Alloc, 0x100, []trace.Frame{fwd, lin}},
		{trace.Alloc, 0x200, []trace.Frame{fwd, lin}},
		{trace.Alloc, 0x300, []trace.Frame{fwd}},
		{trace.Alloc, 0x400, []trace.Frame{step}},
		{trace.Free, 0x100, nil},
		{trace.Alloc, 0x500, []trace.Frame{fwd, lin}},
	}
	for i, w := range want {
		ev, err := f.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Op != w.op || ev.Ptr != w.ptr || fmt.Sprint(f.Stack()) != fmt.Sprint(w.stack) {
			t.Errorf("event %d: %v %#x stack %v, want %v %#x stack %v", i, ev.Op, ev.Ptr, f.Stack(), w.op, w.ptr, w.stack)
		}
	}
	if ev, err := f.Next(); err != io.EOF {
		t.Errorf("after the last event: %+v, %v", ev, err)
	}
}

// A string the pickle references from many frames costs its length once,
// not once per frame: 10,000 allocations whose distinct frames all name
// one 1 MiB function (1.5 MB of pickle) are read in well under a second
// and 64 MB, where hashing the text once per frame would be 20 GB.
func TestSnapshotSharedStringBounded(t *testing.T) {
	long := strings.Repeat("f", 1<<20)
	var entries []any
	for i := range 10000 {
		entries = append(entries, map[string]any{"action": "alloc", "addr": 0x1000 * (i + 1), "size": 64, "stream": 0,
			"frames": []any{map[string]any{"name": long, "filename": long, "line": i + 1}}})
	}
	data := encodePickle(t, map[string]any{"device_traces": []any{entries}}, 4)
	if len(data) > 2<<20 {
		t.Fatalf("the pickle is %d bytes", len(data))
	}
	var r trace.Reader
	var err error
	start := time.Now()
	alloc := allocatedBy(func() { r, _, err = trace.NewReader(bytes.NewReader(data), "long.pickle", nil) })
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if err != nil {
		t.Fatal(err)
	}
	if alloc > 64<<20 {
		t.Errorf("allocated %d MB", alloc>>20)
	}
	sr := r.(trace.StackReader)
	for i := range 10000 {
		if _, err := sr.Next(); err != nil {
			t.Fatal(err)
		}
		st := sr.Stack()
		if len(st) != 1 || st[0].Line != i+1 || st[0].Function != long || st[0].File != long {
			t.Fatalf("allocation %d: %d frames", i, len(st))
		}
	}
}
