package sanitize_test

// Graphs under the sanitizer: a use inside a graph is checked at every
// launch like any other use. As in the hazard suite the sanitizer refuses
// what it reports, so a wrong version's launch (or the use racing with
// it) is never made, and the suite is clean under -race.

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// captureGraph captures body on s with mr.BeginCapture and returns the
// capture and an executable of its graph.
func captureGraph(t *testing.T, s gpu.Stream, body func()) (*mr.Capture, gpu.GraphExec) {
	t.Helper()
	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	must(t, err)
	body()
	g, err := c.End()
	must(t, err)
	x, err := g.Instantiate(0)
	must(t, err)
	return c, x
}

func releaseGraph(t *testing.T, c *mr.Capture, x gpu.GraphExec, s gpu.Stream) {
	t.Helper()
	must(t, x.Destroy())
	must(t, c.Release(s))
}

// A graph that reads memory freed before its launch, or freed and handed
// to someone else, is reported and not launched; a graph whose memory
// outlives it is not reported.
func TestGraphUseAfterFree(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		name := "freed"
		if reuse {
			name = "freed and reused"
		}
		t.Run(name, func(t *testing.T) {
			h := newHZ(t, sanitize.Options{})
			s := h.stream()
			u := h.vec(words, s, buf.Untracked()) // raw memory: Close frees it at once
			errs := h.counter(s)
			must(t, h.fill(u, s, 1))
			c, x := captureGraph(t, s, func() { must(t, h.check(u, s, 1, errs)) })
			must(t, x.Launch(s))
			old := u.Ptr()
			must(t, u.Close())
			if reuse {
				w := h.vec(words, s, buf.Untracked())
				defer func() { must(t, w.Close()) }()
				if w.Ptr() != old {
					t.Fatalf("the resource did not hand the freed memory out again (%#x, then %#x)", uint64(old), uint64(w.Ptr()))
				}
				must(t, h.fill(w, s, 2))
			}
			wantKind(t, x.Launch(s), sanitize.UseAfterFree)
			if n := h.read(errs); n != 0 {
				t.Errorf("%d mismatches: the refused launch ran", n)
			}
			releaseGraph(t, c, x, s)
			must(t, errs.Close())
		})
	}
	t.Run("right: tracked memory outlives the graph", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s1, s2, s3 := h.stream(), h.stream(), h.stream()
		v := h.vec(words, s2)
		errs := h.counter(s1)
		must(t, h.fill(v, s2, 7))
		c, x := captureGraph(t, s1, func() { must(t, h.check(v, s1, 7, errs)) })
		for i := range 50 {
			l := s1
			if i%2 == 1 {
				l = s3
			}
			must(t, x.Launch(l))
			must(t, h.fill(v, s2, 7)) // after the launch's read: tracking orders it
		}
		must(t, v.Close()) // the graph still uses the memory: freed at Release
		must(t, x.Launch(s1))
		must(t, s3.Synchronize())
		must(t, s2.Synchronize())
		releaseGraph(t, c, x, s1)
		if n := h.read(errs); n != 0 {
			t.Errorf("%d mismatches", n)
		}
		must(t, errs.Close())
		if n := h.z.Count(); n != 0 {
			t.Errorf("%d reports for a correctly ordered graph", n)
		}
	})
}

// A launch is ordered after the work on its stream before it and nothing
// else: an outside write not ordered before it races with the graph's
// read, and a write after it not ordered after it races too.
func TestGraphLaunchOrder(t *testing.T) {
	h := newHZ(t, sanitize.Options{})
	s1, s2 := h.stream(), h.stream()
	u := h.vec(words, s1, buf.Untracked())
	errs := h.counter(s1)
	must(t, h.fill(u, s1, 3))
	c, x := captureGraph(t, s1, func() { must(t, h.check(u, s1, 3, errs)) })
	e, err := h.dev.NewEvent(false)
	must(t, err)
	defer e.Destroy()

	must(t, e.Record(s1))
	must(t, s2.WaitEvent(e))
	must(t, h.fill(u, s2, 3))
	wantKind(t, x.Launch(s1), sanitize.Race) // the fill on s2 is not ordered before it
	must(t, e.Record(s2))
	must(t, s1.WaitEvent(e))
	must(t, x.Launch(s1))
	wantKind(t, h.fill(u, s2, 3), sanitize.Race) // nor is the fill after the launch
	must(t, e.Record(s1))
	must(t, s2.WaitEvent(e))
	must(t, h.fill(u, s2, 3))
	must(t, s2.Synchronize())
	releaseGraph(t, c, x, s1)
	if n := h.read(errs); n != 0 {
		t.Errorf("%d mismatches", n)
	}
	must(t, u.Close())
	must(t, errs.Close())
}

// Two nodes the graph leaves unordered are reported once, when the capture
// ends, and the graph is refused; the same capture tracked is clean.
func TestGraphRaceInsideGraph(t *testing.T) {
	for _, tracked := range []bool{false, true} {
		name := "wrong: untracked"
		if tracked {
			name = "right: tracked"
		}
		t.Run(name, func(t *testing.T) {
			h := newHZ(t, sanitize.Options{})
			s1, s2 := h.stream(), h.stream()
			var opts []buf.Option
			if !tracked {
				opts = append(opts, buf.Untracked())
			}
			u := h.vec(words, s1, opts...)
			must(t, s1.Synchronize())
			e, err := h.dev.NewEvent(false)
			must(t, err)
			defer e.Destroy()
			c, err := mr.BeginCapture(s1, gpu.CaptureRelaxed, mr.CaptureOptions{})
			must(t, err)
			must(t, e.Record(s1))
			must(t, s2.WaitEvent(e)) // s2 joins the capture
			must(t, h.fill(u, s1, 1))
			must(t, h.fill(u, s2, 2)) // tracked, it waits on the fill on s1
			must(t, e.Record(s2))
			must(t, s1.WaitEvent(e))
			g, err := c.End()
			if !tracked {
				wantKind(t, err, sanitize.Race)
				if g != nil {
					t.Fatal("a refused graph was returned")
				}
				must(t, c.Release(s1))
				must(t, u.Close())
				return
			}
			must(t, err)
			x, err := g.Instantiate(0)
			must(t, err)
			s3, s4 := h.stream(), h.stream()
			errs := h.counter(s4)
			for i := range 20 {
				l := s1
				if i%2 == 1 {
					l = s3
				}
				must(t, x.Launch(l))
				must(t, h.check(u, s4, 2, errs)) // ordered after the launch by tracking
			}
			if n := h.read(errs); n != 0 {
				t.Errorf("%d mismatches", n)
			}
			must(t, u.Close())
			must(t, errs.Close())
			must(t, s3.Synchronize())
			releaseGraph(t, c, x, s1)
			if n := h.z.Count(); n != 0 {
				t.Errorf("%d reports for a graph ordered by tracking", n)
			}
		})
	}
	t.Run("reported once", func(t *testing.T) {
		var reports []*sanitize.Report
		h := newHZ(t, sanitize.Options{OnReport: func(r *sanitize.Report) { reports = append(reports, r) }})
		s1, s2 := h.stream(), h.stream()
		p, err := h.res.Allocate(4096, s1)
		must(t, err)
		must(t, s1.Synchronize())
		e, err := h.dev.NewEvent(false)
		must(t, err)
		defer e.Destroy()
		c, err := mr.BeginCapture(s1, gpu.CaptureRelaxed, mr.CaptureOptions{})
		must(t, err)
		must(t, e.Record(s1))
		must(t, s2.WaitEvent(e))
		must(t, h.z.Use(p, 4096, s1, buf.Write))
		must(t, h.z.Use(p, 4096, s2, buf.Read))
		must(t, e.Record(s2))
		must(t, s1.WaitEvent(e))
		g, err := c.End()
		must(t, err)
		if len(reports) != 1 || reports[0].Kind != sanitize.Race {
			t.Fatalf("reports at the end of the capture: %v, want one race", reports)
		}
		x, err := g.Instantiate(0)
		must(t, err)
		for range 3 {
			must(t, x.Launch(s1)) // nothing is enqueued on p: no real race
		}
		if len(reports) != 1 {
			t.Errorf("%d reports after three launches, want the one of the capture", len(reports))
		}
		releaseGraph(t, c, x, s1)
		must(t, h.res.Deallocate(p, 4096, s1))
	})
}

// Memory a graph allocates (from a Pool's private pool) is checked like
// any other: its uses inside the graph, the graph's output used after a
// launch, and its reuse after the capture's Release.
func TestGraphMemory(t *testing.T) {
	h := newHZ(t, sanitize.Options{})
	up, ok := h.res.Upstream().(*mr.Async)
	if !ok {
		t.Fatalf("upstream %T", h.res.Upstream())
	}
	pool, err := mr.NewPool(up, mr.PoolOptions{})
	must(t, err)
	t.Cleanup(func() { pool.Close(); pool.Release() })
	res := h.z.Resource(pool)
	s1, s2, s3 := h.stream(), h.stream(), h.stream()
	errs := h.counter(s2)
	var out *buf.Vector[uint32]
	c, x := captureGraph(t, s1, func() {
		tmp, err := buf.NewVector[uint32](res, words, s1)
		must(t, err)
		must(t, h.fill(tmp, s1, 5))
		out, err = buf.NewVector[uint32](res, words, s1)
		must(t, err)
		must(t, buf.Copy(out.Buffer(), 0, tmp.Buffer(), 0, 4*words))
		must(t, tmp.Close()) // a free in the graph
	})
	for range 20 {
		must(t, x.Launch(s1))
		must(t, h.check(out, s2, 5, errs)) // the output, after the launch
	}
	if n := h.read(errs); n != 0 {
		t.Errorf("%d mismatches in the graph's output", n)
	}
	if n := h.z.Count(); n != 0 {
		t.Errorf("%d reports for the graph's memory used in order", n)
	}
	// A raw read of the output not ordered after the launch.
	must(t, x.Launch(s1))
	wantKind(t, h.z.Use(out.Ptr(), 4*words, s3, buf.Read), sanitize.UseBeforeAlloc)
	reported := h.z.Count() // and a race with the graph's write
	must(t, s1.Synchronize())
	must(t, h.z.Use(out.Ptr(), 4*words, s3, buf.Read)) // the host saw the launch complete
	must(t, s3.Synchronize())                          // and Release (on s1) comes after the read
	// A graph's output freed by the program: the resource does not order
	// that free after the launch, the program must.
	var raw gpu.DevicePtr
	c2, x2 := captureGraph(t, s1, func() {
		var err error
		raw, err = res.Allocate(4096, s1)
		must(t, err)
		must(t, h.z.Use(raw, 4096, s1, buf.Write))
	})
	must(t, x2.Launch(s1))
	wantKind(t, res.Deallocate(raw, 4096, s2), sanitize.FreeBeforeUse)
	e, err := h.dev.NewEvent(false)
	must(t, err)
	defer e.Destroy()
	must(t, e.Record(s1))
	must(t, s2.WaitEvent(e))
	must(t, res.Deallocate(raw, 4096, s2))
	must(t, s2.Synchronize())
	releaseGraph(t, c2, x2, s1)
	reported = h.z.Count()

	releaseGraph(t, c, x, s1)
	if err := out.Close(); !errors.Is(err, buf.ErrClosed) {
		t.Errorf("Close of the output of a released capture: %v, want ErrClosed", err)
	}
	// The memory went back to the pool's upstream at Release: a new
	// owner may have it, and nothing is reported.
	for range 4 {
		v, err := buf.NewVector[uint32](res, words, s3)
		must(t, err)
		must(t, h.fill(v, s3, 1))
		must(t, v.Close())
	}
	must(t, errs.Close())
	if n := h.z.Count(); n != reported {
		t.Errorf("%d reports after Release and reuse", n-reported)
	}
}

// Memory allocated before a capture and freed in it is freed at the
// capture's Release: used after that, it is a use after free.
func TestGraphDeferredFree(t *testing.T) {
	h := newHZ(t, sanitize.Options{})
	s := h.stream()
	p, err := h.res.Allocate(4096, s)
	must(t, err)
	c, x := captureGraph(t, s, func() {
		must(t, h.z.Use(p, 4096, s, buf.Read))
		must(t, h.res.Deallocate(p, 4096, s))
	})
	must(t, x.Launch(s))
	must(t, x.Launch(s))
	releaseGraph(t, c, x, s)
	wantKind(t, h.z.Use(p, 4096, s, buf.Read), sanitize.UseAfterFree)
	q, err := h.res.Allocate(4096, s) // may reuse p: no report
	must(t, err)
	must(t, h.res.Deallocate(q, 4096, s))
	if n := h.z.Count(); n != 1 {
		t.Errorf("%d reports, want the one use after free", n)
	}
}

// FuzzGraphCheck captures random programs of uses of two regions on three
// streams of one capture, ordered by random event edges, and checks that
// the check at the end of the capture reports a race exactly when a
// reference finds two conflicting uses that the graph leaves unordered.
// The reference keeps, per stream, the set of uses ordered before its
// next operation (no clocks, no epochs) and compares every pair.
func FuzzGraphCheck(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 1, 0, 1})          // two writes, unordered: a race
	f.Add([]byte{0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 1}) // ordered by an edge: none
	f.Add([]byte{0, 0, 0, 1, 0, 1, 1, 0, 1, 0})
	f.Add([]byte{0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 2, 0, 0})
	f.Add([]byte{0, 1, 1, 0, 2, 1, 1, 0, 1, 2, 1, 2, 0, 0, 1, 1, 1, 1, 0})
	f.Add([]byte{0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 1, 2, 0, 2, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 120 {
			data = data[:120]
		}
		races := 0
		h := newHZ(t, sanitize.Options{StackDepth: -1, OnReport: func(r *sanitize.Report) {
			if r.Kind == sanitize.Race {
				races++
			}
		}})
		streams := []gpu.Stream{h.stream(), h.stream(), h.stream()}
		var ptrs []gpu.DevicePtr
		for range 2 {
			p, err := h.res.Allocate(4096, streams[0])
			must(t, err)
			ptrs = append(ptrs, p)
		}
		must(t, streams[0].Synchronize())
		var events []gpu.Event
		for range 3 {
			e, err := h.dev.NewEvent(false)
			must(t, err)
			defer e.Destroy()
			events = append(events, e)
		}
		edge := func(from, to int) {
			must(t, events[from].Record(streams[from]))
			must(t, streams[to].WaitEvent(events[from]))
		}

		type use struct {
			region int
			write  bool
			pred   map[int]bool
		}
		var uses []use
		before := []map[int]bool{{}, {}, {}}
		must(t, gpu.BeginCapture(streams[0], gpu.CaptureRelaxed))
		edge(0, 1)
		edge(0, 2)
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		for len(data) > 0 {
			switch next() % 2 {
			case 0:
				lane, region, write := next()%3, next()%2, next()%2 == 1
				a := buf.Read
				if write {
					a = buf.Write
				}
				must(t, h.z.Use(ptrs[region], 4096, streams[lane], a))
				pred := make(map[int]bool, len(before[lane]))
				for k := range before[lane] {
					pred[k] = true
				}
				uses = append(uses, use{region, write, pred})
				before[lane][len(uses)-1] = true
			case 1:
				from, to := next()%3, next()%3
				if from == to {
					continue
				}
				edge(from, to)
				for k := range before[from] {
					before[to][k] = true
				}
			}
		}
		edge(1, 0)
		edge(2, 0)
		g, err := gpu.EndCapture(streams[0])
		must(t, err)
		must(t, g.Destroy())

		want := false
		for j := range uses {
			for i := range j {
				a, b := uses[i], uses[j]
				if a.region == b.region && (a.write || b.write) && !b.pred[i] {
					want = true
				}
			}
		}
		if (races > 0) != want {
			t.Fatalf("%d races reported, reference finds a race: %v", races, want)
		}
		for _, p := range ptrs {
			must(t, h.res.Deallocate(p, 4096, streams[0]))
		}
	})
}
