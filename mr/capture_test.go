// Tests of the capture wing's rules (capture.go) that the conformance
// suite (mrtest) does not reach: captures not begun through mr, shared
// graph pools, the errors of Release, bad frees inside a capture, the side
// paths that must leave a capturing stream alone, and leak reports.

package mr_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func simCaptureDevice(t *testing.T) gpu.Device {
	t.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

func newTestStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func captureStatus(t *testing.T, s gpu.Stream) gpu.CaptureStatus {
	t.Helper()
	st, err := s.(gpu.CaptureStream).CaptureStatus()
	ok(t, err)
	return st
}

// A capture begun outside mr: a suballocator refuses (nothing would own
// the memory the graph keeps) without disturbing the capture; Async's
// calls become graph memory nodes all the same.
func TestCaptureNotBegunThroughMR(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	async, err := mr.NewAsync(dev, mr.AsyncOptions{})
	ok(t, err)
	ok(t, gpu.BeginCapture(s, gpu.CaptureGlobal))
	if _, err := pool.Allocate(4096, s); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("Pool.Allocate in a capture not begun with mr: %v, want ErrStreamCapturing", err)
	}
	p, err := async.Allocate(4096, s)
	ok(t, err)
	ok(t, async.Deallocate(p, 4096, s))
	if st := captureStatus(t, s); st != gpu.CaptureActive {
		t.Errorf("capture status %d, want active", st)
	}
	g, err := gpu.EndCapture(s)
	ok(t, err)
	ok(t, g.Destroy())
	if n, _ := async.Live(); n != 0 {
		t.Errorf("Async keeps %d allocations after a graph allocated and freed one", n)
	}
}

// TestCaptureNotBegunThroughMRAdopted: a pool refuses a stream adopted
// from another library while a capture not begun with mr is in progress
// on it, whether the capture gate covers the stream (the legacy default
// stream, whose requests take the hot path while no capture is in
// progress) or not (every request asks the stream), also after the pool
// has served the stream and armed its fast slot; after the capture it
// serves the stream again.
func TestCaptureNotBegunThroughMRAdopted(t *testing.T) {
	dev := simCaptureDevice(t)
	raw, err := dev.(*sim.Device).NewRawStream()
	ok(t, err)
	t.Cleanup(func() { dev.(*sim.Device).DestroyRawStream(raw) })
	for _, c := range []struct {
		name  string
		raw   uintptr
		gated bool
	}{
		{"legacy default stream", gpu.StreamLegacy, true},
		{"per-thread default stream", gpu.StreamPerThread, false},
		{"a raw stream of another library", raw, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := dev.AdoptStream(c.raw)
			ok(t, err)
			if got := gpu.CaptureGated(s); got != c.gated {
				t.Fatalf("CaptureGated = %v, want %v", got, c.gated)
			}
			pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
			ok(t, err)
			defer func() { ok(t, pool.Close()) }()
			for range 2 { // the second pair is served by the fast slot
				p, err := pool.Allocate(4096, s)
				ok(t, err)
				ok(t, pool.Deallocate(p, 4096, s))
			}
			ok(t, gpu.BeginCapture(s, gpu.CaptureRelaxed))
			if _, err := pool.Allocate(4096, s); !errors.Is(err, mr.ErrStreamCapturing) {
				t.Errorf("Pool.Allocate in a capture not begun with mr: %v, want ErrStreamCapturing", err)
			}
			if st := captureStatus(t, s); st != gpu.CaptureActive {
				t.Errorf("capture status %d, want active", st)
			}
			g, err := gpu.EndCapture(s)
			ok(t, err)
			ok(t, g.Destroy())
			p, err := pool.Allocate(4096, s)
			ok(t, err)
			ok(t, pool.Deallocate(p, 4096, s))
		})
	}
}

// Captures sharing a GraphPool: the second reuses what the first freed,
// they cannot overlap, and the pool is released after its captures.
func TestCaptureSharedGraphPool(t *testing.T) {
	dev := simCaptureDevice(t)
	s, o := newTestStream(t, dev), newTestStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	gp := mr.NewGraphPool(dev)
	capture := func() (*mr.Capture, gpu.DevicePtr) {
		c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{Pool: gp})
		ok(t, err)
		p, err := pool.Allocate(1<<20, s)
		ok(t, err)
		ok(t, pool.Deallocate(p, 1<<20, s))
		return c, p
	}
	c1, p1 := capture()
	if _, err := mr.BeginCapture(o, gpu.CaptureRelaxed, mr.CaptureOptions{Pool: gp}); !errors.Is(err, mr.ErrCaptureActive) {
		t.Errorf("a second capture into a busy graph pool: %v, want ErrCaptureActive", err)
	}
	if captureStatus(t, o) != gpu.CaptureNone {
		t.Error("the refused capture began anyway")
	}
	_, err = c1.End()
	ok(t, err)
	reserved := gp.Usage().Reserved
	c2, p2 := capture()
	_, err = c2.End()
	ok(t, err)
	if gp.Usage().Reserved != reserved || p2 < p1-1<<20 || p2 > p1+1<<20 {
		t.Errorf("second capture got %#x (first %#x), pool reserves %d (was %d): want the first graph's chunk, no growth",
			uint64(p2), uint64(p1), gp.Usage().Reserved, reserved)
	}
	ok(t, c1.Release(s))
	if err := gp.Release(s); !errors.Is(err, mr.ErrGraphInUse) {
		t.Errorf("graph pool Release with a capture not released: %v, want ErrGraphInUse", err)
	}
	ok(t, c2.Release(s))
	ok(t, gp.Release(s))
	if u := gp.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("graph pool after Release: %+v", u)
	}
	if err := gp.Release(s); !errors.Is(err, mr.ErrReleased) {
		t.Errorf("second graph pool Release: %v, want ErrReleased", err)
	}
	if _, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{Pool: gp}); !errors.Is(err, mr.ErrReleased) {
		t.Errorf("capture into a released graph pool: %v, want ErrReleased", err)
	}
	ok(t, pool.Release())
	if u := pool.Usage(); u.Reserved != 0 {
		t.Errorf("pool reserves %d after everything was released", u.Reserved)
	}
}

// The errors of End and Release, and bad frees inside a capture.
func TestCaptureErrors(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	before, err := pool.Allocate(4096, s)
	ok(t, err)
	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	if err := c.Release(s); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("Release on the capturing stream: %v, want ErrStreamCapturing", err)
	}
	o := newTestStream(t, dev)
	if err := c.Release(o); !errors.Is(err, mr.ErrCaptureActive) {
		t.Errorf("Release before End: %v, want ErrCaptureActive", err)
	}
	for _, tc := range []struct {
		name string
		p    gpu.DevicePtr
		size int
		want error
	}{
		{"unknown pointer", before + 1<<30, 4096, mr.ErrUnknownPointer},
		{"wrong size", before, 8192, mr.ErrSizeMismatch},
		{"negative size", before, -1, mr.ErrInvalidSize},
	} {
		if err := pool.Deallocate(tc.p, tc.size, s); !errors.Is(err, tc.want) {
			t.Errorf("%s freed in the capture: %v, want %v", tc.name, err, tc.want)
		}
	}
	q, err := pool.Allocate(4096, s)
	ok(t, err)
	if err := pool.Deallocate(q, 8192, s); !errors.Is(err, mr.ErrSizeMismatch) {
		t.Errorf("capture's block freed with the wrong size: %v, want ErrSizeMismatch", err)
	}
	ok(t, pool.Deallocate(q, 4096, s))
	if err := pool.Deallocate(q, 4096, s); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("capture's block freed twice: %v, want ErrDoubleFree", err)
	}
	ok(t, pool.Deallocate(before, 4096, s)) // kept for Release
	if captureStatus(t, s) != gpu.CaptureActive {
		t.Error("the bad frees disturbed the capture")
	}
	if _, err := c.End(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.End(); !errors.Is(err, gpu.ErrIllegalState) {
		t.Errorf("second End: %v, want ErrIllegalState", err)
	}
	if u := pool.Usage(); u.Used != 4096 {
		t.Errorf("pool uses %d bytes before Release, want the deferred block's 4096", u.Used)
	}
	ok(t, c.Release(s))
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool uses %d bytes after Release", u.Used)
	}
}

// What resources do on the side leaves a capturing stream alone: a reap
// leaves its pending frees pending, a pool does not steal its idle chunk,
// an event ordering between it and a stream outside the capture is
// refused, and none of it invalidates the capture.
func TestCaptureSidePaths(t *testing.T) {
	dev := simCaptureDevice(t)
	a, b := newTestStream(t, dev), newTestStream(t, dev)
	async, err := mr.NewAsync(dev, mr.AsyncOptions{})
	ok(t, err)
	p, err := async.Allocate(4096, a)
	ok(t, err)
	ok(t, async.Deallocate(p, 4096, a))
	q, err := async.Allocate(4096, a) // freed on b during the capture
	ok(t, err)

	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{MaxSize: 2 << 20})
	ok(t, err)
	x, err := pool.Allocate(1<<20, a)
	ok(t, err)
	ok(t, pool.Deallocate(x, 1<<20, a)) // a homes an idle chunk

	c, err := mr.BeginCapture(a, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	if n, err := async.Reap(true); err != nil || n != 0 {
		t.Errorf("Reap during the capture: %d bytes, %v; want 0 (the capturing stream left pending)", n, err)
	}
	if got := async.Pending().Pending(); got != 4096 {
		t.Errorf("pending bytes %d, want the capturing stream's 4096", got)
	}
	if _, err := pool.Allocate(2<<20, b); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Errorf("a request needing the capturing stream's chunk: %v, want ErrOutOfMemory (no steal)", err)
	}
	if err := async.Deallocate(q, 4096, b); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("free on b of memory allocated on the capturing stream: %v, want ErrStreamCapturing", err)
	}
	if st := captureStatus(t, a); st != gpu.CaptureActive {
		t.Fatalf("capture status %d after the side paths, want active", st)
	}
	g, err := c.End()
	ok(t, err)
	ok(t, g.Destroy())
	ok(t, c.Release(a))
	ok(t, async.Deallocate(q, 4096, b))
	if n, err := async.Reap(true); err != nil || n != 8192 {
		t.Errorf("Reap after the capture: %d bytes, %v; want 8192", n, err)
	}
}

// A capture not released is listed, and Tracking's leak report names it.
func TestCaptureLeakReport(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	tr := mr.NewTracking(pool, mr.TrackingOptions{})
	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	p, err := tr.Allocate(1<<20, s)
	ok(t, err)
	ok(t, tr.Deallocate(p, 1<<20, s))
	g, err := c.End()
	ok(t, err)
	ok(t, g.Destroy())
	found := false
	for _, u := range mr.Unreleased() {
		if u.ID == c.ID() {
			found = true
			if !u.Ended || u.Bytes != 2<<20 || len(u.Stack) == 0 {
				t.Errorf("unreleased capture %+v, want ended, 2 MiB, a stack", u)
			}
		}
	}
	if !found {
		t.Fatal("the capture is not among Unreleased()")
	}
	var buf bytes.Buffer
	ok(t, tr.WriteLeakReport(&buf))
	if !strings.Contains(buf.String(), "1 captures not released") || !strings.Contains(buf.String(), "TestCaptureLeakReport") {
		t.Errorf("leak report does not name the capture:\n%s", buf.String())
	}
	ok(t, c.Release(s))
	buf.Reset()
	ok(t, tr.WriteLeakReport(&buf))
	if strings.Contains(buf.String(), "captures not released") {
		t.Errorf("leak report still names a released capture:\n%s", buf.String())
	}
}

// hookLog is a CaptureHook that logs what it is told.
type hookLog struct {
	name   string
	log    *[]string
	refuse error
}

func (h *hookLog) CaptureEnded(graph bool) {
	*h.log = append(*h.log, fmt.Sprintf("%s ended graph=%v", h.name, graph))
}

func (h *hookLog) BeforeLaunch(s gpu.Stream) (func(bool), error) {
	*h.log = append(*h.log, fmt.Sprintf("%s before", h.name))
	if h.refuse != nil {
		return nil, h.refuse
	}
	return func(launched bool) { *h.log = append(*h.log, fmt.Sprintf("%s after launched=%v", h.name, launched)) }, nil
}

func (h *hookLog) Released(s gpu.Stream) error {
	*h.log = append(*h.log, fmt.Sprintf("%s released", h.name))
	return nil
}

// Hooks are told of the end, of every launch (in order, the afters in
// reverse) and of the release; a hook that fails BeforeLaunch stops the
// launch; AddHook is refused once the capture ended, and CaptureOf finds
// only captures begun through mr.
func TestCaptureHooks(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	p, err := dev.Malloc(4096)
	ok(t, err)
	defer dev.Free(p)
	ok(t, dev.MemsetD8Async(p, 0, 4096, s))

	if c := mr.CaptureOf(s); c != nil {
		t.Errorf("CaptureOf a stream that does not capture: capture %d", c.ID())
	}
	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	if got := mr.CaptureOf(s); got != c {
		t.Fatalf("CaptureOf the capturing stream = %v, want the capture", got)
	}
	var log []string
	refusal := errors.New("not now")
	first, second := &hookLog{name: "first", log: &log}, &hookLog{name: "second", log: &log}
	ok(t, c.AddHook(first))
	ok(t, c.AddHook(second))
	if err := c.AddHook(nil); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("AddHook(nil): %v, want ErrInvalidValue", err)
	}
	ok(t, dev.MemsetD8Async(p, 7, 4096, s))
	g, err := c.End()
	ok(t, err)
	if err := c.AddHook(&hookLog{name: "late", log: &log}); !errors.Is(err, mr.ErrCaptureEnded) {
		t.Errorf("AddHook after End: %v, want ErrCaptureEnded", err)
	}
	if c := mr.CaptureOf(s); c != nil {
		t.Errorf("CaptureOf after End: capture %d", c.ID())
	}
	x, err := g.Instantiate(0)
	ok(t, err)

	second.refuse = refusal
	if err := x.Launch(s); !errors.Is(err, refusal) {
		t.Fatalf("Launch with a hook refusing: %v, want its error", err)
	}
	ok(t, s.Synchronize())
	out := make([]byte, 1)
	ok(t, dev.CopyDtoHAsync(out, p, s))
	ok(t, s.Synchronize())
	if out[0] != 0 {
		t.Errorf("a refused launch ran: byte %d", out[0])
	}
	second.refuse = nil
	ok(t, x.Launch(s))
	ok(t, dev.CopyDtoHAsync(out, p, s))
	ok(t, s.Synchronize())
	if out[0] != 7 {
		t.Errorf("the launch did not run: byte %d", out[0])
	}
	ok(t, x.Destroy())
	ok(t, c.Release(s))
	if err := c.AddHook(&hookLog{name: "late", log: &log}); !errors.Is(err, mr.ErrReleased) {
		t.Errorf("AddHook after Release: %v, want ErrReleased", err)
	}
	want := []string{
		"first ended graph=true", "second ended graph=true",
		"first before", "second before", "first after launched=false",
		"first before", "second before", "second after launched=true", "first after launched=true",
		"first released", "second released",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Errorf("hooks were told\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}

	// A capture begun outside mr has no Capture.
	o := newTestStream(t, dev)
	ok(t, gpu.BeginCapture(o, gpu.CaptureRelaxed))
	if c := mr.CaptureOf(o); c != nil {
		t.Errorf("CaptureOf a capture begun outside mr: capture %d", c.ID())
	}
	g2, err := gpu.EndCapture(o)
	ok(t, err)
	ok(t, g2.Destroy())
}

// A capture that ends without a graph tells its hooks so.
func TestCaptureHooksInvalidated(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	var log []string
	ok(t, c.AddHook(&hookLog{name: "h", log: &log}))
	if err := s.Synchronize(); !errors.Is(err, gpu.ErrStreamCaptureUnsupported) {
		t.Fatalf("Synchronize of a capturing stream: %v", err)
	}
	if _, err := c.End(); !errors.Is(err, gpu.ErrStreamCaptureInvalidated) {
		t.Fatalf("End of an invalidated capture: %v", err)
	}
	ok(t, c.Release(s))
	if got := strings.Join(log, ", "); got != "h ended graph=false, h released" {
		t.Errorf("hooks were told %q", got)
	}
}

// A graph captured, launched and dropped with every handle to it, the
// Capture's included, is not released behind the program's back (its
// memory would be silently kept, or freed under a graph still running):
// Tracking's leak report names the capture, the memory its private pool
// holds and where it began, after the garbage collector ran. (The capture
// cannot be released afterwards: the test leaks it on a device of its
// own.)
func TestCaptureDroppedLeakReport(t *testing.T) {
	dev := simCaptureDevice(t)
	s := newTestStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	tr := mr.NewTracking(pool, mr.TrackingOptions{})
	id := func() uint64 {
		c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
		ok(t, err)
		p, err := tr.Allocate(3<<20, s)
		ok(t, err)
		ok(t, tr.Deallocate(p, 3<<20, s))
		g, err := c.End()
		ok(t, err)
		x, err := g.Instantiate(0)
		ok(t, err)
		ok(t, x.Launch(s))
		ok(t, s.Synchronize())
		return c.ID()
	}()
	runtime.GC()
	runtime.GC()
	var found *mr.UnreleasedCapture
	for _, u := range mr.Unreleased() {
		if u.ID == id {
			found = &u
		}
	}
	if found == nil || !found.Ended || found.Bytes != 4<<20 {
		t.Fatalf("dropped capture in Unreleased: %+v, want it ended, holding 4 MiB", found)
	}
	var buf bytes.Buffer
	ok(t, tr.WriteLeakReport(&buf))
	report := buf.String()
	for _, want := range []string{
		"1 captures not released",
		fmt.Sprintf("capture %d, ended, holding %d bytes of graph pool", id, 4<<20),
		"TestCaptureDroppedLeakReport",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("leak report lacks %q:\n%s", want, report)
		}
	}
}
