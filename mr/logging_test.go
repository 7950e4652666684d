package mr_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

func TestLoggingFormat(t *testing.T) {
	up := newRecording()
	s1, s2 := up.stream(), up.stream()
	var out strings.Builder
	clock := time.Date(2026, 11, 22, 13, 4, 5, 123456789, time.UTC)
	l := mr.NewLogging(up, &out, mr.LoggingOptions{Thread: 7, Now: func() time.Time {
		clock = clock.Add(1500 * time.Microsecond)
		return clock
	}})
	p, err := l.Allocate(1000, s1)
	if err != nil {
		t.Fatal(err)
	}
	up.failAllocs(&mr.OutOfMemoryError{Resource: "recording", Requested: 50})
	if _, err := l.Allocate(50, s2); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatal(err)
	}
	if err := l.Deallocate(p, 1000, s2); err != nil {
		t.Fatal(err)
	}
	// Bad input is not logged.
	l.Deallocate(p, 1000, s2)
	l.Allocate(-1, s1)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Thread,Time,Action,Pointer,Size,Stream\n"+
		"7,13:04:05.124956,allocate,%#x,1000,%#x\n"+
		"7,13:04:05.126456,allocate failure,0x0,50,%#x\n"+
		"7,13:04:05.127956,free,%#x,1000,%#x\n", uint64(p), s1.ID(), s2.ID(), uint64(p), s2.ID())
	if out.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestLoggingEmptyLogHasHeader(t *testing.T) {
	var out strings.Builder
	l := mr.NewLogging(newRecording(), &out, mr.LoggingOptions{})
	if err := l.Flush(); err != nil || out.String() != trace.Header+"\n" {
		t.Fatalf("empty log %q, %v", out.String(), err)
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

func TestLoggingWriteError(t *testing.T) {
	up := newRecording()
	s := up.stream()
	l := mr.NewLogging(up, &failingWriter{}, mr.LoggingOptions{})
	p, err := l.Allocate(100, s)
	if err != nil {
		t.Fatal(err) // the memory is handed out whatever the log says
	}
	if err := l.Deallocate(p, 100, s); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Flush = %v, want the write error", err)
	}
	if l.Err() == nil {
		t.Fatal("Err lost the write error")
	}
	if up.liveCount() != 0 {
		t.Fatal("upstream leaked")
	}
}

// reuseResource hands freed addresses out again at once (LIFO per size),
// like a pool, so that a log that wrote a free after the next allocation
// of the same address would be caught.
type reuseResource struct {
	dev  gpu.Device
	mu   sync.Mutex
	next gpu.DevicePtr
	free map[int][]gpu.DevicePtr
}

func (r *reuseResource) Device() gpu.Device { return r.dev }
func (r *reuseResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.free[size]; len(l) > 0 {
		p := l[len(l)-1]
		r.free[size] = l[:len(l)-1]
		return p, nil
	}
	r.next += 1 << 16
	return r.next, nil
}
func (r *reuseResource) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.free[size] = append(r.free[size], p)
	return nil
}

// TestLoggingReplays logs a concurrent run over a reusing upstream, reads
// the log back with the trace package and replays it against a model: no
// address is allocated while live, every free matches a live allocation,
// and the counts match a Stats adaptor's.
func TestLoggingReplays(t *testing.T) {
	t.Run("reuse", func(t *testing.T) {
		up := &reuseResource{dev: &fakeDevice{}, free: map[int][]gpu.DevicePtr{}}
		checkLoggingReplays(t, up, func(int) gpu.Stream { return newFakeStream(up.dev.(*fakeDevice)) })
	})
	// Over a pool, Logging and Stats keep no table (owner.go): the log's
	// order comes from the writer's lock. Two goroutines share each
	// stream, so a block one frees is the next the other gets.
	t.Run("pool", func(t *testing.T) {
		pool, s0 := newOwnedPool(t)
		streams := []gpu.Stream{s0}
		for range 3 {
			s, err := pool.Device().NewStream()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Synchronize(); s.Destroy() })
			streams = append(streams, s)
		}
		checkLoggingReplays(t, pool, func(g int) gpu.Stream { return streams[g%len(streams)] })
	})
}

// checkLoggingReplays logs goroutines' pairs through Logging over Stats
// over up, each goroutine on stream(g), and replays the log: every free
// follows its allocation, no address is allocated while live, and the
// counts agree with Stats.
func checkLoggingReplays(t *testing.T, up mr.Resource, stream func(g int) gpu.Stream) {
	st := mr.NewStats(up, mr.StatsOptions{})
	var out syncBuffer
	l := mr.NewLogging(st, &out, mr.LoggingOptions{})
	const goroutines = 8
	n := 400
	if testing.Short() {
		n = 100
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stream(g)
			var held []gpu.DevicePtr
			for i := range n {
				p, err := l.Allocate(256, s)
				if err != nil {
					t.Error(err)
					return
				}
				held = append(held, p)
				if len(held) > 2 || i == n-1 {
					for _, q := range held {
						if err := l.Deallocate(q, 256, s); err != nil {
							t.Error(err)
							return
						}
					}
					held = held[:0]
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}

	r := trace.NewCSVReader(strings.NewReader(out.String()), "log.csv")
	live := map[uint64]int64{}
	var allocs, frees, liveBytes, peak int64
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Op {
		case trace.Alloc:
			if _, ok := live[ev.Ptr]; ok {
				t.Fatalf("line %d: %#x allocated while live", ev.Line, ev.Ptr)
			}
			live[ev.Ptr] = ev.Size
			allocs++
			liveBytes += ev.Size
			peak = max(peak, liveBytes)
		case trace.Free:
			if sz, ok := live[ev.Ptr]; !ok || sz != ev.Size {
				t.Fatalf("line %d: free of %#x (%d bytes) that is not live", ev.Line, ev.Ptr, ev.Size)
			}
			delete(live, ev.Ptr)
			frees++
			liveBytes -= ev.Size
		default:
			t.Fatalf("line %d: unexpected %v", ev.Line, ev.Op)
		}
	}
	snap := st.Snapshot()
	if allocs != goroutines*int64(n) || frees != allocs || len(live) != 0 ||
		uint64(allocs) != snap.Allocations.Total {
		t.Fatalf("log has %d allocations and %d frees, %d live; stats %+v", allocs, frees, len(live), snap)
	}
	// Each goroutine holds at most three blocks of 256 bytes.
	if peak > goroutines*3*256 || peak < 3*256 {
		t.Fatalf("peak live bytes from the log %d", peak)
	}
}

// TestLoggingSharedWriterStacks checks that loggers sharing one writer
// (NewLoggingTo) may sit at two levels of one stack: a free through the
// top reaches a logger below, which writes its own line, and must not wait
// for a lock the top holds. Over a pool both levels keep no table.
func TestLoggingSharedWriterStacks(t *testing.T) {
	tests := []struct {
		name  string
		stack func(t *testing.T, w *trace.CSVWriter) (mr.Resource, gpu.Stream)
	}{
		{"logger over logger over pool", func(t *testing.T, w *trace.CSVWriter) (mr.Resource, gpu.Stream) {
			pool, s := newOwnedPool(t)
			inner := mr.NewLoggingTo(pool, w, mr.LoggingOptions{Thread: 1})
			return mr.NewLoggingTo(inner, w, mr.LoggingOptions{Thread: 2}), s
		}},
		{"logger over pool over logger", func(t *testing.T, w *trace.CSVWriter) (mr.Resource, gpu.Stream) {
			pool, s := newOwnedPool(t)
			// The pool's upstream logs its chunks to the same writer; a
			// threshold of one byte makes the pool give its idle chunk
			// back inside the free.
			below := mr.NewLoggingTo(mr.NewDirect(pool.Device()), w, mr.LoggingOptions{Thread: 1})
			p, err := mr.NewPool(below, mr.PoolOptions{ReleaseThreshold: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return mr.NewLoggingTo(p, w, mr.LoggingOptions{Thread: 2}), s
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncBuffer
			w := trace.NewCSVWriter(&out)
			top, s := tt.stack(t, w)
			p, err := top.Allocate(256, s)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- top.Deallocate(p, 256, s) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("free through loggers sharing a writer did not return: deadlock")
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			var frees int
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.Contains(line, ",free,") {
					frees++
				}
			}
			if frees != 2 {
				t.Fatalf("log has %d free lines, want 2:\n%s", frees, out.String())
			}
		})
	}
}

// TestLoggingDefaultClock logs pairs with the default clock for 5 ms,
// through the CPU clock's measurement of its rate and several of its
// anchors (internal/cpuclock): the lines' times never go back, and each
// is the time of day of the wall clock around its pair within 2 ms (the
// log's microseconds, and room for a wall clock stepped meanwhile).
func TestLoggingDefaultClock(t *testing.T) {
	up := newRecording()
	s := up.stream()
	var out strings.Builder
	l := mr.NewLogging(up, &out, mr.LoggingOptions{})
	var bounds [][2]time.Duration
	for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
		before := trace.SinceMidnight(time.Now())
		p, err := l.Allocate(1000, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Deallocate(p, 1000, s); err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, [2]time.Duration{before, trace.SinceMidnight(time.Now())})
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	r := trace.NewCSVReader(strings.NewReader(out.String()), "log")
	var last time.Duration
	for i := 0; ; i++ {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			if i != 2*len(bounds) {
				t.Fatalf("%d lines for %d pairs", i, len(bounds))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Time < last {
			t.Fatalf("line %d: time %v after %v", i+2, e.Time, last)
		}
		last = e.Time
		if b := bounds[i/2]; b[1] > b[0] && (e.Time < b[0]-2*time.Millisecond || e.Time > b[1]+2*time.Millisecond) {
			t.Fatalf("line %d: time of day %v, the wall clock's %v to %v", i+2, e.Time, b[0], b[1])
		}
	}
}
