package trace

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// normalize is what writing and reading back does to an event: the time
// becomes a time of day in whole microseconds, and the line is the new
// file's.
func normalize(ev Event, line int64) Event {
	ev.Time %= 24 * time.Hour
	if ev.Time < 0 {
		ev.Time += 24 * time.Hour
	}
	ev.Time = ev.Time.Truncate(time.Microsecond)
	ev.Line = line
	return ev
}

// FuzzCSVReader: no input panics; every error is a *ParseError naming the
// file and a line; every event is valid; and what parses, written back
// and read again, gives the same events.
func FuzzCSVReader(f *testing.F) {
	f.Add([]byte(smallCSV))
	f.Add([]byte(Header + "\n17,1634567890.123456,allocate failure,0x0,1099511627776,0x28b473b0\n"))
	f.Add([]byte(Header + "\r\n0x11,5,free,140173352157184,2048,12345\r\n\r\n"))
	f.Add([]byte(Header + "\n1,1.5e-3,deallocate,0x1,+7,0"))
	f.Add([]byte(Header + "\n1,10:00:00.000000,free,0x100,-256,0\n"))
	f.Add([]byte(Header + "\n1,99:59:60.123456789,free,0x100,0,0\n"))
	f.Add([]byte(Header + "\n1,2562047:47:16.854775807,free,0x100,0,0\n"))
	f.Add([]byte("Thread,Time\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := readAll(t, NewCSVReader(bytes.NewReader(data), "fuzz.csv"))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "fuzz.csv" || pe.Line < 1 {
				t.Fatalf("error %#v is not a *ParseError with a line", err)
			}
		}
		for _, ev := range evs {
			if ev.Op < Alloc || ev.Op > Free || ev.Size < 0 || ev.Time < 0 || ev.Line < 2 {
				t.Fatalf("invalid event %+v", ev)
			}
		}
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
		again, err := readAll(t, NewCSVReader(&buf, "again.csv"))
		if err != nil {
			t.Fatalf("reading back what the writer wrote: %v", err)
		}
		if len(again) != len(evs) {
			t.Fatalf("read back %d events, wrote %d", len(again), len(evs))
		}
		for i := range evs {
			if want := normalize(evs[i], int64(i+2)); again[i] != want {
				t.Fatalf("event %d: read back %+v, want %+v", i, again[i], want)
			}
		}
	})
}

// FuzzRoundTrip: any valid event survives writer then reader.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(1), uint64(2342727), int64(36960002061000), uint64(0x7f7e81d00000), int64(2048), uint64(0))
	f.Add(uint8(2), uint64(0), int64(-1), uint64(0), int64(1<<62), uint64(1<<64-1))
	f.Add(uint8(3), uint64(1<<64-1), int64(1<<63-1), uint64(1<<64-1), int64(0), uint64(0x28b473b0))
	f.Fuzz(func(t *testing.T, op uint8, thread uint64, tm int64, ptr uint64, size int64, stream uint64) {
		ev := Event{Op: Op(op%3 + 1), Thread: thread, Time: time.Duration(tm), Ptr: ptr, Size: size, Stream: stream}
		if ev.Size < 0 {
			ev.Size = -(ev.Size + 1)
		}
		checkRoundTrip(t, []Event{normalize(ev, 0)})
	})
}
