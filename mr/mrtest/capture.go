// Conformance: CUDA graph capture (mr/capture.go's rules). A loop of
// allocate, fill, check, free is captured on one stream and on two, and
// replayed many times while other streams allocate from the same resource
// and fill their memory with another pattern: no word of either may be
// wrong, which it would be if the resource handed the graph's memory to
// anyone else. Around it: a block allocated before the capture and freed
// inside it stays intact for the graph, an allocation the graph keeps is
// freed by the program after a launch, and Release gives everything back.

package mrtest

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// captureSizes are the sizes the captured loop allocates, capped by the
// resource's MaxSize.
func (e *env) captureSizes() []int {
	out := []int{256, 4096, 64 << 10, 1 << 20, 3 << 20}
	for i, n := range out {
		out[i] = min(n, e.opts.MaxSize)
	}
	return out
}

func (e *env) launches() int {
	switch {
	case !e.dev.Properties().Simulated:
		return 1000
	case testing.Short():
		return 5
	}
	return 20
}

func testCapture(e *env) {
	if e.opts.NoKernels {
		e.t.Skip("the resource's memory is not device memory")
	}
	if e.opts.RefusesCapture {
		testCaptureRefused(e)
		return
	}
	for _, tc := range []struct {
		name string
		f    func(*env)
	}{
		{"OneStream", func(e *env) { captureReplay(e, 1) }},
		{"TwoStreams", func(e *env) { captureReplay(e, 2) }},
		{"PreCaptureFree", capturePreCaptureFree},
		{"GraphOutput", captureOutput},
	} {
		e.t.Run(tc.name, func(t *testing.T) {
			sub := *e
			sub.t = t
			tc.f(&sub)
		})
	}
}

// graphMemTrim gives back the graph memory Async's memory nodes left in
// the device's graph pool, so that the device's memory is checked against
// the baseline.
func (e *env) graphMemTrim() {
	if gd, ok := e.dev.(gpu.GraphDevice); ok {
		if err := gd.GraphMemTrim(); err != nil {
			e.t.Errorf("GraphMemTrim: %v", err)
		}
	}
}

// captureReplay captures, on one stream or forked into two, a loop of
// allocate / fill / check / free, and replays it while two other streams
// allocate, fill with another pattern and check.
func captureReplay(e *env, streams int) {
	t := e.t
	s1, s2 := e.stream(), e.stream()
	o1, o2 := e.stream(), e.stream()
	fork, join := e.event(), e.event()
	sizes := e.captureSizes()
	c := e.begin(s1, gpu.CaptureGlobal)
	for round := range 2 {
		for i, n := range sizes {
			s := s1
			if streams == 2 && i%2 == 1 {
				s = s2
				e.must(fork.Record(s1))
				e.must(s2.WaitEvent(fork))
			}
			p := e.alloc(n, s)
			seed := uint32(1000*round + 10*i)
			e.fill(s, p, n, seed)
			e.check(s, p, n, seed, 0)
			e.free(p, n, s)
			if s == s2 {
				e.must(join.Record(s2))
				e.must(s1.WaitEvent(join))
			}
		}
	}
	g, err := c.End()
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	x, err := g.Instantiate(0)
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	if got := e.readCounter(0, s1); got != 0 {
		t.Fatalf("the capture alone counted %d mismatches: it ran something", got)
	}
	for l := range e.launches() {
		// An allocation live across the launch, on the launch's stream:
		// the graph must not write it (it would if the resource had
		// handed it a block the graph uses).
		n0 := sizes[l%len(sizes)]
		q0 := e.alloc(n0, s1)
		e.fill(s1, q0, n0, 0xdef000+uint32(l))
		e.must(x.Launch(s1))
		e.check(s1, q0, n0, 0xdef000+uint32(l), 3)
		e.free(q0, n0, s1)
		for j, o := range []gpu.Stream{o1, o2} {
			n := sizes[(l+j)%len(sizes)]
			q := e.alloc(n, o)
			e.fill(o, q, n, 0xabc000+uint32(l))
			e.check(o, q, n, 0xabc000+uint32(l), 1+j)
			e.free(q, n, o)
		}
	}
	if got := e.readCounter(0, s1); got != 0 {
		t.Errorf("replays of the graph counted %d corrupted words", got)
	}
	for j, o := range []gpu.Stream{o1, o2} {
		if got := e.readCounter(1+j, o); got != 0 {
			t.Errorf("ordinary allocations on stream %d counted %d corrupted words", j, got)
		}
	}
	if got := e.readCounter(3, s1); got != 0 {
		t.Errorf("allocations live across a launch counted %d words the graph overwrote", got)
	}
	if err := c.Release(s1); !errors.Is(err, mr.ErrGraphInUse) {
		t.Errorf("Release with an executable alive: %v, want ErrGraphInUse", err)
	}
	e.must(x.Destroy())
	e.must(c.Release(s1))
	if err := c.Release(s1); !errors.Is(err, mr.ErrReleased) {
		t.Errorf("second Release: %v, want ErrReleased", err)
	}
	if u := c.Pool().Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("graph pool holds %+v after Release", u)
	}
	e.must(s1.Synchronize())
	e.graphMemTrim()
}

// capturePreCaptureFree: a block allocated and filled before the capture
// and freed inside it stays intact for every replay, and goes back to the
// resource at Release.
func capturePreCaptureFree(e *env) {
	t := e.t
	s := e.stream()
	n := min(1<<20, e.opts.MaxSize)
	p := e.alloc(n, s)
	e.fill(s, p, n, 77)
	e.must(s.Synchronize())
	c := e.begin(s, gpu.CaptureGlobal)
	e.check(s, p, n, 77, 0)
	e.free(p, n, s)
	if err := e.r.Deallocate(p, n, s); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("second free of the block in the capture: %v, want ErrDoubleFree", err)
	}
	// Requests of the capture do not get it.
	for range 3 {
		q := e.alloc(n, s)
		if q == p {
			t.Errorf("the capture got back the block it freed, which its graph still reads")
		}
		e.fill(s, q, n, 78)
		e.free(q, n, s)
	}
	g, err := c.End()
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	x, err := g.Instantiate(0)
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	o := e.stream()
	for range e.launches() {
		e.must(x.Launch(s))
		q := e.alloc(n, o)
		if q == p {
			t.Fatalf("an ordinary request got the block freed in the capture before Release")
		}
		e.fill(o, q, n, 79)
		e.free(q, n, o)
	}
	if got := e.readCounter(0, s); got != 0 {
		t.Errorf("the graph counted %d corrupted words in the block freed in the capture", got)
	}
	e.must(x.Destroy())
	e.must(c.Release(s))
	e.must(s.Synchronize())
	e.graphMemTrim()
}

// captureOutput: an allocation the graph does not free is the graph's
// output, at the same address every launch, valid until the next launch;
// the program frees it once, when it is done with it, on any stream, and
// a second free is refused.
func captureOutput(e *env) {
	t := e.t
	s, o := e.stream(), e.stream()
	n := min(64<<10, e.opts.MaxSize)
	c := e.begin(s, gpu.CaptureRelaxed)
	p := e.alloc(n, s)
	e.fill(s, p, n, 5)
	g, err := c.End()
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	x, err := g.Instantiate(0)
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	for range 3 {
		e.must(x.Launch(s))
		e.check(s, p, n, 5, 0)
		q := e.alloc(n, o) // never p: the graph owns it
		if q == p {
			t.Fatalf("an ordinary request got the graph's output")
		}
		e.free(q, n, o)
	}
	if got := e.readCounter(0, s); got != 0 {
		t.Errorf("%d corrupted words in the graph's output", got)
	}
	e.free(p, n, o)
	if err := e.r.Deallocate(p, n, o); err == nil {
		t.Errorf("second free of the graph's output succeeded")
	}
	e.must(x.Destroy())
	e.must(c.Release(s))
	e.must(s.Synchronize())
	e.graphMemTrim()
}

// testCaptureRefused: a resource that cannot serve a capture refuses it
// with mr.ErrStreamCapturing before the driver, so the capture goes on.
func testCaptureRefused(e *env) {
	t := e.t
	s := e.stream()
	n := min(4096, e.opts.MaxSize)
	p := e.alloc(n, s)
	c := e.begin(s, gpu.CaptureGlobal)
	if _, err := e.r.Allocate(n, s); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("Allocate on a capturing stream: %v, want ErrStreamCapturing", err)
	}
	if err := e.r.Deallocate(p, n, s); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("Deallocate on a capturing stream: %v, want ErrStreamCapturing", err)
	}
	if st, err := s.(gpu.CaptureStream).CaptureStatus(); err != nil || st != gpu.CaptureActive {
		t.Errorf("capture status after the refusals: %d, %v; want active", st, err)
	}
	g, err := c.End()
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	e.must(g.Destroy())
	e.must(c.Release(s))
	e.free(p, n, s)
}

// begin begins a capture on s; if the test ends with the capture still
// running (a failure), the capture is ended, so that it does not forbid
// the next test's calls.
func (e *env) begin(s gpu.Stream, mode gpu.CaptureMode) *mr.Capture {
	e.t.Helper()
	c, err := mr.BeginCapture(s, mode, mr.CaptureOptions{})
	if err != nil {
		e.t.Fatalf("BeginCapture: %v", err)
	}
	e.t.Cleanup(func() {
		if gpu.CaptureID(s) == c.ID() {
			if g, err := c.End(); err == nil {
				g.Destroy()
			}
		}
	})
	return c
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// event returns a new event, destroyed at the end of the subtest.
func (e *env) event() gpu.Event {
	ev, err := e.dev.NewEvent(false)
	if err != nil {
		e.t.Fatalf("new event: %v", err)
	}
	e.t.Cleanup(func() { ev.Destroy() })
	return ev
}
