package torchsnap

import (
	"fmt"
	"io"
	"strings"
	"testing"

	pickle "github.com/kisielk/og-rek"

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

func TestDecodeFrames(t *testing.T) {
	frame := func(kv ...any) map[any]any {
		m := map[any]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		in   any
		want []trace.Frame
	}{
		{"missing", nil, nil},
		{"not a list", "train.py", nil},
		{"empty", []any{}, nil},
		{"whole", []any{frame("name", "f", "filename", "a.py", "line", int64(3))},
			[]trace.Frame{{Function: "f", File: "a.py", Line: 3}}},
		{"byte strings", []any{frame("name", pickle.ByteString("f"), "filename", pickle.ByteString("a.py"), "line", int64(3))},
			[]trace.Frame{{Function: "f", File: "a.py", Line: 3}}},
		{"no line", []any{frame("name", "f", "filename", "a.py")}, []trace.Frame{{Function: "f", File: "a.py"}}},
		{"bad line", []any{frame("name", "f", "line", "x"), frame("name", "g", "line", int64(-1))},
			[]trace.Frame{{Function: "f"}, {Function: "g"}}},
		{"nameless frames dropped", []any{frame("line", int64(3)), "x", frame("filename", "b.py")},
			[]trace.Frame{{File: "b.py"}}},
		{"nothing usable", []any{frame("line", int64(3)), int64(7)}, nil},
	}
	for _, tc := range tests {
		if got := decodeFrames(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
	}
}
