package sim_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func TestHold(t *testing.T) {
	f := newFixture(t, sim.Config{})
	release := f.sd.Hold(f.s)
	p := f.mallocAsync(1024, f.s)
	f.must(f.dev.MemsetD8Async(p, 1, 1024, f.s))
	time.Sleep(10 * time.Millisecond)
	wantErr(t, "Query while held", f.s.Query(), gpu.ErrNotReady)
	done := make(chan error)
	go func() { done <- f.s.Synchronize() }()
	select {
	case err := <-done:
		t.Fatalf("Synchronize returned %v while the stream was held", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	release() // idempotent
	f.must(<-done)
	f.must(f.s.Query())

	// Holding a bad stream does nothing.
	f.sd.Hold(nil)()
	d := f.stream()
	f.must(d.Destroy())
	f.sd.Hold(d)()
}

// state is what an injected failure must leave unchanged.
type state struct {
	free           uint64
	last           sim.OpID
	reserved, used uint64
	threshold      uint64
}

func (f *fixture) state(s gpu.Stream) state {
	pool := f.defaultPool()
	return state{
		free:      f.free(),
		last:      f.sd.LastOp(s),
		reserved:  f.attr(pool, gpu.PoolReservedMemCurrent),
		used:      f.attr(pool, gpu.PoolUsedMemCurrent),
		threshold: f.attr(pool, gpu.PoolReleaseThreshold),
	}
}

func TestFailNext(t *testing.T) {
	f := newFixture(t, sim.Config{})
	s := f.s
	pool := f.defaultPool()
	f.must(pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
	other, err := f.dev.NewMemPool()
	f.must(err)
	e0, e1 := f.event(true), f.event(true)
	f.must(e0.Record(s))
	f.must(e1.Record(s))
	f.must(s.Synchronize())
	m, err := f.dev.LoadModule(kernels.PTX)
	f.must(err)
	spin, err := m.Function(kernels.SpinEntry)
	f.must(err)

	malloc := func() gpu.DevicePtr {
		p, err := f.dev.Malloc(4096)
		f.must(err)
		return p
	}
	buf := malloc()
	for _, c := range []struct {
		op   sim.Op
		name string // the driver call in the error
		call func() error
	}{
		{sim.OpMalloc, "cuMemAlloc", func() error { _, err := f.dev.Malloc(1 << 20); return err }},
		{sim.OpFree, "cuMemFree", func() func() error { p := malloc(); return func() error { return f.dev.Free(p) } }()},
		{sim.OpMallocAsync, "cuMemAllocAsync", func() error { _, err := f.dev.MallocAsync(8<<20, s); return err }},
		{sim.OpMallocFromPoolAsync, "cuMemAllocFromPoolAsync", func() error { _, err := f.dev.MallocFromPoolAsync(1<<20, other, s); return err }},
		{sim.OpFreeAsync, "cuMemFreeAsync", func() func() error {
			p := f.mallocAsync(1<<20, s)
			return func() error { return f.dev.FreeAsync(p, s) }
		}()},
		{sim.OpMallocManaged, "cuMemAllocManaged", func() error { _, err := f.dev.MallocManaged(1 << 20); return err }},
		{sim.OpMallocHost, "cuMemAllocHost", func() error { _, err := f.dev.MallocHost(1 << 20); return err }},
		{sim.OpFreeHost, "cuMemFreeHost", func() func() error {
			h, err := f.dev.MallocHost(64)
			f.must(err)
			return func() error { return f.dev.FreeHost(h) }
		}()},
		{sim.OpMemGetInfo, "cuMemGetInfo", func() error { _, _, err := f.dev.MemGetInfo(); return err }},
		{sim.OpCtxSynchronize, "cuCtxSynchronize", f.dev.Synchronize},
		{sim.OpStreamCreate, "cuStreamCreate", func() error { _, err := f.dev.NewStream(); return err }},
		{sim.OpStreamDestroy, "cuStreamDestroy", f.stream().Destroy},
		{sim.OpStreamSynchronize, "cuStreamSynchronize", s.Synchronize},
		{sim.OpStreamQuery, "cuStreamQuery", s.Query},
		{sim.OpStreamIsCapturing, "cuStreamIsCapturing", func() error { _, err := s.(gpu.CaptureStream).CaptureStatus(); return err }},
		{sim.OpStreamWaitEvent, "cuStreamWaitEvent", func() error { return s.WaitEvent(e0) }},
		{sim.OpEventCreate, "cuEventCreate", func() error { _, err := f.dev.NewEvent(false); return err }},
		{sim.OpEventDestroy, "cuEventDestroy", f.event(false).Destroy},
		{sim.OpEventRecord, "cuEventRecord", func() error { return f.event(false).Record(s) }},
		{sim.OpEventQuery, "cuEventQuery", e0.Query},
		{sim.OpEventSynchronize, "cuEventSynchronize", e0.Synchronize},
		{sim.OpEventElapsedTime, "cuEventElapsedTime", func() error { _, err := e1.ElapsedSince(e0); return err }},
		{sim.OpDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", func() error { _, err := f.dev.DefaultMemPool(); return err }},
		{sim.OpMemPoolCreate, "cuMemPoolCreate", func() error { _, err := f.dev.NewMemPool(); return err }},
		{sim.OpMemPoolDestroy, "cuMemPoolDestroy", func() func() error {
			p, err := f.dev.NewMemPool()
			f.must(err)
			return p.Destroy
		}()},
		{sim.OpMemPoolGetAttribute, "cuMemPoolGetAttribute", func() error { _, err := pool.Attribute(gpu.PoolUsedMemCurrent); return err }},
		{sim.OpMemPoolSetAttribute, "cuMemPoolSetAttribute", func() error { return pool.SetAttribute(gpu.PoolReleaseThreshold, 0) }},
		{sim.OpMemPoolTrimTo, "cuMemPoolTrimTo", func() error { return pool.TrimTo(0) }},
		{sim.OpMemset, "cuMemsetD8Async", func() error { return f.dev.MemsetD8Async(buf, 1, 16, s) }},
		{sim.OpCopy, "cuMemcpyHtoDAsync", func() error { return f.dev.CopyHtoDAsync(buf, []byte{1}, s) }},
		{sim.OpCopy, "cuMemcpyDtoHAsync", func() error { return f.dev.CopyDtoHAsync(make([]byte, 1), buf, s) }},
		{sim.OpCopy, "cuMemcpyDtoDAsync", func() error { return f.dev.CopyDtoDAsync(buf, buf+64, 16, s) }},
		{sim.OpModuleLoad, "cuModuleLoadData", func() error { _, err := f.dev.LoadModule(kernels.PTX); return err }},
		{sim.OpModuleGetFunction, "cuModuleGetFunction", func() error { _, err := m.Function(kernels.FillEntry); return err }},
		{sim.OpLaunch, "cuLaunchKernel", func() error { return f.dev.Launch(spin, gpu.Dim3{}, gpu.Dim3{}, 0, s, uint64(1)) }},
		{sim.OpModuleUnload, "cuModuleUnload", m.Unload},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.op.String() != c.name && c.op != sim.OpCopy {
				t.Errorf("Op %d String() = %q, want %q", int(c.op), c.op.String(), c.name)
			}
			f.must(s.Synchronize())
			before := f.state(s)
			f.sd.FailNext(c.op, 1, gpu.ErrLaunchFailed)
			err := c.call()
			var ce *gpu.Error
			if !errors.As(err, &ce) || ce.Code != gpu.ErrLaunchFailed || ce.Op != c.name {
				t.Fatalf("got %v, want a *gpu.Error from %s with CUDA_ERROR_LAUNCH_FAILED", err, c.name)
			}
			f.must(s.Synchronize())
			if after := f.state(s); after != before {
				t.Errorf("the failed call changed state:\nbefore %+v\nafter  %+v", before, after)
			}
			if err := c.call(); err != nil {
				t.Errorf("the call after the injected failure: %v", err)
			}
		})
	}

	// n calls fail, then the call works; other errors are wrapped; n <= 0 cancels.
	f.sd.FailNext(sim.OpStreamQuery, 2, gpu.ErrNotReady)
	wantErr(t, "1st injected", s.Query(), gpu.ErrNotReady)
	wantErr(t, "2nd injected", s.Query(), gpu.ErrNotReady)
	f.must(s.Query())
	custom := errors.New("custom failure")
	f.sd.FailNext(sim.OpMalloc, 1, custom)
	_, err = f.dev.Malloc(1)
	if !errors.Is(err, custom) || !strings.Contains(err.Error(), "cuMemAlloc") {
		t.Errorf("custom injected error: %v", err)
	}
	f.sd.FailNext(sim.OpMalloc, 5, nil)
	f.sd.FailNext(sim.OpMalloc, 0, nil)
	p, err := f.dev.Malloc(1)
	f.must(err)
	f.must(f.dev.Free(p))
	f.sd.FailNext(sim.OpFree, 1, nil)
	wantErr(t, "nil error injects CUDA_ERROR_UNKNOWN", f.dev.Free(p), gpu.ErrUnknown)
}

func TestHappensBefore(t *testing.T) {
	f := newFixture(t, sim.Config{})
	s1, s2, s3 := f.stream(), f.stream(), f.stream()
	hb := f.sd.HappensBefore
	op := func(s gpu.Stream) sim.OpID {
		t.Helper()
		f.must(f.dev.MemsetD8Async(f.mallocAsync(256, s), 0, 256, s))
		return f.sd.LastOp(s)
	}
	if !f.sd.LastOp(s1).IsZero() {
		t.Error("LastOp of a new stream is not zero")
	}
	a1 := op(s1)
	a2 := op(s1)
	if a1.Stream() != s1.ID() || a2.Seq() <= a1.Seq() {
		t.Errorf("OpIDs %v, %v on stream %d", a1, a2, s1.ID())
	}
	b1 := op(s2)
	switch {
	case !hb(a1, a2) || hb(a2, a1):
		t.Error("stream order")
	case hb(a1, b1) || hb(b1, a1):
		t.Error("two unordered streams are ordered")
	case hb(a1, a1), hb(sim.OpID{}, a1), hb(a1, sim.OpID{}):
		t.Error("an operation before itself or the zero OpID")
	}

	// Events carry order, transitively: S1 -> S2 -> S3.
	e, e2 := f.event(false), f.event(false)
	f.must(e.Record(s1))
	f.must(s2.WaitEvent(e))
	b2 := op(s2)
	f.must(e2.Record(s2))
	f.must(s3.WaitEvent(e2))
	c1 := op(s3)
	a3 := op(s1)
	if !hb(a2, b2) || !hb(a2, c1) || !hb(b2, c1) || hb(b1, a3) || hb(a3, c1) || hb(c1, a3) {
		t.Error("event ordering")
	}
	if hb(a2, b1) {
		t.Error("an earlier operation of S2 is ordered after the event")
	}

	// The host: synchronizing S1 orders it before what the host enqueues later.
	f.must(s1.Synchronize())
	b3 := op(s2)
	if !hb(a3, b3) {
		t.Error("host synchronize does not order later work")
	}
	a4 := op(s1)
	if hb(a4, b3) {
		t.Error("later work ordered before earlier")
	}

	// Unknown operations.
	if hb(sim.OpID{}, b3) || hb(a1, f.sd.LastOp(f.stream())) {
		t.Error("unknown operations are ordered")
	}
	beyond := f.sd.LastOp(s1)
	f.must(f.dev.MemsetD8Async(f.mallocAsync(256, s1), 0, 256, s1))
	if !hb(beyond, f.sd.LastOp(s1)) {
		t.Error("LastOp not ordered before the next operation")
	}
	f.must(f.dev.Synchronize())
}

func TestCompleted(t *testing.T) {
	f := newFixture(t, sim.Config{})
	if f.sd.Completed(sim.OpID{}) {
		t.Error("the zero OpID completed")
	}
	release := f.sd.Hold(f.s)
	held := f.sd.LastOp(f.s)
	f.must(f.dev.MemsetD8Async(f.mallocAsync(64, f.s), 0, 64, f.s))
	after := f.sd.LastOp(f.s)
	if f.sd.Completed(held) || f.sd.Completed(after) {
		t.Error("operations of a held stream completed")
	}
	release()
	for !f.sd.Completed(after) {
		time.Sleep(time.Millisecond)
	}
	if !f.sd.Completed(held) {
		t.Error("an earlier operation is not completed")
	}
	f.must(f.s.Synchronize())
}
