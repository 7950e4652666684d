package trace

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// readAll drains r.
func readAll(t testing.TB, r Reader) ([]Event, error) {
	t.Helper()
	var evs []Event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestCSVReaderParses(t *testing.T) {
	const in = Header + "\r\n" +
		"2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0\r\n" +
		"\n" + // blank lines are skipped
		"17,1634567890.123456,allocate failure,0x0,1099511627776,0x28b473b0\n" +
		"0x11,5,free,140173352157184,2048,12345\n" +
		"1,23:59:59.9,deallocate,0xABCdef,0,0X0\n" +
		"2,1.5e-3,free,0x1,+7,0" // no final newline
	want := []Event{
		{Op: Alloc, Thread: 2342727, Time: 10*time.Hour + 16*time.Minute + 2061*time.Microsecond,
			Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0, Line: 2},
		{Op: AllocFailure, Thread: 17, Time: 1634567890*time.Second + 123456*time.Microsecond,
			Ptr: 0, Size: 1 << 40, Stream: 0x28b473b0, Line: 4},
		{Op: Free, Thread: 17, Time: 5 * time.Second, Ptr: 140173352157184, Size: 2048, Stream: 12345, Line: 5},
		{Op: Free, Thread: 1, Time: 23*time.Hour + 59*time.Minute + 59*time.Second + 900*time.Millisecond,
			Ptr: 0xabcdef, Size: 0, Stream: 0, Line: 6},
		{Op: Free, Thread: 2, Time: 1500 * time.Microsecond, Ptr: 1, Size: 7, Stream: 0, Line: 7},
	}
	r := NewCSVReader(strings.NewReader(in), "t.csv")
	got, err := readAll(t, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	// EOF is sticky.
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the end: %v, want io.EOF", err)
	}
}

func TestCSVReaderHeaderOnly(t *testing.T) {
	for _, in := range []string{Header, Header + "\n", "\xef\xbb\xbf" + Header + "\r\n\n\n"} {
		got, err := readAll(t, NewCSVReader(strings.NewReader(in), "h.csv"))
		if err != nil || len(got) != 0 {
			t.Errorf("%q: %v, %d events; want no error, no events", in, err, len(got))
		}
	}
}

func TestCSVReaderErrors(t *testing.T) {
	good := "1,10:00:00.000000,allocate,0x100,256,0x0\n"
	tests := []struct {
		name string
		in   string
		line int64
		want error
	}{
		{"empty file", "", 1, ErrHeader},
		{"wrong header", "Thread,Time,Action,Pointer,Size\n" + good, 1, ErrHeader},
		{"header case", strings.ToLower(Header) + "\n", 1, ErrHeader},
		{"no header", good, 1, ErrHeader},
		{"too few columns", Header + "\n" + good + "1,10:00:00.000000,allocate,0x100,256\n", 3, ErrColumns},
		{"too many columns", Header + "\n1,10:00:00.000000,allocate,0x100,256,0,extra\n", 2, ErrColumns},
		{"one column", Header + "\ngarbage\n", 2, ErrColumns},
		{"size not a number", Header + "\n1,10:00:00.000000,allocate,0x100,abc,0\n", 2, ErrSize},
		{"size empty", Header + "\n1,10:00:00.000000,allocate,0x100,,0\n", 2, ErrSize},
		{"size float", Header + "\n1,10:00:00.000000,allocate,0x100,1.5,0\n", 2, ErrSize},
		{"size overflow", Header + "\n1,10:00:00.000000,allocate,0x100,9223372036854775808,0\n", 2, ErrSize},
		{"size hex", Header + "\n1,10:00:00.000000,allocate,0x100,0x100,0\n", 2, ErrSize},
		{"negative size", Header + "\n" + good + good + "1,10:00:00.000000,free,0x100,-256,0\n", 4, ErrNegativeSize},
		{"unknown action", Header + "\n1,10:00:00.000000,reallocate,0x100,256,0\n", 2, ErrAction},
		{"action case", Header + "\n1,10:00:00.000000,Allocate,0x100,256,0\n", 2, ErrAction},
		{"empty action", Header + "\n1,10:00:00.000000,,0x100,256,0\n", 2, ErrAction},
		{"bad pointer", Header + "\n1,10:00:00.000000,allocate,0xzz,256,0\n", 2, ErrPointer},
		{"pointer too long", Header + "\n1,10:00:00.000000,allocate,0x11112222333344445,256,0\n", 2, ErrPointer},
		{"bad stream", Header + "\n1,10:00:00.000000,allocate,0x100,256,stream\n", 2, ErrStream},
		{"bad thread", Header + "\nmain,10:00:00.000000,allocate,0x100,256,0\n", 2, ErrThread},
		{"bad time", Header + "\n1,10:61:00.000000,allocate,0x100,256,0\n", 2, ErrTime},
		{"time one colon", Header + "\n1,10:00,allocate,0x100,256,0\n", 2, ErrTime},
		{"time empty fraction", Header + "\n1,10:00:00.,allocate,0x100,256,0\n", 2, ErrTime},
		{"time negative", Header + "\n1,-5,allocate,0x100,256,0\n", 2, ErrTime},
		{"time huge", Header + "\n1,1e300,allocate,0x100,256,0\n", 2, ErrTime},
		{"time nan", Header + "\n1,NaN,allocate,0x100,256,0\n", 2, ErrTime},
		// Beyond a time.Duration (2562047:47:16.854775807): refused, never
		// wrapped to a negative time.
		{"clock hours overflow", Header + "\n1,2562048:00:00.000000,allocate,0x100,256,0\n", 2, ErrTime},
		{"clock seven digits", Header + "\n1,9999999:59:59.999999,allocate,0x100,256,0\n", 2, ErrTime},
		{"clock minutes overflow", Header + "\n1,2562047:48:00.000000,allocate,0x100,256,0\n", 2, ErrTime},
		{"clock one ns over", Header + "\n1,2562047:47:16.854775808,allocate,0x100,256,0\n", 2, ErrTime},
		{"seconds one ns over", Header + "\n1,9223372036.854775808,allocate,0x100,256,0\n", 2, ErrTime},
		{"seconds overflow", Header + "\n1,9223372037,allocate,0x100,256,0\n", 2, ErrTime},
		{"seconds inf", Header + "\n1,1e400,allocate,0x100,256,0\n", 2, ErrTime},
		{"line too long", Header + "\n" + strings.Repeat("1", MaxLineLength+10) + "\n", 2, ErrLineTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewCSVReader(strings.NewReader(tc.in), "bad.csv")
			_, err := readAll(t, r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if pe.File != "bad.csv" || pe.Line != tc.line {
				t.Errorf("error at %s:%d, want bad.csv:%d", pe.File, pe.Line, tc.line)
			}
			if !strings.HasPrefix(err.Error(), "bad.csv:") {
				t.Errorf("message %q does not name the file", err)
			}
			// The error is sticky.
			if _, err2 := r.Next(); err2 != err {
				t.Errorf("second Next: %v, want the same error", err2)
			}
		})
	}
}

// The largest times a trace can hold are read exactly; one nanosecond
// more is the error above, with a message that says why.
func TestCSVReaderTimeLimits(t *testing.T) {
	for _, tc := range []struct{ in string }{
		{"2562047:47:16.854775807"},
		{"9223372036.854775807"},
	} {
		evs, err := readAll(t, NewCSVReader(strings.NewReader(Header+"\n1,"+tc.in+",allocate,0x100,256,0\n"), "t.csv"))
		if err != nil || len(evs) != 1 || evs[0].Time != math.MaxInt64 {
			t.Errorf("%s: %v, %v; want one event at time %d", tc.in, evs, err, int64(math.MaxInt64))
		}
	}
	_, err := readAll(t, NewCSVReader(strings.NewReader(Header+"\n1,2562048:00:00,allocate,0x100,256,0\n"), "t.csv"))
	if !errors.Is(err, ErrTime) || !strings.Contains(err.Error(), "beyond 2562047:47:16.854775807") {
		t.Errorf("error %v, want ErrTime saying the time is beyond the largest", err)
	}
}

// The message names the file and the line, as the command prints it.
func TestParseErrorMessage(t *testing.T) {
	r := NewCSVReader(strings.NewReader(Header+"\n1,10:00:00.000000,allocate,0x100,12x,0\n"), "run.csv")
	_, err := r.Next()
	const want = `run.csv:2: size "12x" is not a number`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestCSVWriterFormat(t *testing.T) {
	var buf bytes.Buffer
	w := NewCSVWriter(&buf)
	evs := []Event{
		{Op: Alloc, Thread: 2342727, Time: 10*time.Hour + 16*time.Minute + 2061*time.Microsecond + 999,
			Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0},
		{Op: AllocFailure, Thread: 1, Time: 25*time.Hour + time.Second, Ptr: 0, Size: 1 << 40, Stream: 0x28b473b0},
		{Op: Free, Thread: 1, Time: -time.Microsecond, Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0xABC},
		// The same second as the line before, another thread, then the
		// first thread again: what the writer keeps from line to line.
		{Op: Alloc, Thread: 0, Time: 24*time.Hour - 7*time.Microsecond, Ptr: 0x100, Size: 0, Stream: 0xFFFFFFFFFFFFFFFF},
		{Op: Free, Thread: 1, Time: 24*time.Hour - 500*time.Millisecond, Ptr: 0x100, Size: 0, Stream: 0x10},
	}
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	const want = Header + "\n" +
		"2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x0\n" +
		"1,01:00:01.000000,allocate failure,0x0,1099511627776,0x28b473b0\n" +
		"1,23:59:59.999999,free,0x7f7e81d00000,2048,0xabc\n" +
		"0,23:59:59.999993,allocate,0x100,0,0xffffffffffffffff\n" +
		"1,23:59:59.500000,free,0x100,0,0x10\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestCSVWriterEmptyAndBad(t *testing.T) {
	var buf bytes.Buffer
	w := NewCSVWriter(&buf)
	if err := w.Write(Event{Op: Alloc, Size: -1}); err == nil {
		t.Error("negative size accepted")
	}
	if err := w.Write(Event{Size: 1}); err == nil {
		t.Error("zero Op accepted")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.String() != Header+"\n" {
		t.Errorf("got %q, want only the header", buf.String())
	}
	// The header-only log reads back as an empty trace.
	if evs, err := readAll(t, NewCSVReader(&buf, "empty")); err != nil || len(evs) != 0 {
		t.Errorf("read back: %v, %d events", err, len(evs))
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, io.ErrShortWrite
	}
	f.n--
	return len(p), nil
}

func TestCSVWriterStickyError(t *testing.T) {
	w := NewCSVWriter(&failWriter{})
	if err := w.Flush(); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Flush: %v, want io.ErrShortWrite", err)
	}
	if err := w.Write(Event{Op: Alloc, Size: 1}); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write after failure: %v, want the same error", err)
	}
}

// Concurrent writers produce whole lines, all of them.
func TestCSVWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w := NewCSVWriter(&buf)
	const goroutines, each = 8, 500
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				w.Write(Event{Op: Alloc, Thread: uint64(g), Ptr: uint64(i) << 8, Size: int64(i), Stream: uint64(g)})
			}
		}()
	}
	for range goroutines {
		<-done
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := readAll(t, NewCSVReader(&buf, "concurrent"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != goroutines*each {
		t.Fatalf("read %d events, want %d", len(evs), goroutines*each)
	}
	next := make([]int64, goroutines)
	for _, ev := range evs {
		g := ev.Thread
		if ev.Size != next[g] || ev.Ptr != uint64(next[g])<<8 || ev.Stream != g {
			t.Fatalf("goroutine %d: got %+v, want size %d", g, ev, next[g])
		}
		next[g]++
	}
}

func TestRoundTrip(t *testing.T) {
	evs := []Event{
		{Op: Alloc, Thread: 0, Time: 0, Ptr: 0, Size: 0, Stream: 0},
		{Op: Alloc, Thread: 1<<64 - 1, Time: 24*time.Hour - time.Microsecond, Ptr: 1<<64 - 1,
			Size: 1<<63 - 1, Stream: 1<<64 - 1},
		{Op: AllocFailure, Thread: 7, Time: time.Hour, Ptr: 0, Size: 100, Stream: 3},
		{Op: Free, Thread: 7, Time: 12*time.Hour + 345678*time.Microsecond, Ptr: 0x7f0000000100, Size: 256, Stream: 3},
	}
	checkRoundTrip(t, evs)
}

// checkRoundTrip writes evs, reads them back and compares. evs must have
// times within one day in whole microseconds.
func checkRoundTrip(t testing.TB, evs []Event) {
	t.Helper()
	var buf bytes.Buffer
	w := NewCSVWriter(&buf)
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, NewCSVReader(bytes.NewReader(buf.Bytes()), "rt"))
	if err != nil {
		t.Fatalf("reading back %q: %v", buf.String(), err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events back, wrote %d", len(got), len(evs))
	}
	for i := range evs {
		want := evs[i]
		want.Line = int64(i + 2)
		if got[i] != want {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

// Reading an event allocates nothing once the reader is set up.
func TestCSVReaderNoAllocs(t *testing.T) {
	const line = "2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0\n"
	in := Header + "\n" + strings.Repeat(line, 2000)
	r := NewCSVReader(strings.NewReader(in), "allocs")
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocates %.1f times per event, want 0", allocs)
	}
}

func TestCSVWriterNoAllocs(t *testing.T) {
	w := NewCSVWriter(io.Discard)
	ev := Event{Op: Free, Thread: 2342727, Time: 10 * time.Hour, Ptr: 0x7f7e81d00000, Size: 2048, Stream: 7}
	w.Write(ev)
	if allocs := testing.AllocsPerRun(1000, func() { w.Write(ev) }); allocs != 0 {
		t.Errorf("Write allocates %.1f times per event, want 0", allocs)
	}
}

func BenchmarkCSVReader(b *testing.B) {
	const line = "2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0\n"
	in := []byte(Header + "\n" + strings.Repeat(line, 10000))
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	var r *CSVReader
	for b.Loop() {
		if r == nil {
			r = NewCSVReader(bytes.NewReader(in), "bench")
		}
		if _, err := r.Next(); err == io.EOF {
			r = nil
		} else if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCSVWriter(b *testing.B) {
	w := NewCSVWriter(io.Discard)
	ev := Event{Op: Alloc, Thread: 2342727, Time: 10 * time.Hour, Ptr: 0x7f7e81d00000, Size: 2048, Stream: 7}
	b.ReportAllocs()
	for b.Loop() {
		w.Write(ev)
	}
}

// TestCSVWriterWriteIf checks that WriteIf writes its event only when do
// reports true, runs do with the writer's lock held (a Write from do's
// goroutine would deadlock, so another goroutine's Write must wait for
// do), and refuses a bad event without running do.
func TestCSVWriterWriteIf(t *testing.T) {
	var buf bytes.Buffer
	w := NewCSVWriter(&buf)
	ev := Event{Op: Free, Thread: 1, Time: time.Second, Ptr: 0x100, Size: 256, Stream: 2}
	if err := w.WriteIf(ev, func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := w.WriteIf(Event{Op: Free, Size: -1}, func() bool { ran = true; return true }); err == nil || ran {
		t.Errorf("bad event: err %v, do ran %v", err, ran)
	}
	started, other := make(chan struct{}), make(chan error)
	err := w.WriteIf(ev, func() bool {
		go func() {
			close(started)
			other <- w.Write(Event{Op: Alloc, Thread: 1, Time: 2 * time.Second, Ptr: 0x100, Size: 256, Stream: 3})
		}()
		<-started
		select {
		case err := <-other:
			t.Errorf("a Write ran while do held the lock: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	const want = Header + "\n" +
		"1,00:00:01.000000,free,0x100,256,0x2\n" +
		"1,00:00:02.000000,allocate,0x100,256,0x3\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
