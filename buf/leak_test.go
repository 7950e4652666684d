package buf_test

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// catchLeaks installs a leak handler that keeps the leaks of buffers from
// res (other tests' buffers may be collected meanwhile) until the test
// ends.
func catchLeaks(t *testing.T, res mr.Resource) chan buf.Leak {
	ch := make(chan buf.Leak, 16)
	prev := buf.SetLeakHandler(func(l buf.Leak) {
		if l.Resource == res {
			ch <- l
		}
	})
	t.Cleanup(func() { buf.SetLeakHandler(prev) })
	return ch
}

// dropBuffer allocates a buffer from res and drops it open.
//
//go:noinline
func dropBuffer(t *testing.T, res mr.Resource, s gpu.Stream) gpu.DevicePtr {
	b, err := buf.New(res, 1<<20, s)
	must(t, err)
	return b.Ptr()
}

// collected runs the garbage collector until a leak arrives.
func collected(t *testing.T, ch chan buf.Leak) buf.Leak {
	t.Helper()
	for range 500 {
		runtime.GC()
		select {
		case l := <-ch:
			return l
		case <-time.After(time.Millisecond):
		}
	}
	t.Fatal("the dropped buffer was not collected")
	return buf.Leak{}
}

func hasFrame(l buf.Leak, fn string) bool {
	for _, f := range l.Frames() {
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
	}
	return false
}

// TestLeakThroughTracking: a buffer dropped open is freed, counted, given
// to the handler with the stack Tracking recorded, and listed in the
// Tracking adaptor's leak report.
func TestLeakThroughTracking(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	tr := mr.NewTracking(e.res, mr.TrackingOptions{})
	ch := catchLeaks(t, tr)
	before := buf.Leaks()

	p := dropBuffer(t, tr, s)
	l := collected(t, ch)
	if l.Ptr != p || l.Size != 1<<20 || l.Stream != s.ID() || l.Err != nil {
		t.Fatalf("leak %+v, want %#x, 1 MiB, stream %d", l, uint64(p), s.ID())
	}
	if !hasFrame(l, "buf_test.dropBuffer") {
		t.Errorf("leak stack lacks the allocating function: %v", l.Frames())
	}
	if got := buf.Leaks() - before; got < 1 {
		t.Errorf("Leaks went up by %d", got)
	}
	if n, _ := e.res.Live(); n != 0 || len(tr.Live()) != 0 {
		t.Errorf("memory of the leak not freed: %d live below, %d in tracking", n, len(tr.Live()))
	}
	n, last := tr.Leaked()
	if n != 1 || len(last) != 1 || last[0].Ptr != p || last[0].Size != 1<<20 {
		t.Fatalf("Tracking.Leaked() = %d, %+v", n, last)
	}
	var rep strings.Builder
	must(t, tr.WriteLeakReport(&rep))
	if !strings.Contains(rep.String(), "1 allocation was dropped by their owners without a free and freed by the garbage collector:") ||
		!strings.Contains(rep.String(), fmt.Sprintf("1.0 MiB at %#x (stream %d, allocation #1), allocated at:", uint64(p), s.ID())) ||
		!strings.Contains(rep.String(), "buf_test.dropBuffer") {
		t.Errorf("leak report:\n%s", rep.String())
	}
	re := regexp.MustCompile(`^buf: leak: 1\.0 MiB at 0x[0-9a-f]+ \(stream \d+\) collected without Close, allocated at .*buf_test\.dropBuffer \(.*leak_test\.go:\d+\)$`)
	if !re.MatchString(l.String()) {
		t.Errorf("Leak.String() = %q", l.String())
	}
}

// TestLeakStackWithoutTracking: without a Tracking adaptor New records
// the stack itself while a handler is installed, and not otherwise (the
// leak is still counted).
func TestLeakStackWithoutTracking(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	ch := catchLeaks(t, e.res)
	dropBuffer(t, e.res, s)
	if l := collected(t, ch); !hasFrame(l, "buf_test.dropBuffer") {
		t.Errorf("leak stack lacks the allocating function: %v", l.Frames())
	}

	// No handler at New: no stack; the leak is counted all the same.
	prev := buf.SetLeakHandler(nil)
	before := buf.Leaks()
	dropBuffer(t, e.res, s)
	for i := 0; i < 500 && buf.Leaks() == before; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	buf.SetLeakHandler(prev)
	if buf.Leaks() == before {
		t.Fatal("a leak with no handler was not counted")
	}
	if n, _ := e.res.Live(); n != 0 {
		t.Fatalf("%d allocations live after the collection", n)
	}
}

// failingFree refuses every free.
type failingFree struct{ mr.Resource }

var errRefused = errors.New("free refused")

func (f failingFree) Deallocate(gpu.DevicePtr, int, gpu.Stream) error { return errRefused }

// TestLeakFreeFails: the handler gets the error of a free that failed,
// and the memory stays allocated below.
func TestLeakFreeFails(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	res := failingFree{e.res}
	ch := catchLeaks(t, res)
	p := dropBuffer(t, res, s)
	l := collected(t, ch)
	if !errors.Is(l.Err, errRefused) || !strings.Contains(l.String(), "; the free failed, the memory stays allocated: free refused") {
		t.Fatalf("leak %v (err %v)", l, l.Err)
	}
	if n, _ := e.res.Live(); n != 1 {
		t.Fatalf("%d allocations live below, want the one whose free failed", n)
	}
	must(t, e.res.Deallocate(p, 1<<20, s))
}
