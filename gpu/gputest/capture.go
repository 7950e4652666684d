// Conformance: stream capture. What a capture records, how its graph
// replays, and what the driver answers to each call it forbids while a
// stream captures: the error, whether the capture survives it, and how
// EndCapture ends. The answers are the H100's (driver 580, CUDA 13),
// measured by running this suite there; the simulator must give the same.

package gputest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// RunCapture runs the capture part of the suite (Run runs it too).
func RunCapture(t *testing.T, dev gpu.Device) {
	t.Helper()
	for _, c := range []struct {
		name string
		fn   func(*testing.T, gpu.Device)
	}{
		{"Replay", testCaptureReplay},
		{"ForkJoinReplay", testCaptureForkJoin},
		{"Rules", testCaptureRules},
		{"Joins", testCaptureJoins},
		{"GraphMemory", testGraphMemory},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, dev) })
	}
}

func captureStream(t *testing.T, s gpu.Stream) gpu.CaptureStream {
	t.Helper()
	cs, ok := s.(gpu.CaptureStream)
	if !ok {
		t.Fatalf("stream %T cannot be captured", s)
	}
	return cs
}

func graphDevice(t *testing.T, dev gpu.Device) gpu.GraphDevice {
	t.Helper()
	gd, ok := dev.(gpu.GraphDevice)
	if !ok {
		t.Fatalf("device %T has no graph memory", dev)
	}
	return gd
}

// code names the driver result err carries: "ok", a cuda.h name, or the
// error's text when it carries none.
func code(err error) string {
	if err == nil {
		return "ok"
	}
	var ce *cuda.Error
	if errors.As(err, &ce) {
		return ce.Code.Name()
	}
	var r cuda.Result
	if errors.As(err, &r) {
		return r.Name()
	}
	return err.Error()
}

// is reports whether err is the result want (Success: no error).
func is(err error, want cuda.Result) bool {
	if want == cuda.Success {
		return err == nil
	}
	return errors.Is(err, want)
}

// capturedStep enqueues on s: allocate n words, fill them with seed,
// check them into errs, free them.
func capturedStep(dev gpu.Device, k *kernels.Kernels, s gpu.Stream, n int, seed uint32, errs gpu.DevicePtr) error {
	p, err := dev.MallocAsync(4*n, s)
	if err != nil {
		return err
	}
	if err := k.Fill(s, p, n, seed); err != nil {
		return err
	}
	if err := k.Check(s, p, n, seed, errs); err != nil {
		return err
	}
	return dev.FreeAsync(p, s)
}

// testCaptureReplay: a global-mode capture of allocate, fill, check, free
// records without running (the counter stays untouched), and each launch
// of its executable runs it: the memory the graph allocates holds what the
// graph wrote. The graph's memory is graph memory, in use only while a
// launch runs.
func testCaptureReplay(t *testing.T, dev gpu.Device) {
	const n = 1 << 16
	s := newStream(t, dev)
	cs := captureStream(t, s)
	gd := graphDevice(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	must(t, s.Synchronize())
	if id := cs.CaptureID(); id != 0 {
		t.Fatalf("CaptureID %d before any capture", id)
	}
	must(t, cs.BeginCapture(gpu.CaptureGlobal))
	if cs.CaptureID() == 0 {
		t.Fatal("CaptureID 0 while capturing")
	}
	if gpu.CaptureGated(s) && !gpu.CapturesActive() {
		t.Fatal("the capture gate is closed while a gated stream captures")
	}
	st, err := cs.CaptureStatus()
	must(t, err)
	if st != gpu.CaptureActive {
		t.Fatalf("status %d while capturing, want active", st)
	}
	// A kernel that writes a wrong pattern into the counter's word makes
	// the check count mismatches: the check must see the fill.
	must(t, capturedStep(dev, k, s, n, 11, errs.p))
	must(t, dev.MemsetD8Async(errs.p, 0xff, 4, s)) // recorded, not run
	must(t, dev.MemsetD8Async(errs.p, 0, 4, s))
	must(t, capturedStep(dev, k, s, n, 12, errs.p))
	g, err := cs.EndCapture()
	must(t, err)
	defer func() { must(t, g.Destroy()) }()
	if id := cs.CaptureID(); id != 0 {
		t.Fatalf("CaptureID %d after EndCapture", id)
	}
	// Nothing ran: the counter is still 0 and no graph memory is used.
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("counter %d after the capture alone", got)
	}
	x, err := g.Instantiate(0)
	must(t, err)
	defer func() { must(t, x.Destroy()) }()
	for range 10 {
		must(t, x.Launch(s))
	}
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("%d mismatched words over 10 launches", got)
	}
	// Graph memory used is what executables hold: the memory of their
	// allocations stays with them between launches.
	used, err := gd.GraphMemAttribute(gpu.GraphMemUsedCurrent)
	must(t, err)
	if used < 4*n {
		t.Errorf("graph memory used %d while the executable lives, want at least %d", used, 4*n)
	}
	high, err := gd.GraphMemAttribute(gpu.GraphMemUsedHigh)
	must(t, err)
	if high < 4*n {
		t.Errorf("graph memory used high-water %d, want at least %d", high, 4*n)
	}
}

// testCaptureForkJoin: a capture that forks into a second stream through
// an event and joins back replays both branches, the join ordering the
// second branch's check after the first branch's fill.
func testCaptureForkJoin(t *testing.T, dev gpu.Device) {
	const n = 1 << 16
	s1, s2 := newStream(t, dev), newStream(t, dev)
	c1, c2 := captureStream(t, s1), captureStream(t, s2)
	fork, join := newEvent(t, dev, false), newEvent(t, dev, false)
	k := load(t, dev)
	errs := newCounter(t, dev, s1)
	must(t, s1.Synchronize())
	must(t, c1.BeginCapture(gpu.CaptureGlobal))
	p, err := dev.MallocAsync(4*n, s1)
	must(t, err)
	must(t, k.Fill(s1, p, n, 5))
	must(t, fork.Record(s1))
	must(t, s2.WaitEvent(fork))
	if c2.CaptureID() != c1.CaptureID() {
		t.Fatalf("the waiting stream's CaptureID %d, want the capture's %d", c2.CaptureID(), c1.CaptureID())
	}
	if gpu.CaptureGated(s2) && !gpu.CapturesActive() {
		t.Fatal("the capture gate is closed while a gated stream that joined a capture captures")
	}
	must(t, k.Check(s2, p, n, 5, errs.p))
	must(t, join.Record(s2))
	must(t, s1.WaitEvent(join))
	must(t, dev.FreeAsync(p, s1))
	g, err := c1.EndCapture()
	must(t, err)
	defer func() { must(t, g.Destroy()) }()
	if c2.CaptureID() != 0 {
		t.Fatal("the joined stream still captures after EndCapture")
	}
	x, err := g.Instantiate(0)
	must(t, err)
	defer func() { must(t, x.Destroy()) }()
	for range 10 {
		must(t, x.Launch(s2)) // any stream of the device
	}
	if got := errs.read(t, s2); got != 0 {
		t.Fatalf("%d mismatched words", got)
	}
}

// captureEnv is what a rule's action may use: s captures, o does not.
type captureEnv struct {
	t        *testing.T
	dev      gpu.Device
	s, o     gpu.Stream
	preEvent gpu.Event     // recorded on o before the capture, complete
	prePool  gpu.DevicePtr // MallocAsync memory allocated on o before the capture
	preMem   gpu.DevicePtr // Malloc memory allocated before the capture
	host     []byte        // MallocHost memory, 4 KiB
	k        *kernels.Kernels
	later    []func() // cleanups to run after EndCapture
}

// captureRule is one call made while s captures, and what the card does.
type captureRule struct {
	name  string
	mode  gpu.CaptureMode
	act   func(*captureEnv) error
	want  cuda.Result       // the call's result
	after gpu.CaptureStatus // s's status after the call
	end   cuda.Result       // EndCapture's result
}

// ok, invalid: statuses after the call.
const (
	active  = gpu.CaptureActive
	invalid = gpu.CaptureInvalidated
)

var (
	resUnsupported = cuda.ErrStreamCaptureUnsupported
	resInvalidated = cuda.ErrStreamCaptureInvalidated
)

// captureRules are the H100's answers (see the file comment). In short:
// a call that would observe or wait for captured work (querying or
// synchronizing the capturing stream, a captured event, the device) is
// refused in every mode and invalidates the capture; in global mode so is
// every "potentially unsafe" call on any other stream, by any goroutine
// not inside RelaxCapture: allocation and free of every kind, queries and
// synchronization of streams and events, a pool's attributes and trimming;
// asynchronous work, events, streams and modules are allowed. Mistakes that
// do not touch the capture's work (a free of memory allocated outside the
// capture, beginning twice, ending a stream that does not capture) fail
// and leave the capture as it was.
func captureRules() []captureRule {
	G, R, L := gpu.CaptureGlobal, gpu.CaptureRelaxed, gpu.CaptureThreadLocal
	ok := cuda.Success
	illegal := cuda.ErrIllegalState
	freeLater := func(env *captureEnv, p gpu.DevicePtr) {
		env.later = append(env.later, func() { env.dev.Free(p) })
	}
	malloc := func(e *captureEnv) error {
		p, err := e.dev.Malloc(4096)
		if err == nil {
			freeLater(e, p)
		}
		return err
	}
	free := func(e *captureEnv) error {
		err := e.dev.Free(e.preMem)
		if err == nil {
			e.preMem = 0
		}
		return err
	}
	capturedEvent := func(sync bool) func(e *captureEnv) error {
		return func(e *captureEnv) error {
			ev, err := e.dev.NewEvent(false)
			if err != nil {
				return err
			}
			e.later = append(e.later, func() { ev.Destroy() })
			if err := ev.Record(e.s); err != nil {
				return fmt.Errorf("record: %w", err)
			}
			if sync {
				return ev.Synchronize()
			}
			return ev.Query()
		}
	}
	allocOther := func(e *captureEnv) error {
		p, err := e.dev.MallocAsync(4096, e.o)
		if err != nil {
			return err
		}
		return e.dev.FreeAsync(p, e.o)
	}
	freeCapturedOnOther := func(e *captureEnv) error {
		p, err := e.dev.MallocAsync(4096, e.s)
		if err != nil {
			return err
		}
		return e.dev.FreeAsync(p, e.o)
	}
	relaxed := func(f func(*captureEnv) error) func(*captureEnv) error {
		return func(e *captureEnv) error { return gpu.RelaxCapture(e.dev, func() error { return f(e) }) }
	}
	pool := func(f func(gpu.MemPool) error) func(*captureEnv) error {
		return func(e *captureEnv) error {
			p, err := e.dev.DefaultMemPool()
			if err != nil {
				return err
			}
			return f(p)
		}
	}
	return []captureRule{
		// The capturing stream, its events, the device: refused in every mode.
		{"Stream.Query/capturing", G, func(e *captureEnv) error { return e.s.Query() }, resUnsupported, invalid, resInvalidated},
		{"Stream.Query/capturing/relaxed", R, func(e *captureEnv) error { return e.s.Query() }, resUnsupported, invalid, resInvalidated},
		{"Stream.Synchronize/capturing", G, func(e *captureEnv) error { return e.s.Synchronize() }, resUnsupported, invalid, resInvalidated},
		{"Stream.Synchronize/capturing/relaxed", R, func(e *captureEnv) error { return e.s.Synchronize() }, resUnsupported, invalid, resInvalidated},
		{"Event.Query/captured", R, capturedEvent(false), cuda.ErrCapturedEvent, invalid, resInvalidated},
		{"Event.Synchronize/captured", R, capturedEvent(true), cuda.ErrCapturedEvent, invalid, resInvalidated},
		{"WaitEvent/outside", G, func(e *captureEnv) error { return e.s.WaitEvent(e.preEvent) }, cuda.ErrStreamCaptureIsolation, invalid, resInvalidated},
		{"WaitEvent/outside/relaxed", R, func(e *captureEnv) error { return e.s.WaitEvent(e.preEvent) }, cuda.ErrStreamCaptureIsolation, invalid, resInvalidated},
		{"Device.Synchronize", G, func(e *captureEnv) error { return e.dev.Synchronize() }, resUnsupported, invalid, resInvalidated},
		{"Device.Synchronize/relaxed", R, func(e *captureEnv) error { return e.dev.Synchronize() }, resUnsupported, invalid, resInvalidated},

		// Global mode: potentially unsafe calls anywhere.
		{"Stream.Query/other", G, func(e *captureEnv) error { return e.o.Query() }, resUnsupported, invalid, resInvalidated},
		{"Stream.Query/other/relaxed", R, func(e *captureEnv) error { return e.o.Query() }, ok, active, ok},
		{"Stream.Synchronize/other", G, func(e *captureEnv) error { return e.o.Synchronize() }, resUnsupported, invalid, resInvalidated},
		{"Stream.Synchronize/other/RelaxCapture", G, relaxed(func(e *captureEnv) error { return e.o.Synchronize() }), ok, active, ok},
		{"Event.Query/outside", G, func(e *captureEnv) error { return e.preEvent.Query() }, resUnsupported, invalid, resInvalidated},
		{"Event.Query/outside/relaxed", R, func(e *captureEnv) error { return e.preEvent.Query() }, ok, active, ok},
		{"Event.Synchronize/outside", G, func(e *captureEnv) error { return e.preEvent.Synchronize() }, resUnsupported, invalid, resInvalidated},
		{"Malloc", G, malloc, resUnsupported, invalid, resInvalidated},
		{"Malloc/relaxed", R, malloc, ok, active, ok},
		{"Malloc/thread-local", L, malloc, ok, active, ok},
		{"Malloc/RelaxCapture", G, relaxed(malloc), ok, active, ok},
		{"Free", G, free, resUnsupported, invalid, resInvalidated},
		{"Free/relaxed", R, free, ok, active, ok},
		{"Free/RelaxCapture", G, relaxed(free), ok, active, ok},
		{"MallocManaged", G, func(e *captureEnv) error {
			p, err := e.dev.MallocManaged(4096)
			if err == nil {
				freeLater(e, p)
			}
			return err
		}, resUnsupported, invalid, resInvalidated},
		{"MallocHost", G, func(e *captureEnv) error {
			b, err := e.dev.MallocHost(4096)
			if err == nil {
				e.later = append(e.later, func() { e.dev.FreeHost(b) })
			}
			return err
		}, resUnsupported, invalid, resInvalidated},
		{"FreeHost", G, func(e *captureEnv) error { return e.dev.FreeHost(e.host) }, resUnsupported, invalid, resInvalidated},
		{"MallocAsync/other", G, allocOther, resUnsupported, invalid, resInvalidated},
		{"MallocAsync/other/relaxed", R, allocOther, ok, active, ok},
		{"MallocAsync/other/RelaxCapture", G, relaxed(allocOther), ok, active, ok},
		{"FreeAsync/captured-on-other", G, freeCapturedOnOther, resUnsupported, invalid, resInvalidated},
		{"FreeAsync/captured-on-other/relaxed", R, freeCapturedOnOther, cuda.ErrInvalidValue, active, ok},
		{"MemPool.TrimTo", G, pool(func(p gpu.MemPool) error { return p.TrimTo(0) }), resUnsupported, invalid, resInvalidated},
		{"MemPool.Attribute", G, pool(func(p gpu.MemPool) error { _, err := p.Attribute(gpu.PoolReservedMemCurrent); return err }), resUnsupported, invalid, resInvalidated},
		// Not measured yet (the first card run read the attribute first):
		// pinned like MemPool.Attribute.
		{"MemPool.SetAttribute", G, pool(func(p gpu.MemPool) error { return p.SetAttribute(gpu.PoolUsedMemHigh, 0) }), resUnsupported, invalid, resInvalidated},

		// Asynchronous work on other streams, handles, modules: allowed.
		{"LoadModule", G, func(e *captureEnv) error {
			m, err := e.dev.LoadModule(kernels.PTX)
			if err == nil {
				e.later = append(e.later, func() { m.Unload() })
			}
			return err
		}, ok, active, ok},
		{"MemGetInfo", G, func(e *captureEnv) error { _, _, err := e.dev.MemGetInfo(); return err }, ok, active, ok},
		{"Memset/other", G, func(e *captureEnv) error { return e.dev.MemsetD8Async(e.preMem, 1, 4096, e.o) }, ok, active, ok},
		{"Launch/other", G, func(e *captureEnv) error { return e.k.Fill(e.o, e.preMem, 1024, 1) }, ok, active, ok},
		{"Event.Record/other", G, func(e *captureEnv) error { return e.preEvent.Record(e.o) }, ok, active, ok},
		{"WaitEvent/other", G, func(e *captureEnv) error { return e.o.WaitEvent(e.preEvent) }, ok, active, ok},
		{"NewStream", G, func(e *captureEnv) error {
			x, err := e.dev.NewStream()
			if err == nil {
				e.later = append(e.later, func() { x.Destroy() })
			}
			return err
		}, ok, active, ok},
		{"Stream.Destroy/other", G, func(e *captureEnv) error {
			x, err := e.dev.NewStream()
			if err != nil {
				return err
			}
			return x.Destroy()
		}, ok, active, ok},
		{"NewEvent", G, func(e *captureEnv) error {
			x, err := e.dev.NewEvent(false)
			if err == nil {
				e.later = append(e.later, func() { x.Destroy() })
			}
			return err
		}, ok, active, ok},
		{"Event.Destroy", G, func(e *captureEnv) error {
			x, err := e.dev.NewEvent(false)
			if err != nil {
				return err
			}
			return x.Destroy()
		}, ok, active, ok},

		// Captured copies: MallocHost memory is captured; Go memory is
		// refused by the backend before the driver (which would keep the
		// Go pointer in the graph), leaving the capture as it was.
		{"CopyHtoDAsync/Go memory", G, func(e *captureEnv) error {
			return e.dev.CopyHtoDAsync(e.preMem, make([]byte, 256), e.s)
		}, resUnsupported, active, ok},
		{"CopyDtoHAsync/Go memory", G, func(e *captureEnv) error {
			return e.dev.CopyDtoHAsync(make([]byte, 256), e.preMem, e.s)
		}, resUnsupported, active, ok},
		{"CopyHtoDAsync/MallocHost memory", G, func(e *captureEnv) error {
			return e.dev.CopyHtoDAsync(e.preMem, e.host[:256], e.s)
		}, ok, active, ok},
		{"CopyDtoHAsync/MallocHost memory", G, func(e *captureEnv) error {
			return e.dev.CopyDtoHAsync(e.host[256:512], e.preMem, e.s)
		}, ok, active, ok},

		// Mistakes that leave the capture alone.
		{"FreeAsync/allocated-outside", G, func(e *captureEnv) error {
			err := e.dev.FreeAsync(e.prePool, e.s)
			if err == nil {
				e.prePool = 0
			}
			return err
		}, cuda.ErrInvalidValue, active, ok},
		{"BeginCapture/again", G, func(e *captureEnv) error { return gpu.BeginCapture(e.s, gpu.CaptureGlobal) }, illegal, active, ok},
		{"EndCapture/other", G, func(e *captureEnv) error {
			g, err := gpu.EndCapture(e.o)
			if err == nil {
				g.Destroy()
			}
			return err
		}, illegal, active, ok},
	}
}

// testCaptureRules runs every rule on a fresh capture and compares what
// happens with the card's answers. Every outcome is logged, so that a run
// on a new driver shows what changed.
func testCaptureRules(t *testing.T, dev gpu.Device) {
	for _, r := range captureRules() {
		t.Run(r.name, func(t *testing.T) {
			act, after, end := runCaptureRule(t, dev, r)
			t.Logf("capture rule %-36s mode %-12v call %-40s status %d end %s", r.name, r.mode, code(act), after, code(end))
			if !is(act, r.want) {
				t.Errorf("the call: %v, want %s", act, r.want.Name())
			}
			if after != r.after {
				t.Errorf("status after the call %d, want %d", after, r.after)
			}
			if !is(end, r.end) {
				t.Errorf("EndCapture: %v, want %s", end, r.end.Name())
			}
		})
	}
}

func runCaptureRule(t *testing.T, dev gpu.Device, r captureRule) (act error, after gpu.CaptureStatus, end error) {
	s, o := newStream(t, dev), newStream(t, dev)
	cs := captureStream(t, s)
	env := &captureEnv{t: t, dev: dev, s: s, o: o, preEvent: newEvent(t, dev, false), k: load(t, dev)}
	var err error
	env.host, err = dev.MallocHost(4096)
	must(t, err)
	env.prePool, err = dev.MallocAsync(4096, o)
	must(t, err)
	env.preMem, err = dev.Malloc(4096)
	must(t, err)
	must(t, env.preEvent.Record(o))
	must(t, o.Synchronize())
	must(t, s.Synchronize())
	must(t, cs.BeginCapture(r.mode))
	act = r.act(env)
	after, err = cs.CaptureStatus()
	must(t, err)
	g, end := cs.EndCapture()
	if g != nil {
		must(t, g.Destroy())
	}
	if st, err := cs.CaptureStatus(); err != nil || st != gpu.CaptureNone || cs.CaptureID() != 0 {
		t.Errorf("after EndCapture: status %d, %v, CaptureID %d; want none", st, err, cs.CaptureID())
	}
	for _, f := range env.later {
		f()
	}
	if env.prePool != 0 {
		must(t, dev.FreeAsync(env.prePool, o))
	}
	must(t, o.Synchronize())
	must(t, s.Synchronize())
	if env.preMem != 0 {
		must(t, dev.Free(env.preMem))
	}
	if err := dev.FreeHost(env.host); err != nil && !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("FreeHost: %v", err) // the FreeHost rule may have freed it
	}
	return act, after, end
}

// testCaptureJoins: the rules of streams joining a capture through events.
func testCaptureJoins(t *testing.T, dev gpu.Device) {
	t.Run("Unjoined", func(t *testing.T) {
		s, o := newStream(t, dev), newStream(t, dev)
		cs, co := captureStream(t, s), captureStream(t, o)
		e := newEvent(t, dev, false)
		m, err := dev.Malloc(256)
		must(t, err)
		defer func() { must(t, dev.Free(m)) }()
		must(t, cs.BeginCapture(gpu.CaptureGlobal))
		must(t, e.Record(s))
		must(t, o.WaitEvent(e))
		must(t, dev.MemsetD8Async(m, 0, 256, o))
		g, err := cs.EndCapture()
		t.Logf("capture join: EndCapture with a fork not joined: %s", code(err))
		if !is(err, cuda.ErrStreamCaptureUnjoined) || g != nil {
			t.Errorf("EndCapture: %v, graph %v; want ErrStreamCaptureUnjoined and none", err, g)
		}
		for name, x := range map[string]gpu.CaptureStream{"origin": cs, "forked": co} {
			st, err := x.CaptureStatus()
			t.Logf("capture join: after it, %s stream status %d (%v), CaptureID %d", name, st, err, x.CaptureID())
			if err != nil || st != gpu.CaptureNone || x.CaptureID() != 0 {
				t.Errorf("%s stream after the failed EndCapture: status %d, %v, CaptureID %d; want none", name, st, err, x.CaptureID())
			}
		}
	})
	t.Run("EndOnJoined", func(t *testing.T) {
		s, o := newStream(t, dev), newStream(t, dev)
		cs, co := captureStream(t, s), captureStream(t, o)
		e, back := newEvent(t, dev, false), newEvent(t, dev, false)
		must(t, cs.BeginCapture(gpu.CaptureRelaxed))
		must(t, e.Record(s))
		must(t, o.WaitEvent(e))
		_, err := co.EndCapture()
		t.Logf("capture join: EndCapture on the joined stream: %s", code(err))
		if !is(err, cuda.ErrStreamCaptureUnmatched) {
			t.Errorf("EndCapture on the joined stream: %v, want ErrStreamCaptureUnmatched", err)
		}
		// It invalidates the capture: what the joined stream does next
		// fails, and the capture ends without a graph.
		st, err := cs.CaptureStatus()
		must(t, err)
		if st != gpu.CaptureInvalidated {
			t.Errorf("origin status %d after it, want invalidated", st)
		}
		if err := back.Record(o); !is(err, cuda.ErrStreamCaptureInvalidated) {
			t.Errorf("record on the joined stream after it: %v, want ErrStreamCaptureInvalidated", err)
		}
		if _, err := cs.EndCapture(); !is(err, cuda.ErrStreamCaptureInvalidated) {
			t.Errorf("EndCapture on the origin: %v, want ErrStreamCaptureInvalidated", err)
		}
		if cs.CaptureID() != 0 || co.CaptureID() != 0 {
			t.Errorf("CaptureIDs %d, %d after the capture ended", cs.CaptureID(), co.CaptureID())
		}
	})
	t.Run("Merge", func(t *testing.T) {
		s, o := newStream(t, dev), newStream(t, dev)
		cs, co := captureStream(t, s), captureStream(t, o)
		e := newEvent(t, dev, false)
		must(t, cs.BeginCapture(gpu.CaptureRelaxed))
		must(t, co.BeginCapture(gpu.CaptureRelaxed))
		if cs.CaptureID() == co.CaptureID() {
			t.Fatal("two captures share an ID")
		}
		must(t, e.Record(s))
		err := o.WaitEvent(e)
		st1, _ := cs.CaptureStatus()
		st2, _ := co.CaptureStatus()
		t.Logf("capture join: a capturing stream waits on another capture's event: %s; statuses %d %d", code(err), st1, st2)
		if !is(err, cuda.ErrStreamCaptureMerge) || st1 != gpu.CaptureInvalidated || st2 != gpu.CaptureInvalidated {
			t.Errorf("WaitEvent across captures: %v, statuses %d %d; want ErrStreamCaptureMerge, both invalidated", err, st1, st2)
		}
		g1, err1 := cs.EndCapture()
		g2, err2 := co.EndCapture()
		t.Logf("capture join: then EndCapture %s, %s", code(err1), code(err2))
		if !is(err1, cuda.ErrStreamCaptureInvalidated) || !is(err2, cuda.ErrStreamCaptureInvalidated) {
			t.Errorf("EndCapture of the merged captures: %v, %v; want ErrStreamCaptureInvalidated", err1, err2)
		}
		for _, g := range []gpu.Graph{g1, g2} {
			if g != nil {
				must(t, g.Destroy())
			}
		}
	})
	t.Run("CapturedEventAfterEnd", func(t *testing.T) {
		s := newStream(t, dev)
		cs := captureStream(t, s)
		e := newEvent(t, dev, false)
		must(t, cs.BeginCapture(gpu.CaptureRelaxed))
		must(t, e.Record(s))
		g, err := cs.EndCapture()
		must(t, err)
		must(t, g.Destroy())
		err = e.Query()
		t.Logf("capture join: Query of an event recorded in a capture that ended: %s", code(err))
		if !is(err, cuda.ErrInvalidValue) {
			t.Errorf("Event.Query: %v, want ErrInvalidValue", err)
		}
		o := newStream(t, dev)
		err = o.WaitEvent(e)
		t.Logf("capture join: a wait on it: %s", code(err))
		if !is(err, cuda.ErrInvalidValue) {
			t.Errorf("WaitEvent: %v, want ErrInvalidValue", err)
		}
		must(t, e.Record(s))
		must(t, e.Synchronize())
	})
}

// testGraphMemory: the rules of graph allocations. An allocation the
// graph does not free stays allocated after a launch, at the same address
// every launch; relaunching before it is freed fails unless the graph was
// instantiated with InstantiateAutoFreeOnLaunch; freeing it outside the
// graph (FreeAsync on any stream) allows the next launch.
func testGraphMemory(t *testing.T, dev gpu.Device) {
	const n = 1 << 12
	s := newStream(t, dev)
	cs := captureStream(t, s)
	gd := graphDevice(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	must(t, s.Synchronize())
	must(t, cs.BeginCapture(gpu.CaptureRelaxed))
	p, err := dev.MallocAsync(4*n, s)
	must(t, err)
	must(t, k.Fill(s, p, n, 3))
	g, err := cs.EndCapture()
	must(t, err)
	defer func() { must(t, g.Destroy()) }()

	x, err := g.Instantiate(0)
	must(t, err)
	must(t, x.Launch(s))
	must(t, k.Check(s, p, n, 3, errs.p))
	err = x.Launch(s)
	t.Logf("graph memory: relaunch before the graph's allocation is freed: %s", code(err))
	if !is(err, cuda.ErrInvalidValue) {
		t.Errorf("relaunch with the allocation live: %v, want ErrInvalidValue", err)
	}
	used, err := gd.GraphMemAttribute(gpu.GraphMemUsedCurrent)
	must(t, err)
	if used < 4*n {
		t.Errorf("graph memory used %d with a %d-byte allocation live", used, 4*n)
	}
	x2, err := g.Instantiate(0)
	t.Logf("graph memory: a second instantiation while the first lives: %s", code(err))
	if err == nil {
		must(t, x2.Destroy())
	}
	if !is(err, cuda.ErrNotSupported) {
		t.Errorf("second instantiation of a graph with memory nodes: %v, want ErrNotSupported", err)
	}
	must(t, dev.FreeAsync(p, s)) // freed outside the graph
	must(t, x.Launch(s))
	must(t, k.Check(s, p, n, 3, errs.p))
	must(t, dev.FreeAsync(p, s))
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("%d mismatched words", got)
	}
	must(t, x.Destroy())

	auto, err := g.Instantiate(gpu.InstantiateAutoFreeOnLaunch)
	must(t, err)
	for range 3 {
		must(t, auto.Launch(s))
		must(t, k.Check(s, p, n, 3, errs.p))
	}
	must(t, dev.FreeAsync(p, s))
	must(t, auto.Destroy())
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("%d mismatched words with auto-free", got)
	}
	used, err = gd.GraphMemAttribute(gpu.GraphMemUsedCurrent)
	must(t, err)
	reserved, err := gd.GraphMemAttribute(gpu.GraphMemReservedCurrent)
	must(t, err)
	must(t, gd.GraphMemTrim())
	trimmed, err := gd.GraphMemAttribute(gpu.GraphMemReservedCurrent)
	must(t, err)
	usedAfter, err := gd.GraphMemAttribute(gpu.GraphMemUsedCurrent)
	must(t, err)
	t.Logf("graph memory: executables destroyed: used %d, reserved %d; after trim used %d, reserved %d", used, reserved, usedAfter, trimmed)
	if reserved == 0 || trimmed >= reserved || usedAfter > trimmed {
		t.Errorf("graph memory reserved %d before trim, %d after (used %d): trim released nothing", reserved, trimmed, usedAfter)
	}
	wantErr(t, "SetGraphMemAttribute(used high, 1)", gd.SetGraphMemAttribute(gpu.GraphMemUsedHigh, 1), gpu.ErrInvalidValue)
	must(t, gd.SetGraphMemAttribute(gpu.GraphMemUsedHigh, 0))
}
