package buf_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
)

// captureRes is a resource for the capture tests: the env's Async itself
// (graph memory nodes), or a Pool over it (the capture's private pool).
func captureRes(t *testing.T, e *env, pool bool) mr.Resource {
	t.Helper()
	if !pool {
		return e.res
	}
	p, err := mr.NewPool(e.res, mr.PoolOptions{})
	must(t, err)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool close: %v", err)
		}
		if err := p.Release(); err != nil {
			t.Errorf("pool release: %v", err)
		}
	})
	return p
}

// captureLoop captures, on s1 and s2, a step that copies in to a scratch
// buffer allocated in the capture (on s1), the scratch buffer to mid (on
// s2, after the copy on s1: an edge the scratch buffer's tracking makes),
// and mid to out (on s2), freeing the scratch buffer in the capture. Then
// it runs iters iterations of: fill in on s3 with a new pattern (outside
// the graph), launch the graph (on s1 and s5 in turn), check out on s4
// against the pattern. in is filled once before the capture, so the
// first launch reads memory last written outside it. Every
// holdEvery-th fill is held (a long kernel), so a launch not ordered
// after it reads the previous pattern. It returns the words the checks
// found wrong. With tracked false every buffer is Untracked: no launch
// waits on the fill, no check on the launch.
func captureLoop(t *testing.T, e *env, res mr.Resource, tracked bool, iters, holdEvery int) uint32 {
	t.Helper()
	const n = 1 << 14 // words
	k, err := kernels.Load(e.dev)
	must(t, err)
	s1, s2, s3, s4, s5 := e.stream(), e.stream(), e.stream(), e.stream(), e.stream()
	var opts []buf.Option
	if !tracked {
		opts = append(opts, buf.Untracked())
	}
	in, err := buf.NewVector[uint32](res, n, s3, opts...)
	must(t, err)
	mid, err := buf.NewVector[uint32](res, n, s2, opts...)
	must(t, err)
	out, err := buf.NewVector[uint32](res, n, s4, opts...)
	must(t, err)
	errs, err := buf.NewVector[uint32](res, 1, s4)
	must(t, err)
	must(t, errs.Memset(0))
	fill := func(i int) {
		t.Helper()
		must(t, in.Use(s3, buf.Write, func() error { return k.Fill(s3, in.Ptr(), n, uint32(1000*i)) }))
	}
	// The first fill is held too: tracked, the first launch waits on it;
	// untracked, it reads what was there before (zeros).
	release := e.hold(s3)
	fill(0)
	if tracked {
		release()
	}

	c, err := mr.BeginCapture(s1, gpu.CaptureGlobal, mr.CaptureOptions{})
	must(t, err)
	fork, err := e.dev.NewEvent(false)
	must(t, err)
	defer fork.Destroy()
	must(t, fork.Record(s1))
	must(t, s2.WaitEvent(fork))
	tmp, err := buf.NewVector[uint32](res, n, s1, opts...)
	must(t, err)
	must(t, buf.Copy(tmp.Buffer(), 0, in.Buffer(), 0, 4*n))
	must(t, buf.UseAll(s2, []buf.Operand{{Buf: tmp.Buffer(), Access: buf.Read}, {Buf: mid.Buffer(), Access: buf.Write}},
		func() error { return e.dev.CopyDtoDAsync(mid.Ptr(), tmp.Ptr(), 4*n, s2) }))
	must(t, tmp.CloseOn(s2))
	must(t, buf.UseAll(s2, []buf.Operand{{Buf: mid.Buffer(), Access: buf.Read}, {Buf: out.Buffer(), Access: buf.Write}},
		func() error { return e.dev.CopyDtoDAsync(out.Ptr(), mid.Ptr(), 4*n, s2) }))
	must(t, fork.Record(s2))
	must(t, s1.WaitEvent(fork)) // join
	g, err := c.End()
	must(t, err)
	x, err := g.Instantiate(0)
	must(t, err)

	for i := range iters {
		if i > 0 {
			held := holdEvery > 0 && i%holdEvery == 0
			if held {
				release = e.hold(s3)
			}
			fill(i)
			if held && tracked {
				release()
			}
			l := s1
			if i%2 == 1 {
				l = s5
			}
			must(t, x.Launch(l))
			if held && !tracked {
				must(t, l.Synchronize()) // the graph ran before the held fill
				release()
			}
		} else {
			must(t, x.Launch(s1))
			if !tracked {
				must(t, s1.Synchronize())
				release()
			}
		}
		must(t, buf.UseAll(s4, []buf.Operand{{Buf: out.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
			func() error { return k.Check(s4, out.Ptr(), n, uint32(1000*i), errs.Ptr()) }))
	}
	got := make([]uint32, 1)
	must(t, errs.CopyToHost(got))
	must(t, s4.Synchronize())

	must(t, x.Destroy())
	for _, v := range []*buf.Vector[uint32]{in, mid, out, errs} {
		must(t, v.Close())
	}
	must(t, e.dev.Synchronize())
	must(t, c.Release(s1))
	must(t, e.dev.Synchronize())
	return got[0]
}

// TestCaptureTracking replays a captured step many times between uses
// outside the graph: tracked, no word is wrong (and under -race the
// simulator reports no race); untracked, launches read patterns not yet
// written, and the checks see it. On a GPU (STREAMALLOC_DEVICE=cuda) the
// held fills are 50 ms spin kernels.
func TestCaptureTracking(t *testing.T) {
	for _, pool := range []bool{false, true} {
		for _, tracked := range []bool{true, false} {
			name := fmt.Sprintf("pool=%v/tracked=%v", pool, tracked)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t)
				if !tracked && e.sd != nil && raceEnabled {
					t.Skip("untracked, the launches race with the fills: TestCaptureRaceDetection runs it in a child process")
				}
				res := captureRes(t, e, pool)
				bad := captureLoop(t, e, res, tracked, 200, 20)
				t.Logf("%d wrong words", bad)
				if tracked && bad != 0 {
					t.Fatalf("tracked buffers in a graph: %d words wrong", bad)
				}
				if !tracked && bad == 0 {
					t.Fatalf("untracked buffers in a graph: no word wrong, the hazard did not happen")
				}
			})
		}
	}
}

const captureScenarioEnv = "BUF_CAPTURE_SCENARIO"

// TestCaptureScenario runs captureLoop in a child process of
// TestCaptureRaceDetection; it does nothing otherwise.
func TestCaptureScenario(t *testing.T) {
	mode := os.Getenv(captureScenarioEnv)
	if mode == "" {
		t.Skip("run by TestCaptureRaceDetection")
	}
	e := newEnv(t)
	e.needSim()
	captureLoop(t, e, captureRes(t, e, true), mode == "tracked", 8, 0)
	fmt.Println("scenario done")
}

// TestCaptureRaceDetection proves on the simulator under -race that the
// ordering of launches comes from the tracking: the untracked loop is a
// data race between a launch and the uses around it, the tracked one is
// clean.
func TestCaptureRaceDetection(t *testing.T) {
	if !raceEnabled {
		t.Skip("the race detector is off: run with go test -race")
	}
	if e := newEnv(t); e.sd == nil {
		t.Skip("the race detector sees the simulator's memory only")
	}
	for _, mode := range []string{"tracked", "untracked"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCaptureScenario$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), captureScenarioEnv+"="+mode)
			out, _ := cmd.CombinedOutput()
			text := string(out)
			if !strings.Contains(text, "scenario done") {
				t.Fatalf("scenario did not complete:\n%s", text)
			}
			raced := strings.Contains(text, "WARNING: DATA RACE")
			switch {
			case mode == "untracked" && !raced:
				t.Errorf("untracked buffers in a replayed graph: want a DATA RACE report, got none:\n%s", text)
			case mode == "tracked" && raced:
				t.Errorf("tracked buffers in a replayed graph: want no race, got:\n%s", text)
			}
		})
	}
}

// beginCapture begins an mr capture on s and returns it with a function
// that ends it, instantiates the graph and returns the executable.
func beginCapture(t *testing.T, s gpu.Stream, mode gpu.CaptureMode) (*mr.Capture, func() gpu.GraphExec) {
	t.Helper()
	c, err := mr.BeginCapture(s, mode, mr.CaptureOptions{})
	must(t, err)
	return c, func() gpu.GraphExec {
		t.Helper()
		g, err := c.End()
		must(t, err)
		x, err := g.Instantiate(0)
		must(t, err)
		return x
	}
}

func memsetUse(e *env, b *buf.Buffer, s gpu.Stream, v byte) error {
	return b.Use(s, buf.Write, func() error { return e.dev.MemsetD8Async(b.Ptr(), v, b.Size(), s) })
}

func liveCount(e *env) int {
	n, _ := e.res.Live()
	return n
}

func wantCapturing(t *testing.T, s gpu.Stream) {
	t.Helper()
	st, err := s.(gpu.CaptureStream).CaptureStatus()
	must(t, err)
	if st != gpu.CaptureActive {
		t.Fatalf("capture status %d, want active (not invalidated)", st)
	}
}

// A capture not begun with mr.BeginCapture: a tracked buffer refuses to
// be used or allocated in it (its launches could not be ordered), without
// invalidating it; an untracked one is raw memory and may be.
func TestCaptureNotBegunThroughMR(t *testing.T) {
	e := newEnv(t)
	s0, s1 := e.stream(), e.stream()
	b := e.buffer(4096, s0)
	u := e.buffer(4096, s0, buf.Untracked())
	e.sync(s0)
	must(t, gpu.BeginCapture(s1, gpu.CaptureRelaxed))
	called := false
	if err := b.Use(s1, buf.Write, func() error { called = true; return nil }); !errors.Is(err, mr.ErrStreamCapturing) || called {
		t.Errorf("tracked use in a raw capture: %v (fn called %v), want ErrStreamCapturing and no call", err, called)
	}
	live := liveCount(e)
	if _, err := buf.New(e.res, 4096, s1); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("tracked New in a raw capture: %v, want ErrStreamCapturing", err)
	}
	if n := liveCount(e); n != live {
		t.Errorf("a refused New left %d allocations, had %d", n, live)
	}
	must(t, memsetUse(e, u, s1, 1))
	wantCapturing(t, s1)
	g, err := gpu.EndCapture(s1)
	must(t, err)
	must(t, g.Destroy())
	must(t, b.Close())
	must(t, u.Close())
}

// Close of memory a graph uses waits for the capture's Release; Resize
// refuses until then; a buffer allocated in the capture is closed by it.
func TestCaptureLifetimes(t *testing.T) {
	e := newEnv(t)
	s0, s1 := e.stream(), e.stream()
	before := e.buffer(4096, s0)  // used by the graph, closed after the capture
	inside := e.buffer(4096, s0)  // used by the graph, closed inside the capture
	resized := e.buffer(4096, s0) // used by the graph, resized
	must(t, memsetUse(e, before, s0, 1))
	live := liveCount(e)

	c, end := beginCapture(t, s1, gpu.CaptureThreadLocal)
	for _, b := range []*buf.Buffer{before, inside, resized} {
		must(t, memsetUse(e, b, s1, 2))
	}
	born, err := buf.New(e.res, 4096, s1)
	must(t, err)
	must(t, memsetUse(e, born, s1, 3))
	must(t, inside.CloseOn(s1))
	if err := resized.Resize(8192); !errors.Is(err, buf.ErrGraphUse) {
		t.Errorf("Resize of a buffer the capture uses: %v, want ErrGraphUse", err)
	}
	x := end()
	for range 3 {
		must(t, x.Launch(s1))
	}
	must(t, before.Close())
	if before.Ptr() != 0 {
		t.Errorf("a closed buffer still has its pointer")
	}
	if err := before.Memset(0); !errors.Is(err, buf.ErrClosed) {
		t.Errorf("use of a buffer closed while a graph uses it: %v, want ErrClosed", err)
	}
	if err := resized.Resize(8192); !errors.Is(err, buf.ErrGraphUse) {
		t.Errorf("Resize of a buffer a graph uses: %v, want ErrGraphUse", err)
	}
	// The graph's memory (born: a graph allocation of Async) and what the
	// program closed are still allocated.
	if n := liveCount(e); n != live+1 {
		t.Errorf("%d allocations live while the graph may run, want %d", n, live+1)
	}
	must(t, x.Launch(s1)) // replays still use the closed buffers' memory
	must(t, x.Destroy())
	must(t, c.Release(s1))
	if n := liveCount(e); n != live-2 {
		t.Errorf("%d allocations live after Release, want %d (the closed buffers freed)", n, live-2)
	}
	if err := born.Memset(0); !errors.Is(err, buf.ErrClosed) {
		t.Errorf("use of a buffer the released capture allocated: %v, want ErrClosed", err)
	}
	must(t, resized.Resize(8192))
	must(t, resized.Close())
	e.sync(s1)
}

// The errors of the capture rules: each refused call leaves the capture
// running.
func TestCaptureErrors(t *testing.T) {
	e := newEnv(t)
	s0, s1, s2, s5 := e.stream(), e.stream(), e.stream(), e.stream()
	lazy := e.buffer(4096, s1) // its allocation, a lazy mark on s1
	b := e.buffer(4096, s0)
	e.sync(s0)

	c1, end1 := beginCapture(t, s1, gpu.CaptureRelaxed)
	must(t, memsetUse(e, lazy, s1, 1))
	if err := b.SetStream(s1); !errors.Is(err, mr.ErrStreamCapturing) || b.Stream() != s0 {
		t.Errorf("SetStream into a capture: %v, stream %d; want ErrStreamCapturing, stream %d", err, b.Stream().ID(), s0.ID())
	}
	if err := lazy.Resize(8192); !errors.Is(err, buf.ErrGraphUse) {
		t.Errorf("Resize of a buffer the capture uses: %v, want ErrGraphUse", err)
	}
	onCapturing := e.buffer(4096, s0)
	must(t, onCapturing.SetStream(s2))
	// A buffer on a stream that joins the capture resizes there: refused.
	fork, err := e.dev.NewEvent(false)
	must(t, err)
	defer fork.Destroy()
	must(t, fork.Record(s1))
	must(t, s2.WaitEvent(fork))
	if err := onCapturing.Resize(8192); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("Resize on a capturing stream: %v, want ErrStreamCapturing", err)
	}
	if err := onCapturing.SetStream(s0); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("SetStream out of a capture: %v, want ErrStreamCapturing", err)
	}
	must(t, fork.Record(s2))
	must(t, s1.WaitEvent(fork))
	// Outside the capture, buffers work as always.
	must(t, memsetUse(e, b, s0, 2))
	wantCapturing(t, s1)
	x := end1()

	// A launch into a capture is refused before anything is enqueued.
	c2, end2 := beginCapture(t, s2, gpu.CaptureRelaxed)
	if err := x.Launch(s2); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("launch into a capture: %v, want ErrStreamCapturing", err)
	}
	wantCapturing(t, s2)
	x2 := end2()
	must(t, x2.Destroy())
	must(t, c2.Release(s2))

	// The launch must follow the allocation, whose mark is lazy on s1;
	// while s1 captures, nothing can be recorded there for s5.
	c3, end3 := beginCapture(t, s1, gpu.CaptureRelaxed)
	if err := x.Launch(s5); !errors.Is(err, mr.ErrStreamCapturing) {
		t.Errorf("launch after a lazy mark on a capturing stream: %v, want ErrStreamCapturing", err)
	}
	wantCapturing(t, s1)
	x3 := end3()
	must(t, x3.Destroy())
	must(t, c3.Release(s1))
	must(t, x.Launch(s5))
	must(t, lazy.Close()) // after the launch: its stream waits on it
	must(t, x.Destroy())
	must(t, c1.Release(s1))
	for _, b := range []*buf.Buffer{b, onCapturing} {
		must(t, b.Close())
	}
	e.sync(s0)
	e.sync(s1)
}
