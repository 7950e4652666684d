// Tests of the capture wing's rules (capture.go) that the conformance
// suite (mrtest) does not reach: captures not begun through mr, shared
// graph pools, the errors of Release, bad frees inside a capture, the side
// paths that must leave a capturing stream alone, and leak reports.

package mr_test

import (
	"bytes"
	"errors"
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
