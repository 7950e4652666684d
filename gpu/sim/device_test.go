package sim_test

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func TestBackend(t *testing.T) {
	b := sim.New(sim.Config{})
	var _ gpu.Backend = b
	if b.Name() != "sim" || !b.Simulated() {
		t.Errorf("Name %q, Simulated %v", b.Name(), b.Simulated())
	}
	if v, err := b.DriverVersion(); err != nil || v != 13000 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	if n, err := b.DeviceCount(); err != nil || n != 1 {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	d0, err := b.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := b.Device(0); again != d0 {
		t.Error("Device(0) twice returned different devices")
	}
	p := d0.Properties()
	if !p.Simulated || p.Name != "Simulated H100" || p.TotalMemory != 80<<30 || !p.MemoryPoolsSupported || p.ComputeMajor != 9 {
		t.Errorf("properties %+v", p)
	}
	free, total, err := d0.MemGetInfo()
	if err != nil || free != 80<<30 || total != 80<<30 {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}
	for _, ord := range []int{-1, 1, 1 << 20} {
		_, err := b.Device(ord)
		wantErr(t, "Device(invalid)", err, gpu.ErrInvalidDevice)
	}

	none := sim.New(sim.Config{Devices: -1})
	_, err = none.DeviceCount()
	wantErr(t, "DeviceCount with no devices", err, gpu.ErrNoDevice)
	_, err = none.Device(0)
	wantErr(t, "Device(0) with no devices", err, gpu.ErrNoDevice)

	custom := sim.New(sim.Config{Devices: 3, Capacity: 1 << 30, DriverVersion: 12040, Name: "Tiny"})
	if n, _ := custom.DeviceCount(); n != 3 {
		t.Errorf("DeviceCount = %d, want 3", n)
	}
	d2, err := custom.Device(2)
	if err != nil || d2.Ordinal() != 2 || d2.Properties().Name != "Tiny" || d2.Properties().TotalMemory != 1<<30 {
		t.Errorf("custom device 2: %v %+v", err, d2)
	}
}

// fakeStream and the others are handles of another backend.
type fakeStream struct{ gpu.Stream }
type fakeEvent struct{ gpu.Event }
type fakePool struct{ gpu.MemPool }
type fakeFunc struct{}

func (fakeFunc) Name() string { return "fake" }

func TestWrongDeviceAndForeignHandles(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	d0, _ := b.Device(0)
	d1, _ := b.Device(1)
	s0, err := d0.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := d1.NewStream()
	e1, _ := d1.NewEvent(true)
	e0, _ := d0.NewEvent(true)
	pool1, _ := d1.NewMemPool()
	k1, err := kernels.Load(d1)
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := d0.Malloc(1024)

	_, err = d0.MallocAsync(256, s1)
	wantErr(t, "MallocAsync with a stream of device 1", err, gpu.ErrWrongDevice)
	wantErr(t, "FreeAsync with a stream of device 1", d0.FreeAsync(p0, s1), gpu.ErrWrongDevice)
	wantErr(t, "MemsetD8Async with a stream of device 1", d0.MemsetD8Async(p0, 0, 4, s1), gpu.ErrWrongDevice)
	wantErr(t, "Record on a stream of device 0", e1.Record(s0), gpu.ErrWrongDevice)
	wantErr(t, "WaitEvent on an event of device 1", s0.WaitEvent(e1), gpu.ErrWrongDevice)
	_, err = d0.MallocFromPoolAsync(256, pool1, s0)
	wantErr(t, "pool of device 1", err, gpu.ErrWrongDevice)
	m1, _ := d1.LoadModule(kernels.PTX)
	f1, _ := m1.Function(kernels.SpinEntry)
	wantErr(t, "Launch of a function of device 1", d0.Launch(f1, gpu.Dim3{}, gpu.Dim3{}, 0, s0, uint64(1)), gpu.ErrWrongDevice)
	must(t, e0.Record(s0))
	must(t, e1.Record(s1))
	must(t, e0.Synchronize())
	must(t, e1.Synchronize())
	_, err = e0.ElapsedSince(e1)
	wantErr(t, "ElapsedSince across devices", err, gpu.ErrWrongDevice)
	_ = k1

	// Handles of another backend are handles of another device, as on
	// the CUDA backend.
	_, err = d0.MallocAsync(256, fakeStream{})
	wantErr(t, "stream of another backend", err, gpu.ErrWrongDevice)
	wantErr(t, "WaitEvent(event of another backend)", s0.WaitEvent(fakeEvent{}), gpu.ErrWrongDevice)
	_, err = d0.MallocFromPoolAsync(256, fakePool{}, s0)
	wantErr(t, "pool of another backend", err, gpu.ErrWrongDevice)
	wantErr(t, "Launch of another backend's function", d0.Launch(fakeFunc{}, gpu.Dim3{}, gpu.Dim3{}, 0, s0, uint64(1)), gpu.ErrWrongDevice)
	wantErr(t, "Launch(nil)", d0.Launch(nil, gpu.Dim3{}, gpu.Dim3{}, 0, s0, uint64(1)), gpu.ErrInvalidHandle)
	_, err = d0.MallocFromPoolAsync(256, nil, s0)
	wantErr(t, "MallocFromPoolAsync(nil pool)", err, gpu.ErrInvalidHandle)
	typedNil := reflect.Zero(reflect.TypeOf(s0)).Interface().(gpu.Stream)
	wantErr(t, "typed nil stream", d0.MemsetD8Async(p0, 0, 1, typedNil), gpu.ErrInvalidHandle)
	wantErr(t, "Synchronize on a typed nil stream", typedNil.Synchronize(), gpu.ErrInvalidHandle)
	wantErr(t, "Query on a typed nil stream", typedNil.Query(), gpu.ErrInvalidHandle)
	wantErr(t, "WaitEvent on a typed nil stream", typedNil.WaitEvent(e0), gpu.ErrInvalidHandle)
	wantErr(t, "Destroy a typed nil stream", typedNil.Destroy(), gpu.ErrInvalidHandle)
	typedNilEvent := reflect.Zero(reflect.TypeOf(e0)).Interface().(gpu.Event)
	wantErr(t, "Record a typed nil event", typedNilEvent.Record(s0), gpu.ErrInvalidHandle)
	wantErr(t, "WaitEvent(typed nil event)", s0.WaitEvent(typedNilEvent), gpu.ErrInvalidHandle)
	typedNilPool := reflect.Zero(reflect.TypeOf(pool1)).Interface().(gpu.MemPool)
	wantErr(t, "TrimTo on a typed nil pool", typedNilPool.TrimTo(0), gpu.ErrInvalidHandle)

	// A failed call on the wrong device changed nothing: the pointer is still live.
	must(t, d0.Free(p0))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAlignment(t *testing.T) {
	f := newFixture(t, sim.Config{})
	seen := map[gpu.DevicePtr]bool{}
	for _, size := range []int{1, 3, 255, 256, 257, 4097, 1<<20 - 1, 1 << 20, 1<<20 + 1, 3 << 20, 64<<20 + 5} {
		for _, async := range []bool{false, true} {
			var p gpu.DevicePtr
			var err error
			if async {
				p, err = f.dev.MallocAsync(size, f.s)
			} else {
				p, err = f.dev.Malloc(size)
			}
			f.must(err)
			if p == 0 || p%256 != 0 || seen[p] {
				t.Fatalf("size %d (async %v): pointer %#x is null, misaligned or repeated", size, async, uint64(p))
			}
			if size >= 2<<20 && !async && p%(2<<20) != 0 {
				t.Errorf("Malloc(%d) = %#x, want 2 MiB alignment for large allocations", size, uint64(p))
			}
			seen[p] = true
		}
	}
}

func TestLazyBacking(t *testing.T) {
	f := newFixture(t, sim.Config{})
	const size = 64 << 30
	p, err := f.dev.Malloc(size)
	f.must(err)
	if free := f.free(); free != 16<<30 {
		t.Errorf("free %d after a 64 GiB Malloc of 80, want 16 GiB", free)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	end := p + size - 16
	f.must(f.dev.MemsetD8Async(end, 0x7e, 16, f.s))
	f.must(f.dev.MemsetD8Async(p, 0x11, 16, f.s))
	got := make([]byte, 32)
	f.must(f.dev.CopyDtoHAsync(got[:16], end, f.s))
	f.must(f.dev.CopyDtoHAsync(got[16:], p, f.s))
	f.must(f.s.Synchronize())
	runtime.ReadMemStats(&after)
	if !bytes.Equal(got, append(bytes.Repeat([]byte{0x7e}, 16), bytes.Repeat([]byte{0x11}, 16)...)) {
		t.Fatalf("bytes at both ends: %x", got)
	}
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 64<<20 {
		t.Errorf("touching 32 bytes of a 64 GiB allocation grew the heap by %d bytes", grew)
	}
	f.must(f.dev.Free(p))
	if free := f.free(); free != 80<<30 {
		t.Errorf("free %d after Free, want all", free)
	}
}

func TestCapacity(t *testing.T) {
	f := newFixture(t, sim.Config{Capacity: 16 << 20})
	a, err := f.dev.Malloc(6 << 20)
	f.must(err)
	m, err := f.dev.MallocManaged(4 << 20)
	f.must(err)
	q := f.mallocAsync(5<<20, f.s) // a 6 MiB chunk
	if free := f.free(); free != 0 {
		t.Errorf("free %d, want 0 (6 + 4 + 6 MiB of 16)", free)
	}
	_, err = f.dev.Malloc(1)
	wantErr(t, "Malloc when full", err, gpu.ErrOutOfMemory)
	_, err = f.dev.MallocManaged(1)
	wantErr(t, "MallocManaged when full", err, gpu.ErrOutOfMemory)
	_, err = f.dev.MallocAsync(2<<20, f.stream())
	wantErr(t, "MallocAsync when full", err, gpu.ErrOutOfMemory)
	_, err = f.dev.Malloc(17 << 20)
	wantErr(t, "Malloc over capacity", err, gpu.ErrOutOfMemory)
	f.must(f.dev.Free(m))
	b, err := f.dev.Malloc(4 << 20)
	f.must(err)
	f.must(f.dev.Free(a))
	f.must(f.dev.Free(b))
	f.must(f.dev.FreeAsync(q, f.s))
	f.must(f.s.Synchronize()) // release threshold 0: the chunk goes back
	if free := f.free(); free != 16<<20 {
		t.Errorf("free %d after freeing everything, want all 16 MiB", free)
	}
}

func TestFreeErrors(t *testing.T) {
	f := newFixture(t, sim.Config{})
	p, err := f.dev.Malloc(4096)
	f.must(err)
	wantErr(t, "Free(null)", f.dev.Free(0), gpu.ErrInvalidValue)
	wantErr(t, "Free(unknown)", f.dev.Free(0x1234500), gpu.ErrInvalidValue)
	wantErr(t, "Free(interior)", f.dev.Free(p+256), gpu.ErrInvalidValue)
	wantErr(t, "FreeAsync(unknown)", f.dev.FreeAsync(0x1234500, f.s), gpu.ErrInvalidValue)
	q := f.mallocAsync(4096, f.s)
	f.must(f.dev.FreeAsync(q, f.s))
	wantErr(t, "FreeAsync twice", f.dev.FreeAsync(q, f.s), gpu.ErrInvalidValue)
	wantErr(t, "Free after FreeAsync", f.dev.Free(q), gpu.ErrInvalidValue)
	f.must(f.dev.Free(p))
	wantErr(t, "Free twice", f.dev.Free(p), gpu.ErrInvalidValue)

	h, err := f.dev.MallocHost(100)
	f.must(err)
	wantErr(t, "FreeHost(foreign)", f.dev.FreeHost(make([]byte, 100)), gpu.ErrInvalidValue)
	wantErr(t, "FreeHost(nil)", f.dev.FreeHost(nil), gpu.ErrInvalidValue)
	f.must(f.dev.FreeHost(h))
	wantErr(t, "FreeHost twice", f.dev.FreeHost(h), gpu.ErrInvalidValue)
	_, err = f.dev.MallocHost(0)
	wantErr(t, "MallocHost(0)", err, gpu.ErrInvalidValue)
	_, err = f.dev.MallocHost(1 << 50)
	wantErr(t, "MallocHost(1 PiB)", err, gpu.ErrOutOfMemory)
	_, err = f.dev.Malloc(0)
	wantErr(t, "Malloc(0)", err, gpu.ErrInvalidValue)
	_, err = f.dev.MallocAsync(0, f.s)
	wantErr(t, "MallocAsync(0)", err, gpu.ErrInvalidValue)

	// FreeAsync of cuMemAlloc memory unmaps it once the free has run.
	r, err := f.dev.Malloc(3 << 20)
	f.must(err)
	f.must(f.s.Synchronize())
	before := f.free()
	f.must(f.dev.FreeAsync(r, f.s))
	f.must(f.s.Synchronize())
	if after := f.free(); after != before+4<<20 {
		t.Errorf("free %d after FreeAsync of a 3 MiB Malloc, want %d", after, before+4<<20)
	}
}

func TestIllegalAddress(t *testing.T) {
	f := newFixture(t, sim.Config{})
	p, err := f.dev.Malloc(4096)
	f.must(err)
	last := f.sd.LastOp(f.s)

	// Enqueue-time checks: the driver rejects ranges outside allocations.
	wantErr(t, "memset past the end", f.dev.MemsetD8Async(p, 0, 4097, f.s), gpu.ErrInvalidValue)
	wantErr(t, "copy from unmapped", f.dev.CopyDtoHAsync(make([]byte, 4), 0x10, f.s), gpu.ErrInvalidValue)
	wantErr(t, "copy to unmapped", f.dev.CopyHtoDAsync(p+4096, []byte{1}, f.s), gpu.ErrInvalidValue)
	wantErr(t, "DtoD from unmapped", f.dev.CopyDtoDAsync(p, p+8192, 4, f.s), gpu.ErrInvalidValue)
	if f.sd.LastOp(f.s) != last {
		t.Fatal("a rejected call enqueued an operation")
	}

	// Kernels are checked when they run: a sticky error of the stream.
	other := f.stream()
	f.must(f.k.Fill(f.s, p, 1025, 1)) // one word past the end
	f.must(f.dev.MemsetD8Async(p, 0xff, 16, f.s))
	e := f.event(false)
	f.must(e.Record(f.s))
	err = f.s.Synchronize()
	wantErr(t, "Synchronize after an out-of-bounds kernel", err, gpu.ErrIllegalAddress)
	wantErr(t, "Synchronize again (sticky)", f.s.Synchronize(), gpu.ErrIllegalAddress)
	wantErr(t, "Query (sticky)", f.s.Query(), gpu.ErrIllegalAddress)
	wantErr(t, "event recorded after the fault", e.Synchronize(), gpu.ErrIllegalAddress)
	wantErr(t, "device Synchronize", f.dev.Synchronize(), gpu.ErrIllegalAddress)
	// Nothing was written: the kernel faulted before, the memset was skipped.
	got := make([]byte, 16)
	f.must(f.dev.CopyDtoHAsync(got, p, other))
	f.must(other.Synchronize())
	if !bytes.Equal(got, make([]byte, 16)) {
		t.Errorf("bytes after the fault: %x, want untouched zeros", got)
	}

	// Use after free by a stream: unmapped between enqueue and run.
	s1, s2 := f.stream(), f.stream()
	q, err := f.dev.Malloc(4096)
	f.must(err)
	release := f.sd.Hold(s1)
	f.must(f.dev.MemsetD8Async(q, 1, 4096, s1))
	f.must(f.dev.FreeAsync(q, s2))
	f.must(s2.Synchronize()) // the free ran; the host unmaps q
	release()
	wantErr(t, "memset of memory freed meanwhile", s1.Synchronize(), gpu.ErrIllegalAddress)
}

func TestKernels(t *testing.T) {
	sim.RegisterKernel("test_fail", func(l *sim.Launch) error { return errors.New("boom") })
	sim.RegisterKernel("test_panic", func(l *sim.Launch) error { panic("kaboom") })
	var seen *sim.Launch
	sim.RegisterKernel("test_args", func(l *sim.Launch) error {
		seen = l
		p, err := l.ArgPtr(0)
		if err != nil {
			return err
		}
		v, err := l.ArgUint32(1)
		if err != nil {
			return err
		}
		if _, err := l.AddUint32(p, v); err != nil {
			return err
		}
		_, err = l.ArgUint64(5) // no such argument
		if err == nil {
			return errors.New("ArgUint64(5) succeeded")
		}
		return nil
	})
	sim.RegisterKernel("test_misaligned", func(l *sim.Launch) error {
		p, _ := l.ArgPtr(0)
		_, err := l.AddUint32(p+1, 1)
		return err
	})
	const ptx = `
.version 7.0
.target sm_70
.address_size 64
// .entry commented_out(.param .u64 x)
.visible .entry test_fail() { ret; }
.visible .entry test_panic() { ret; }
.visible .entry test_args(.param .u64 p, .param .u32 v) { ret; }
.visible .entry test_misaligned(.param .u64 .ptr .global .align 4 p) { ret; }
`
	f := newFixture(t, sim.Config{})
	m, err := f.dev.LoadModule(ptx)
	f.must(err)
	fn := func(name string) gpu.Function {
		g, err := m.Function(name)
		f.must(err)
		if g.Name() != name {
			t.Fatalf("Name() = %q", g.Name())
		}
		return g
	}
	one := gpu.Dim3{X: 1}

	s := f.stream()
	f.must(f.dev.Launch(fn("test_fail"), one, one, 0, s))
	err = s.Synchronize()
	wantErr(t, "kernel returning an error", err, gpu.ErrLaunchFailed)
	s = f.stream()
	f.must(f.dev.Launch(fn("test_panic"), one, one, 0, s))
	wantErr(t, "kernel panicking", s.Synchronize(), gpu.ErrLaunchFailed)
	s = f.stream()
	p, _ := f.dev.Malloc(8)
	f.must(f.dev.Launch(fn("test_misaligned"), one, one, 0, s, p))
	wantErr(t, "misaligned atomic", s.Synchronize(), gpu.ErrMisalignedAddress)

	s = f.stream()
	f.must(f.dev.MemsetD8Async(p, 0, 8, s))
	f.must(f.dev.Launch(fn("test_args"), gpu.Dim3{X: 2}, gpu.Dim3{X: 32, Y: 2}, 128, s, p, uint32(5)))
	f.must(f.dev.Launch(fn("test_args"), one, one, 0, s, uint64(p), int32(6)))
	out := make([]byte, 4)
	f.must(f.dev.CopyDtoHAsync(out, p, s))
	f.must(s.Synchronize())
	if out[0] != 11 {
		t.Errorf("counter = %d, want 11", out[0])
	}
	if seen.Grid != (gpu.Dim3{X: 1, Y: 1, Z: 1}) || seen.Entry != "test_args" || len(seen.Args) != 2 || seen.Stream() != s.ID() {
		t.Errorf("launch as seen by the kernel: %+v", seen)
	}

	for _, c := range []struct {
		what        string
		grid, block gpu.Dim3
		shared      int
		args        []any
	}{
		{"too few arguments", one, one, 0, []any{p}},
		{"too many arguments", one, one, 0, []any{p, uint32(1), uint32(2)}},
		{"32-bit argument for a 64-bit parameter", one, one, 0, []any{uint32(1), uint32(1)}},
		{"unsupported argument type", one, one, 0, []any{p, "five"}},
		{"block over 1024 threads", one, gpu.Dim3{X: 1025}, 0, []any{p, uint32(1)}},
		{"negative grid", gpu.Dim3{X: -1}, one, 0, []any{p, uint32(1)}},
		{"negative shared memory", one, one, -1, []any{p, uint32(1)}},
		{"too much shared memory", one, one, 1 << 20, []any{p, uint32(1)}},
	} {
		last := f.sd.LastOp(s)
		wantErr(t, c.what, f.dev.Launch(fn("test_args"), c.grid, c.block, c.shared, s, c.args...), gpu.ErrInvalidValue)
		if f.sd.LastOp(s) != last {
			t.Errorf("%s: enqueued anyway", c.what)
		}
	}

	_, err = f.dev.LoadModule(".version 7.0\n.entry not_registered_anywhere(.param .u64 x) { ret; }")
	wantErr(t, "unregistered entry", err, gpu.ErrNotFound)
	_, err = f.dev.LoadModule("this is not PTX")
	wantErr(t, "not PTX", err, gpu.ErrInvalidPTX)
	_, err = m.Function("nope")
	wantErr(t, "unknown function", err, gpu.ErrNotFound)
	g := fn("test_args")
	f.must(m.Unload())
	wantErr(t, "launch after Unload", f.dev.Launch(g, one, one, 0, s, p, uint32(1)), gpu.ErrDestroyed)
	_, err = m.Function("test_args")
	wantErr(t, "Function after Unload", err, gpu.ErrDestroyed)
}

func TestLaunchMemoryViews(t *testing.T) {
	var bytesErr, chunksErr error
	var pieces int
	sim.RegisterKernel("test_views", func(l *sim.Launch) error {
		p, _ := l.ArgPtr(0)
		// 4 MiB straddling a 2 MiB page of a paged (over 64 MiB) allocation.
		_, bytesErr = l.Bytes(p+1<<20, 4<<20)
		chunksErr = l.Chunks(p+1<<20, 4<<20, func(off int, b []byte) error {
			pieces++
			for i := range b {
				b[i] = byte(off + i)
			}
			return nil
		})
		if _, err := l.Bytes(p+(128<<20)-4, 8); err == nil {
			return errors.New("Bytes past the end succeeded")
		}
		return nil
	})
	f := newFixture(t, sim.Config{})
	m, err := f.dev.LoadModule(".version 7.0\n.entry test_views(.param .u64 p) { ret; }")
	f.must(err)
	fn, _ := m.Function("test_views")
	p, err := f.dev.Malloc(128 << 20)
	f.must(err)
	f.must(f.dev.Launch(fn, gpu.Dim3{}, gpu.Dim3{}, 0, f.s, p))
	got := make([]byte, 4<<20)
	f.must(f.dev.CopyDtoHAsync(got, p+1<<20, f.s))
	f.must(f.s.Synchronize())
	wantErr(t, "Bytes across a backing page", bytesErr, gpu.ErrNotSupported)
	if chunksErr != nil || pieces != 3 {
		t.Errorf("Chunks: %v in %d pieces, want 3", chunksErr, pieces)
	}
	for i := range got {
		if got[i] != byte(i) {
			t.Fatalf("byte %d = %d", i, got[i])
		}
	}
}

func TestStreamsRunAsynchronously(t *testing.T) {
	f := newFixture(t, sim.Config{})
	s1, s2 := f.stream(), f.stream()
	// Work on a held stream is enqueued without blocking the host, and
	// another stream runs to completion meanwhile: streams are
	// asynchronous to the host and to each other (no timing involved).
	release := f.sd.Hold(s1)
	enqueued := make(chan error, 1)
	go func() { enqueued <- f.k.Spin(s1, time.Millisecond) }()
	select {
	case err := <-enqueued:
		f.must(err)
	case <-time.After(10 * time.Second):
		t.Fatal("enqueuing on a held stream blocked the host")
	}
	f.must(f.k.Spin(s2, time.Millisecond))
	f.must(s2.Synchronize())
	wantErr(t, "held stream", s1.Query(), gpu.ErrNotReady)
	release()
	f.must(s1.Synchronize())

	// A wait holds the stream until the event completes.
	e := f.event(false)
	release = f.sd.Hold(s1)
	f.must(e.Record(s1))
	f.must(s2.WaitEvent(e))
	f.must(f.dev.MemsetD8Async(f.mallocAsync(256, s2), 0, 256, s2))
	time.Sleep(20 * time.Millisecond)
	wantErr(t, "stream waiting on a held event", s2.Query(), gpu.ErrNotReady)
	release()
	f.must(s2.Synchronize())
	// Re-recording moves the event.
	release = f.sd.Hold(s1)
	f.must(e.Record(s2))
	f.must(e.Synchronize())
	f.must(e.Record(s1))
	wantErr(t, "re-recorded on the held stream", e.Query(), gpu.ErrNotReady)
	release()
	f.must(e.Synchronize())
}
