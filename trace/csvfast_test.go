package trace

import (
	"bytes"
	"testing"
	"time"
)

// general parses one data line with the general parser, as the reader
// does when the fast path gives up.
func general(b []byte) (Event, error) {
	r := &CSVReader{name: "line.csv", line: 2}
	return r.parse(b)
}

func TestParseFast(t *testing.T) {
	tests := []struct {
		line string
		want Event // zero: the fast path gives up
	}{
		{"2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0",
			Event{Op: Alloc, Thread: 2342727, Time: 10*time.Hour + 16*time.Minute + 2061*time.Microsecond,
				Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0x28b473b0}},
		{"1,0:00:60,free,0XABCdef,0,0",
			Event{Op: Free, Thread: 1, Time: time.Minute, Ptr: 0xabcdef, Stream: 0}},
		{"0x11,999999:59:59.123456789,deallocate,12,999999999999999999,9999999999999999999",
			Event{Op: Free, Thread: 0x11, Time: 999999*time.Hour + 59*time.Minute + 59*time.Second + 123456789,
				Ptr: 12, Size: 999999999999999999, Stream: 9999999999999999999}},
		{"17,1634567.5,allocate failure,0x0,1,0x1",
			Event{Op: AllocFailure, Thread: 17, Time: 1634567*time.Second + 500*time.Millisecond, Ptr: 0, Size: 1, Stream: 1}},
		{"1,999999999,free,0x1,1,0x1", Event{Op: Free, Thread: 1, Time: 999999999 * time.Second, Ptr: 1, Size: 1, Stream: 1}},
		// Legal, but for the general parser: a sign, a long number, a
		// numeric time's rarer forms, 7 digits of hours, an empty
		// fraction.
		{"1,10:00:00.000001,allocate,0x1,+7,0x1", Event{}},
		{"1,10:00:00.000001,allocate,0x1,1000000000000000000,0x1", Event{}},
		{"12345678901234567890,10:00:00.000001,allocate,0x1,1,0x1", Event{}},
		{"1,1.5e-3,allocate,0x1,1,0x1", Event{}},
		{"1,5.,allocate,0x1,1,0x1", Event{}},
		{"1,1234567890,allocate,0x1,1,0x1", Event{}},
		{"1,1234567:00:00,allocate,0x1,1,0x1", Event{}},
		// Errors: the fast path gives up and the general parser names them.
		{"1,10:00:00.,allocate,0x1,1,0x1", Event{}},
		{"1,10:60:00,allocate,0x1,1,0x1", Event{}},
		{"1,10:00:61,allocate,0x1,1,0x1", Event{}},
		{"1,10:00:00.0000000001,allocate,0x1,1,0x1", Event{}},
		{"1,10:00:00,alloc,0x1,1,0x1", Event{}},
		{"1,10:00:00,allocate,0x,1,0x1", Event{}},
		{"1,10:00:00,allocate,0x11111111111111111,1,0x1", Event{}},
		{"1,10:00:00,allocate,0x1,-1,0x1", Event{}},
		{"1,10:00:00,allocate,0x1,1,0x1,", Event{}},
		{"1,10:00:00,allocate,0x1,1", Event{}},
		{"1,10:00:00,allocate,0x1,1,0X", Event{}},
		{",10:00:00,allocate,0x1,1,0x1", Event{}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, ok := parseFast([]byte(tt.line))
			if ok != (tt.want != Event{}) || got != tt.want {
				t.Fatalf("parseFast = %+v, %v; want %+v, %v", got, ok, tt.want, tt.want != Event{})
			}
			if !ok {
				return
			}
			g, err := general([]byte(tt.line))
			g.Line = 0
			if err != nil || g != got {
				t.Fatalf("the general parser reads %+v, %v; the fast path %+v", g, err, got)
			}
		})
	}
}

// FuzzParseFast: every line the fast path accepts, the general parser
// accepts with the same event, so the fast path changes no result; and
// the reader, which tries the fast path first, reads every line as the
// general parser alone does, errors included.
func FuzzParseFast(f *testing.F) {
	f.Add([]byte("2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0"))
	f.Add([]byte("0x11,5,free,140173352157184,2048,12345"))
	f.Add([]byte("1,99:59:60.123456789,deallocate,0x100,0,0"))
	f.Add([]byte("1,1.5e-3,allocate failure,0x1,+7,0"))
	f.Add([]byte("1,10:00:00.,allocate,0x1,1,0X"))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := parseFast(line)
		slow, err := general(line)
		if ok {
			slow.Line = 0
			if err != nil || slow != fast {
				t.Fatalf("%q: fast path %+v, general parser %+v, %v", line, fast, slow, err)
			}
		}
		// Through the reader, a single line.
		for _, c := range line {
			if c == '\n' || c == '\r' {
				return
			}
		}
		if len(line) == 0 {
			return
		}
		in := append([]byte(Header+"\n"), line...)
		r := NewCSVReader(bytes.NewReader(in), "line.csv")
		ev, rerr := r.Next()
		switch {
		case err != nil:
			if rerr == nil || rerr.Error() != err.Error() {
				t.Fatalf("%q: reader says %v, general parser %v", line, rerr, err)
			}
		case rerr != nil:
			t.Fatalf("%q: reader says %v, general parser reads %+v", line, rerr, slow)
		default:
			slow.Line = 2
			if ev != slow {
				t.Fatalf("%q: reader reads %+v, general parser %+v", line, ev, slow)
			}
		}
	})
}
