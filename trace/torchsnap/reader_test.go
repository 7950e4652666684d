package torchsnap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/streamalloc/streamalloc/internal/unpickle"
	"github.com/streamalloc/streamalloc/trace"
)

// Addresses and streams of testdata/gen_snapshot.py.
const (
	fxS1  = 0x55D0C0DE1230
	fxSeg = 0x7F0000000000
	fxP0  = fxSeg
	fxA0  = fxSeg + 0x400
	fxA1  = fxSeg + 0x800
	fxA2  = fxSeg + 0x1000
	fxA3  = fxSeg + 0x2000
	fxA4  = fxSeg + 0x2800
	fxB1  = 0x7E0000000000
)

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// readAll drains r: the events up to io.EOF, or up to the first error.
func readAll(t testing.TB, r trace.Reader) ([]trace.Event, error) {
	t.Helper()
	var evs []trace.Event
	for {
		ev, err := r.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// The events of the fixture, both devices merged by time_us (see the
// mapping in the package comment): P0 and A0 were allocated before the history
// began, free_requested entries give way to free_completed, oom is a
// failure, segment/snapshot/annotate/unknown entries are skipped.
var fixtureAll = []trace.Event{
	{Op: trace.Alloc, Ptr: fxP0, Size: 512, Time: us(1002)},
	{Op: trace.Alloc, Ptr: fxA0, Size: 1000, Time: us(1002)},
	{Op: trace.Free, Ptr: fxP0, Size: 512, Time: us(1002), Line: 3},
	{Op: trace.Alloc, Ptr: fxA1, Size: 1024, Time: us(1003), Line: 4},
	{Op: trace.Alloc, Ptr: fxA2, Size: 4096, Stream: fxS1, Time: us(1004), Line: 5},
	{Op: trace.Free, Ptr: fxA1, Size: 1024, Time: us(1006), Line: 7},
	{Op: trace.AllocFailure, Size: 1 << 40, Time: us(1007), Line: 8},
	{Op: trace.Alloc, Ptr: fxB1, Size: 777, Time: us(1008), Line: 1},
	{Op: trace.Alloc, Ptr: fxA3, Size: 2048, Stream: fxS1, Time: us(1009), Line: 9},
	{Op: trace.Alloc, Ptr: fxA4, Size: 256, Time: us(1012), Line: 12},
	{Op: trace.Free, Ptr: fxA2, Size: 4096, Stream: fxS1, Time: us(1013), Line: 13},
}

func without(evs []trace.Event, ptr uint64) []trace.Event {
	var out []trace.Event
	for _, e := range evs {
		if e.Ptr != ptr {
			out = append(out, e)
		}
	}
	return out
}

func TestSnapshotFixtures(t *testing.T) {
	tests := []struct {
		file       string
		opts       *trace.Options
		want       []trace.Event
		compressed bool
		skipped    int
	}{
		{"testdata/snapshot.pickle", nil, fixtureAll, false, 8},
		{"testdata/snapshot-p2.pickle.gz", nil, fixtureAll, true, 8},
		{"testdata/snapshot.pickle", &trace.Options{Devices: []int{0}}, without(fixtureAll, fxB1), false, 8},
		{"testdata/snapshot.pickle", &trace.Options{Devices: []int{1}},
			[]trace.Event{{Op: trace.Alloc, Ptr: fxB1, Size: 777, Time: us(1008), Line: 1}}, false, 0},
		{"testdata/snapshot.pickle", &trace.Options{Devices: []int{5}}, nil, false, 0},
	}
	for _, tc := range tests {
		f, err := trace.Open(tc.file, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if f.Format() != trace.FormatSnapshot || f.Compressed() != tc.compressed {
			t.Errorf("%s: format %s compressed %v", tc.file, f.Format(), f.Compressed())
		}
		got, err := readAll(t, f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s %+v: got %d events, want %d:\n%+v", tc.file, tc.opts, len(got), len(tc.want), got)
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("%s %+v: event %d:\n got %+v\nwant %+v", tc.file, tc.opts, i, got[i], tc.want[i])
			}
		}
		sr := f.Reader.(*Reader)
		if sr.Skipped != tc.skipped {
			t.Errorf("%s %+v: skipped %d, want %d", tc.file, tc.opts, sr.Skipped, tc.skipped)
		}
		if done, total := f.Progress(); done != total || total != int64(len(tc.want)) {
			t.Errorf("%s: progress %d/%d at the end", tc.file, done, total)
		}
	}
}

// A trace without free_completed (another allocator backend) frees at
// free_requested.
func TestSnapshotFreeRequestedOnly(t *testing.T) {
	snap := map[any]any{"device_traces": []any{[]any{
		map[any]any{"action": "alloc", "addr": int64(0x100), "size": int64(10), "stream": int64(0)},
		map[any]any{"action": "free_requested", "addr": int64(0x100), "size": int64(10), "stream": int64(0)},
	}}}
	got, err := readAll(t, mustSnapshot(t, snap))
	if err != nil {
		t.Fatal(err)
	}
	want := []trace.Event{{Op: trace.Alloc, Ptr: 0x100, Size: 10, Line: 1}, {Op: trace.Free, Ptr: 0x100, Size: 10, Line: 2}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func encodePickle(t testing.TB, v any, protocol int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := unpickle.Encode(&buf, v, protocol); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustSnapshot(t testing.TB, v any) trace.Reader {
	t.Helper()
	r, format, err := trace.NewReader(bytes.NewReader(encodePickle(t, v, 2)), "snap", nil)
	if err != nil {
		t.Fatal(err)
	}
	if format != trace.FormatSnapshot {
		t.Fatalf("format %s", format)
	}
	return r
}

func TestSnapshotErrors(t *testing.T) {
	alloc := func(kv ...any) map[any]any {
		m := map[any]any{"action": "alloc", "addr": int64(0x100), "size": int64(10), "stream": int64(0)}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	traces := func(entries ...any) map[any]any {
		return map[any]any{"device_traces": []any{entries}}
	}
	tests := []struct {
		name string
		snap any
		line int64
		want []error
	}{
		{"root is a list", []any{int64(1)}, 0, []error{trace.ErrSnapshot}},
		{"no device_traces", map[any]any{"segments": []any{}}, 0, []error{trace.ErrSnapshot}},
		{"device_traces not a list", map[any]any{"device_traces": "x"}, 0, []error{trace.ErrSnapshot}},
		{"device trace not a list", map[any]any{"device_traces": []any{int64(3)}}, 0, []error{trace.ErrSnapshot}},
		{"entry not a dict", traces(alloc(), "oops"), 2, []error{trace.ErrSnapshot}},
		{"no action", traces(alloc("action", nil)), 1, []error{trace.ErrSnapshot}},
		{"no size", traces(alloc(), alloc("size", nil)), 2, []error{trace.ErrSnapshot}},
		{"size not an int", traces(alloc("size", "ten")), 1, []error{trace.ErrSnapshot}},
		{"negative size", traces(alloc("size", int64(-4))), 1, []error{trace.ErrSnapshot, trace.ErrNegativeSize}},
		{"no addr", traces(alloc("addr", nil)), 1, []error{trace.ErrSnapshot}},
		{"addr a float", traces(alloc("addr", 1.5)), 1, []error{trace.ErrSnapshot}},
		{"stream a string", traces(alloc("stream", "s")), 1, []error{trace.ErrSnapshot}},
		// time_us x 1000 must fit a time.Duration: refused, never wrapped.
		{"time_us overflows ns", traces(alloc(), alloc("time_us", int64(maxTimeUS+1))), 2, []error{trace.ErrSnapshot, trace.ErrTime}},
		{"time_us max int64", traces(alloc("time_us", int64(math.MaxInt64))), 1, []error{trace.ErrSnapshot, trace.ErrTime}},
		{"time_us beyond int64", traces(alloc("time_us", new(big.Int).Lsh(big.NewInt(1), 70))), 1, []error{trace.ErrSnapshot, trace.ErrTime}},
		{"time_us negative", traces(alloc("time_us", int64(-1))), 1, []error{trace.ErrSnapshot, trace.ErrTime}},
		{"time_us a string", traces(alloc("time_us", "noon")), 1, []error{trace.ErrSnapshot, trace.ErrTime}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := trace.NewReader(bytes.NewReader(encodePickle(t, tc.snap, 2)), "bad.pickle", nil)
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("error %v, want %v", err, want)
				}
			}
			var pe *trace.ParseError
			if !errors.As(err, &pe) || pe.File != "bad.pickle" || pe.Line != tc.line {
				t.Errorf("error %#v, want a *trace.ParseError at bad.pickle:%d", err, tc.line)
			}
		})
	}
}

// The largest time_us is read exactly; None is no time.
func TestSnapshotTimeLimits(t *testing.T) {
	snap := map[any]any{"device_traces": []any{[]any{
		map[any]any{"action": "alloc", "addr": int64(0x100), "size": int64(10), "time_us": unpickle.None{}},
		map[any]any{"action": "alloc", "addr": int64(0x200), "size": int64(10), "time_us": int64(maxTimeUS)},
	}}}
	got, err := readAll(t, mustSnapshot(t, snap))
	if err != nil || len(got) != 2 || got[0].Time != 0 || got[1].Time != time.Duration(maxTimeUS)*time.Microsecond || got[1].Time < 0 {
		t.Errorf("got %+v, %v", got, err)
	}
}

func TestUnreadablePickle(t *testing.T) {
	good, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	// at: the bytes the decoder consumed, which the message names.
	tests := []struct {
		name string
		data []byte
		at   int
	}{
		{"truncated", good[:len(good)/2], len(good) / 2},
		{"no STOP", good[:len(good)-1], len(good) - 1},
		{"PROTO only", []byte{0x80, 4}, 2},
		{"bad opcode", []byte{0x80, 2, 0xff, '.'}, 3},
		{"stack underflow", []byte{0x80, 2, 's', '.'}, 3},
		{"unhashable key", []byte{0x80, 2, '}', ']', 'K', 1, 's', '.', 'N'}, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := trace.NewReader(bytes.NewReader(tc.data), "bad.pickle", nil)
			if !errors.Is(err, trace.ErrPickle) {
				t.Fatalf("error %v, want ErrPickle", err)
			}
			var pe *trace.ParseError
			if !errors.As(err, &pe) || pe.File != "bad.pickle" {
				t.Errorf("error %#v is not a *trace.ParseError naming the file", err)
			}
			want := fmt.Sprintf("bad.pickle: unreadable pickle (decoding stopped after byte %d): ", tc.at)
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("message %q, want it to start %q", err, want)
			}
		})
	}
}

// What the decoder refuses is a *trace.ParseError matching both
// trace.ErrPickle and the decoder's reason: a pickle that would call
// os.system stops where its GLOBAL stands, before anything is imported.
func TestSnapshotRefusesCode(t *testing.T) {
	_, _, err := trace.NewReader(strings.NewReader("\x80\x02cos\nsystem\n(X\x02\x00\x00\x00idtR."), "evil.pickle", nil)
	var pe *trace.ParseError
	if !errors.Is(err, trace.ErrPickle) || !errors.Is(err, unpickle.ErrRefused) || !errors.As(err, &pe) || pe.File != "evil.pickle" {
		t.Fatalf("error %v, want a *trace.ParseError matching ErrPickle and unpickle.ErrRefused", err)
	}
	want := "evil.pickle: unreadable pickle (decoding stopped after byte 3): unpickle: refused: the pickle constructs objects or calls code: GLOBAL at byte 2: it would import a name"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// A read that fails below the decoder (not a gzip layer's ParseError) is
// an unreadable pickle naming the bytes read and the cause.
func TestSnapshotReadError(t *testing.T) {
	good, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	eio := errors.New("input/output error")
	r := io.MultiReader(bytes.NewReader(good[:100]), iotest.ErrReader(eio))
	_, err = NewReader(r, "disk.pickle", nil)
	var pe *trace.ParseError
	if !errors.Is(err, trace.ErrPickle) || !errors.Is(err, eio) || !errors.As(err, &pe) {
		t.Fatalf("error %v, want ErrPickle and the read's error", err)
	}
	if want := "disk.pickle: unreadable pickle (reading stopped after byte 100): input/output error"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// BenchmarkSnapshot decodes 100,000 entries, PyTorch's default
// max_entries, each with two frames: its own list of two frames (own
// frames), or one list shared by every entry, as PyTorch writes the
// entries of one traceback (shared frames).
func BenchmarkSnapshot(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "own frames"
		if shared {
			name = "shared frames"
		}
		b.Run(name, func(b *testing.B) {
			frames := func() any {
				return []any{
					map[any]any{"filename": "train.py", "line": int64(42), "name": "forward"},
					map[any]any{"filename": "torch/nn/modules/linear.py", "line": int64(125), "name": "forward"},
				}
			}
			var one any = &unpickle.List{Items: frames().([]any)}
			var list []any
			for i := range int64(50000) {
				addr := int64(0x7f0000000000) + i%64*4096
				f1, f2 := one, one
				if !shared {
					f1, f2 = frames(), frames()
				}
				list = append(list,
					map[any]any{"action": "alloc", "addr": addr, "size": int64(4096), "stream": int64(0), "time_us": 2 * i, "frames": f1},
					map[any]any{"action": "free_completed", "addr": addr, "size": int64(4096), "stream": int64(0), "time_us": 2*i + 1, "frames": f2})
			}
			data := encodePickle(b, map[any]any{"device_traces": []any{list}, "segments": []any{}}, 4)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r, _, err := trace.NewReader(bytes.NewReader(data), "bench", nil)
				if err != nil {
					b.Fatal(err)
				}
				sr := r.(*Reader)
				if n := sr.Len(); n != 100000 {
					b.Fatalf("%d events", n)
				}
				if sr.stacks.stack(0) == nil || sr.stacks.stack(99998) == nil {
					b.Fatal("an allocation without its stack")
				}
			}
		})
	}
}
