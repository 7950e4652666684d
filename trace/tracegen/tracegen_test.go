package tracegen_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/trace/tracegen"
)

// TestChurnShape reads generated logs back with the trace package and
// checks what Config promises: the number of events, the peak number of
// live blocks, the streams, frees of live blocks only (each on its block's
// stream unless CrossEvery moved it), sizes in range, times increasing,
// nothing live at the end.
func TestChurnShape(t *testing.T) {
	for _, c := range []tracegen.Config{
		{Events: 2, Live: 1, Streams: 1},
		{Events: 1000, Live: 100, Streams: 7, Seed: 1},
		{Events: 1002, Live: 100, Streams: 7, Seed: 2},
		{Events: 20000, Live: 500, Streams: 300, CrossEvery: 10, MinSize: 1000, MaxSize: 5000, Seed: 3},
		{Events: 400, Live: 200, Streams: 2},
	} {
		src, err := tracegen.Churn(c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		tr := trace.NewCSVReader(src, "gen")
		type blk struct {
			size   int64
			stream uint64
		}
		live := map[uint64]blk{}
		streams := map[uint64]bool{}
		peak, events, cross := 0, 0, 0
		var last int64
		for {
			ev, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%+v: event %d: %v", c, events, err)
			}
			events++
			if int64(ev.Time) <= last {
				t.Fatalf("%+v: event %d: time %v not after %v", c, events, ev.Time, last)
			}
			last = int64(ev.Time)
			streams[ev.Stream] = true
			switch ev.Op {
			case trace.Alloc:
				if _, ok := live[ev.Ptr]; ok {
					t.Fatalf("%+v: event %d allocates live %#x", c, events, ev.Ptr)
				}
				lo, hi := max(c.MinSize, 256), c.MaxSize
				if hi == 0 {
					hi = 1 << 20
				}
				if ev.Size < lo || ev.Size > hi+255 {
					t.Fatalf("%+v: size %d outside %d-%d", c, ev.Size, lo, hi)
				}
				live[ev.Ptr] = blk{ev.Size, ev.Stream}
				peak = max(peak, len(live))
			case trace.Free:
				b, ok := live[ev.Ptr]
				if !ok || b.size != ev.Size {
					t.Fatalf("%+v: event %d frees %#x (%d bytes), live %v %v", c, events, ev.Ptr, ev.Size, ok, b)
				}
				if b.stream != ev.Stream {
					cross++
				}
				delete(live, ev.Ptr)
			default:
				t.Fatalf("%+v: event %d: op %v", c, events, ev.Op)
			}
		}
		if events != c.Events || peak != c.Live || len(streams) != c.Streams || len(live) != 0 {
			t.Errorf("%+v: %d events, peak %d live, %d streams, %d live at the end", c, events, peak, len(streams), len(live))
		}
		if (cross > 0) != (c.CrossEvery > 0) {
			t.Errorf("%+v: %d cross-stream frees", c, cross)
		}
	}
}

// TestChurnDeterministic: one Config, the same bytes; another seed, others.
func TestChurnDeterministic(t *testing.T) {
	read := func(seed uint64) []byte {
		src, err := tracegen.Churn(tracegen.Config{Events: 5000, Live: 300, Streams: 20, CrossEvery: 5, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		// An odd buffer size, so that lines are split across reads.
		var out bytes.Buffer
		buf := make([]byte, 37)
		for {
			n, err := src.Read(buf)
			out.Write(buf[:n])
			if err == io.EOF {
				return out.Bytes()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b, c := read(1), read(1), read(2)
	if !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Errorf("same seed equal: %v; other seed equal: %v", bytes.Equal(a, b), bytes.Equal(a, c))
	}
	if !bytes.HasPrefix(a, []byte(trace.Header+"\n")) {
		t.Errorf("log starts %q", a[:50])
	}
}

func TestChurnBadConfig(t *testing.T) {
	for _, c := range []tracegen.Config{
		{Events: 10, Live: 0, Streams: 1},
		{Events: 10, Live: 6, Streams: 1},
		{Events: 10, Live: 1, Streams: 0},
		{Events: 11, Live: 1, Streams: 1},
		{Events: 10, Live: 1, Streams: 1, MinSize: -1},
		{Events: 10, Live: 1, Streams: 1, MinSize: 10, MaxSize: 5},
		{Events: 10, Live: 1, Streams: 1, CrossEvery: -1},
	} {
		if _, err := tracegen.Churn(c); !errors.Is(err, tracegen.ErrConfig) {
			t.Errorf("%+v: got %v, want ErrConfig", c, err)
		}
	}
}
