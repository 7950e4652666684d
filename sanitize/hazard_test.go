package sanitize_test

// The hazard suite: for each pitfall of stream-ordered allocation (mixing
// streams without ordering, a buffer that dies while a kernel still uses
// it, a cross-stream free, a read before the allocation is ready on another
// stream) and the resource-side hazard of reuse before the free is
// ordered, the wrong version is caught and the right version is clean. The sanitizer runs in refusing mode, so the hazardous
// operation of a wrong version is never enqueued: the simulator never
// executes the race, and the suite is clean under -race while the right
// versions move real bytes that -race checks.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

type hz struct {
	t   *testing.T
	z   *sanitize.Sanitizer
	raw *sim.Device
	dev *sanitize.Device
	res *sanitize.Resource
	k   *kernels.Kernels
}

// newHZ builds the sanitizer, an instrumented simulated device, an async
// resource on it and the adaptor over that.
func newHZ(t *testing.T, opts sanitize.Options) *hz {
	t.Helper()
	d := testdev.Device(t)
	z := sanitize.New(opts)
	dev := z.Device(d)
	async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	must(t, err)
	k, err := kernels.Load(dev)
	must(t, err)
	h := &hz{t: t, z: z, dev: dev, res: z.Resource(async), k: k}
	h.raw, _ = d.(*sim.Device)
	t.Cleanup(func() {
		must(t, dev.Synchronize())
		if n, _ := async.Live(); n != 0 {
			t.Errorf("%d allocations live at the end", n)
		}
		async.Close()
	})
	return h
}

func (h *hz) stream() gpu.Stream {
	s, err := h.dev.NewStream()
	must(h.t, err)
	h.t.Cleanup(func() { s.Destroy() })
	return s
}

// hold blocks s until the returned function (or the end of the test)
// releases it: the simulator's Hold, or on a GPU a 50 ms spin kernel.
func (h *hz) hold(s gpu.Stream) func() {
	if h.raw == nil {
		must(h.t, h.k.Spin(s, 50*time.Millisecond))
		return func() {}
	}
	release := h.raw.Hold(sanitize.Unwrap(s))
	h.t.Cleanup(release)
	return release
}

func (h *hz) vec(n int, s gpu.Stream, opts ...buf.Option) *buf.Vector[uint32] {
	v, err := buf.NewVector[uint32](h.res, n, s, opts...)
	must(h.t, err)
	return v
}

// fill and check are kernel launches on s declared as uses of v.
func (h *hz) fill(v *buf.Vector[uint32], s gpu.Stream, seed uint32) error {
	return v.Use(s, buf.Write, func() error { return h.k.Fill(s, v.Ptr(), v.Len(), seed) })
}

// check adds the mismatches of v against seed to errs (a 1-word vector).
func (h *hz) check(v *buf.Vector[uint32], s gpu.Stream, seed uint32, errs *buf.Vector[uint32]) error {
	return buf.UseAll(s, []buf.Operand{{Buf: v.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
		func() error { return h.k.Check(s, v.Ptr(), v.Len(), seed, errs.Ptr()) })
}

func (h *hz) counter(s gpu.Stream) *buf.Vector[uint32] {
	c := h.vec(1, s)
	must(h.t, c.Memset(0))
	return c
}

func (h *hz) read(c *buf.Vector[uint32]) uint32 {
	out := make([]uint32, 1)
	must(h.t, c.CopyToHost(out))
	must(h.t, c.Stream().Synchronize())
	return out[0]
}

func wantKind(t *testing.T, err error, k sanitize.Kind) {
	t.Helper()
	if !errors.Is(err, k) {
		t.Fatalf("got %v, want a %q report", err, k)
	}
	var r *sanitize.Report
	if !errors.As(err, &r) || len(r.This.Stack) == 0 || len(r.Other.Stack) == 0 {
		t.Fatalf("report without both stacks: %v", err)
	}
}

const words = 1 << 14

// Pitfall 1: mixing streams without synchronization.
func TestHazardMixingStreams(t *testing.T) {
	t.Run("wrong", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		v := h.vec(words, a, buf.Untracked())
		errs := h.counter(b)
		must(t, a.Synchronize()) // the allocation is ordered; the data is not
		must(t, h.k.Spin(a, time.Millisecond))
		must(t, h.fill(v, a, 1))
		wantKind(t, h.check(v, b, 1, errs), sanitize.Race)
		must(t, a.Synchronize())
		must(t, v.Close())
		must(t, errs.Close())
	})
	t.Run("right: tracking", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		v := h.vec(words, a)
		errs := h.counter(b)
		must(t, h.k.Spin(a, time.Millisecond))
		must(t, h.fill(v, a, 1))
		must(t, h.check(v, b, 1, errs))
		if n := h.read(errs); n != 0 {
			t.Fatalf("%d words read before they were written", n)
		}
		must(t, v.Close())
		must(t, errs.Close())
	})
	t.Run("right: event by hand", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		v := h.vec(words, a, buf.Untracked())
		errs := h.counter(b)
		must(t, h.k.Spin(a, time.Millisecond))
		must(t, h.fill(v, a, 1))
		e, err := h.dev.NewEvent(false)
		must(t, err)
		defer e.Destroy()
		must(t, e.Record(a))
		must(t, b.WaitEvent(e))
		must(t, h.check(v, b, 1, errs))
		if n := h.read(errs); n != 0 {
			t.Fatalf("%d mismatches", n)
		}
		must(t, v.CloseOn(b))
		must(t, errs.Close())
	})
}

// Pitfall 2: a buffer that dies while a kernel still uses it.
func TestHazardBufferDiesUnderKernel(t *testing.T) {
	t.Run("wrong", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s, k := h.stream(), h.stream()
		v := h.vec(words, s, buf.Untracked())
		must(t, s.Synchronize())
		must(t, h.k.Spin(k, time.Millisecond))
		must(t, h.fill(v, k, 2)) // the kernel on k still runs...
		wantKind(t, v.Close(), sanitize.FreeBeforeUse)
		// The refused free left the buffer open; order it and close.
		must(t, k.Synchronize())
		must(t, v.Close())
	})
	t.Run("wrong: use after close", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s := h.stream()
		v := h.vec(words, s)
		ref, p := v.Ref(), v.Ptr()
		must(t, v.Close())
		if err := ref.Use(s, buf.Read, func() error { return nil }); !errors.Is(err, buf.ErrUseAfterFree) {
			t.Fatalf("stale ref: %v", err)
		}
		// A raw pointer kept past Close has no generation; the
		// sanitizer catches its use.
		wantKind(t, h.z.Use(p, 4*words, s, buf.Read), sanitize.UseAfterFree)
	})
	t.Run("right", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s, k := h.stream(), h.stream()
		v := h.vec(words, s)
		must(t, h.k.Spin(k, 2*time.Millisecond))
		must(t, h.fill(v, k, 2))
		must(t, v.Close()) // on s, after the kernel on k
		// The next owner, on s, gets the memory in stream order and
		// must not see the late kernel's writes.
		w := h.vec(words, s)
		errs := h.counter(s)
		must(t, h.fill(w, s, 77))
		must(t, h.check(w, s, 77, errs))
		must(t, k.Synchronize())
		if n := h.read(errs); n != 0 {
			t.Fatalf("%d words of the new owner overwritten", n)
		}
		must(t, w.Close())
		must(t, errs.Close())
	})
}

// Pitfall 3: a cross-stream free.
func TestHazardCrossStreamFree(t *testing.T) {
	t.Run("wrong: use on a third stream", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s1, s2, s3 := h.stream(), h.stream(), h.stream()
		v := h.vec(words, s1, buf.Untracked())
		must(t, s1.Synchronize())
		release := h.hold(s2)
		must(t, h.fill(v, s2, 3))
		wantKind(t, v.CloseOn(s3), sanitize.FreeBeforeUse)
		release()
		must(t, s2.Synchronize())
		must(t, v.CloseOn(s3))
	})
	t.Run("wrong: strict resource contract", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{StrictCrossStreamFree: true})
		s1, s2 := h.stream(), h.stream()
		v := h.vec(words, s1, buf.Untracked())
		must(t, h.fill(v, s1, 3))
		wantKind(t, v.CloseOn(s2), sanitize.FreeBeforeUse)
		must(t, v.CloseOn(s1))
	})
	t.Run("right: the resource orders the allocation stream", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s1, s2 := h.stream(), h.stream()
		v := h.vec(words, s1, buf.Untracked())
		must(t, h.fill(v, s1, 3))
		must(t, v.CloseOn(s2))
	})
	t.Run("right: S1 alloc, S2 write, S3 read, S4 free", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		s1, s2, s3, s4 := h.stream(), h.stream(), h.stream(), h.stream()
		v := h.vec(words, s1)
		errs := h.counter(s3)
		r2 := h.hold(s2)
		must(t, h.fill(v, s2, 4))
		must(t, h.check(v, s3, 4, errs))
		must(t, v.CloseOn(s4))
		w := h.vec(words, s4) // may reuse v's memory at once
		must(t, h.fill(w, s4, 99))
		r2()
		if n := h.read(errs); n != 0 {
			t.Fatalf("%d mismatches: the free did not wait", n)
		}
		must(t, w.Close())
		must(t, errs.Close())
	})
}

// Pitfall 4: reading before the allocation is ready on another stream.
func TestHazardReadBeforeAllocation(t *testing.T) {
	t.Run("wrong", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		release := h.hold(a)
		defer release()
		v := h.vec(words, a, buf.Untracked())
		errs := h.counter(b)
		wantKind(t, h.check(v, b, 0, errs), sanitize.UseBeforeAlloc)
		release()
		must(t, v.Close())
		must(t, errs.Close())
	})
	t.Run("right: tracking", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		release := h.hold(a)
		v := h.vec(words, a)
		must(t, v.Memset(0))
		errs := h.counter(b)
		must(t, h.check(v, b, 0, errs)) // waits on the allocation
		release()
		if n := h.read(errs); n != words-1 {
			// Word 0 is 0 = seed+0; the others differ from seed+i.
			t.Fatalf("%d mismatches, want %d", n, words-1)
		}
		must(t, v.Close())
		must(t, errs.Close())
	})
	t.Run("right: synchronize", func(t *testing.T) {
		h := newHZ(t, sanitize.Options{})
		a, b := h.stream(), h.stream()
		v := h.vec(words, a, buf.Untracked())
		must(t, v.Memset(0))
		errs := h.counter(b)
		must(t, a.Synchronize())
		must(t, h.check(v, b, 0, errs))
		if n := h.read(errs); n != words-1 {
			t.Fatalf("%d mismatches, want %d", n, words-1)
		}
		must(t, v.CloseOn(b))
		must(t, errs.Close())
	})
}

// cacheRes is a test resource that keeps freed blocks for reuse, like a
// pool. With ordered false it hands a block freed on one stream to
// another stream at once (the bug the sanitizer must catch); with ordered
// true it records an event on the freeing stream and makes the allocating
// stream wait on it, through the (instrumented) device.
type cacheRes struct {
	up      mr.Resource
	ordered bool
	mu      sync.Mutex
	free    []cached
}

type cached struct {
	p    gpu.DevicePtr
	size int
	s    gpu.Stream
	e    gpu.Event
}

func (c *cacheRes) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, b := range c.free {
		if b.size != size {
			continue
		}
		c.free = append(c.free[:i], c.free[i+1:]...)
		if b.e != nil {
			if err := s.WaitEvent(b.e); err != nil {
				return 0, err
			}
			b.e.Destroy()
		}
		return b.p, nil
	}
	return c.up.Allocate(size, s)
}

func (c *cacheRes) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := cached{p: p, size: size, s: s}
	if c.ordered {
		e, err := c.up.Device().NewEvent(false)
		if err != nil {
			return err
		}
		if err := e.Record(s); err != nil {
			return err
		}
		b.e = e
	}
	c.free = append(c.free, b)
	return nil
}

func (c *cacheRes) Device() gpu.Device { return c.up.Device() }

func (c *cacheRes) drain() error {
	for _, b := range c.free {
		if b.e != nil {
			b.e.Destroy()
		}
		if err := c.up.Deallocate(b.p, b.size, b.s); err != nil {
			return err
		}
	}
	c.free = nil
	return nil
}

// The resource-side hazard: memory handed to a new owner before the
// previous free is ordered before it.
func TestHazardReuseBeforeFree(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		name := "wrong"
		if ordered {
			name = "right"
		}
		t.Run(name, func(t *testing.T) {
			h := newHZ(t, sanitize.Options{})
			cache := &cacheRes{up: h.res.Upstream(), ordered: ordered}
			res := h.z.Resource(cache)
			s1, s2 := h.stream(), h.stream()
			release := h.hold(s1)
			v, err := buf.NewVector[uint32](res, words, s1)
			must(t, err)
			must(t, h.fill(v, s1, 5))
			must(t, v.Close())
			w, err := buf.NewVector[uint32](res, words, s2)
			if !ordered {
				wantKind(t, err, sanitize.ReuseBeforeFree)
			} else {
				must(t, err)
				must(t, h.fill(w, s2, 6))
				must(t, w.Close())
			}
			release()
			must(t, h.dev.Synchronize())
			must(t, cache.drain())
		})
	}
}

// A buffer finds the sanitizer below other adaptors (through
// mr.Wrapper), so its declared uses are checked there too.
func TestObserverBelowAdaptors(t *testing.T) {
	h := newHZ(t, sanitize.Options{})
	stats := mr.NewStats(h.res, mr.StatsOptions{})
	a, b := h.stream(), h.stream()
	release := h.hold(a)
	v, err := buf.NewVector[uint32](stats, words, a, buf.Untracked())
	must(t, err)
	wantKind(t, v.Use(b, buf.Read, func() error { return nil }), sanitize.UseBeforeAlloc)
	release()
	must(t, v.Close())
}
