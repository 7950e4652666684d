package torchsnap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/trace"
)

// pickleWriter writes pickle opcodes by hand, for inputs no encoder
// writes: memo references that repeat one object many times.
type pickleWriter struct{ bytes.Buffer }

func (w *pickleWriter) str(s string) {
	w.WriteByte('X')
	binary.Write(w, binary.LittleEndian, uint32(len(s)))
	w.WriteString(s)
}

// repeatedList writes a list of n references to the object that first
// writes (and memoizes as memo[idx]).
func (w *pickleWriter) repeatedList(n int, idx byte, first func()) {
	w.WriteString("](")
	first()
	w.Write([]byte{'q', idx})
	for range n - 1 {
		w.Write([]byte{'h', idx})
	}
	w.WriteByte('e')
}

// dict writes a dictionary of string keys and values written by the
// functions.
func (w *pickleWriter) dict(kv ...any) {
	w.WriteString("}(")
	for i := 0; i < len(kv); i += 2 {
		w.str(kv[i].(string))
		switch v := kv[i+1].(type) {
		case string:
			w.str(v)
		case func():
			v()
		}
	}
	w.WriteByte('u')
}

func smallInt(w *pickleWriter) func() { return func() { w.Write([]byte{'K', 10}) } }

// expandingTraces is a snapshot whose device_traces is n references to a
// list of m references to one alloc entry: n*m entries in a few bytes per
// reference.
func expandingTraces(n, m int) []byte {
	var w pickleWriter
	w.WriteString("\x80\x02")
	w.dict("device_traces", func() {
		w.repeatedList(n, 1, func() {
			w.repeatedList(m, 0, func() { w.dict("action", "alloc", "addr", smallInt(&w), "size", smallInt(&w)) })
		})
	})
	w.WriteByte('.')
	return w.Bytes()
}

// expandingSegments is a snapshot whose segments are n references to a
// segment of m references to one active block.
func expandingSegments(n, m int) []byte {
	var w pickleWriter
	w.WriteString("\x80\x02")
	w.dict("device_traces", func() { w.WriteString("]]a") }, "segments", func() {
		w.repeatedList(n, 1, func() {
			w.dict("blocks", func() {
				w.repeatedList(m, 0, func() {
					w.dict("state", "active_allocated", "address", smallInt(&w), "size", smallInt(&w))
				})
			})
		})
	})
	w.WriteByte('.')
	return w.Bytes()
}

// allocatedBy returns the bytes f allocates.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A pickle that repeats one list or dictionary by memo reference is
// refused with ErrExpansion once it holds more entries than its size
// allows, before the memory is taken: two million entries in 6 KB of
// pickle cost under 32 MB to refuse (the entries up to the minimum
// budget), not the 300 MB their events would.
func TestSnapshotExpansionBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"device traces", expandingTraces(2000, 1000)},
		{"segments", expandingSegments(2000, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.data) > 8<<10 {
				t.Fatalf("the pickle is %d bytes", len(tc.data))
			}
			var err error
			alloc := allocatedBy(func() {
				_, _, err = trace.NewReader(bytes.NewReader(tc.data), "bomb.pickle", nil)
			})
			var pe *trace.ParseError
			if !errors.Is(err, trace.ErrExpansion) || !errors.As(err, &pe) || pe.File != "bomb.pickle" {
				t.Fatalf("error %v, want a *trace.ParseError matching ErrExpansion", err)
			}
			if !strings.Contains(err.Error(), "--max-expansion") {
				t.Errorf("message %q does not say how to raise the bound", err)
			}
			if alloc > 32<<20 {
				t.Errorf("refusing it allocated %d MB, want under 32", alloc>>20)
			}
		})
	}
}

// The bound scales with the pickle's size and MaxExpansion raises it: a
// snapshot refused by default is read with a higher bound, whole.
func TestSnapshotExpansionRaised(t *testing.T) {
	data := expandingTraces(100, 1000) // 100,000 entries
	if _, _, err := trace.NewReader(bytes.NewReader(data), "rep.pickle", nil); !errors.Is(err, trace.ErrExpansion) {
		t.Fatalf("default bound: error %v, want ErrExpansion", err)
	}
	r, _, err := trace.NewReader(bytes.NewReader(data), "rep.pickle", &trace.Options{MaxExpansion: 100000/(len(data)/1024) + 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.(*Reader).Len(); n != 100000 {
		t.Errorf("%d events, want 100000", n)
	}
	// The budget: per KiB, rounded up, and never under the minimum.
	for _, tc := range []struct {
		size   int64
		perKiB int
		want   int64
	}{
		{0, 0, trace.MinExpansionBudget},
		{1 << 20, 0, 1024 * trace.DefaultMaxExpansion},
		{1<<20 + 1, 1000, 1025 * 1000},
		{1 << 62, 1 << 30, 1<<63 - 1},
	} {
		if got := expansionBudget(tc.size, tc.perKiB); got != tc.want {
			t.Errorf("expansionBudget(%d, %d) = %d, want %d", tc.size, tc.perKiB, got, tc.want)
		}
	}
}

// A decimal integer longer than Python reads (4300 digits) is refused as
// it streams past, fast; one of 4300 digits is decoded.
func TestSnapshotLongDecimal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   string
		refuse bool
	}{
		{"LONG of 5 MB", "\x80\x02L" + strings.Repeat("9", 5<<20) + "L\n.", true},
		{"INT of 4301 digits", "\x80\x02I-" + strings.Repeat("9", 4301) + "\n.", true},
		{"INT of 4300 digits", "\x80\x02I-" + strings.Repeat("9", 4300) + "\n.", false},
		{"LONG in a dict", "\x80\x02}(X\x07\x00\x00\x00time_usL-" + strings.Repeat("1", 5000) + "L\nu.", true},
		{"LONG of 4300 digits", "\x80\x02L" + strings.Repeat("9", 4300) + "L\n.", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, _, err := trace.NewReader(strings.NewReader(tc.data), "long.pickle", nil)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
			if !tc.refuse {
				// Decoded: the root is an int, not a snapshot.
				if !errors.Is(err, trace.ErrSnapshot) {
					t.Errorf("error %v, want ErrSnapshot for an int root", err)
				}
				return
			}
			var pe *trace.ParseError
			if !errors.Is(err, trace.ErrPickle) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "more than 4300 digits") {
				t.Errorf("error %v, want ErrPickle about the digits", err)
			}
		})
	}
}
