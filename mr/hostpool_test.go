package mr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func hostPoolDevice(t *testing.T, cfg sim.Config) (*sim.Device, gpu.Stream, gpu.Stream) {
	t.Helper()
	dev, err := sim.New(cfg).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	return dev.(*sim.Device), s1, s2
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestHostPoolSizeClasses(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	for _, tc := range []struct{ n, reserved int }{
		{1, 4 << 10},
		{4 << 10, 4 << 10},
		{4<<10 + 1, 8 << 10},
		{1 << 20, 1 << 20},
		{2 << 20, 2 << 20},
		{2<<20 + 1, 4 << 20},
		{5 << 20, 6 << 20},
	} {
		b := must[[]byte](t)(mr.AllocateHost[byte](p, tc.n, s))
		if len(b) != tc.n || cap(b) != tc.n {
			t.Errorf("Allocate(%d): len %d cap %d", tc.n, len(b), cap(b))
		}
		if u := p.Usage(); u.Used != uint64(tc.n) || u.Reserved != uint64(tc.reserved) {
			t.Errorf("Allocate(%d): usage %+v, want used %d reserved %d", tc.n, u, tc.n, tc.reserved)
		}
		if err := mr.FreeHost(p, b, s); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ReleaseContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
			t.Errorf("after Release: %+v", u)
		}
	}
}

func TestHostPoolZeroAndNegative(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	if b, err := mr.AllocateHost[byte](p, 0, s); b != nil || err != nil {
		t.Errorf("Allocate(0) = %v, %v; want nil, nil", b, err)
	}
	if _, err := mr.AllocateHost[byte](p, -1, s); !errors.Is(err, mr.ErrInvalidSize) {
		t.Errorf("Allocate(-1): %v, want ErrInvalidSize", err)
	}
	if _, err := mr.AllocateHost[float64](p, -1, s); !errors.Is(err, mr.ErrInvalidSize) {
		t.Errorf("AllocateHost(-1): %v, want ErrInvalidSize", err)
	}
	if err := mr.FreeHost[byte](p, nil, s); err != nil {
		t.Errorf("Free(nil): %v", err)
	}
	if u := p.Usage(); u != (mr.Usage{}) {
		t.Errorf("usage %+v, want zero", u)
	}
}

// TestHostPoolReuse follows one block through the two ways to allocate
// while the copy that used it is held back on its stream.
func TestHostPoolReuse(t *testing.T) {
	dev, s1, s2 := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	d := must[gpu.DevicePtr](t)(dev.Malloc(1 << 20))

	// A completed free serves any stream.
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 1000, s1))
	if err := mr.FreeHost(p, b, s1); err != nil {
		t.Fatal(err)
	}
	if err := s1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	b2 := must[[]byte](t)(mr.AllocateHost[byte](p, 1000, s2))
	if &b2[0] != &b[0] {
		t.Fatal("a completed block was not reused on another stream")
	}

	// A free whose copy has not run: not for the host, on any stream.
	release := dev.Hold(s2)
	if err := dev.CopyHtoDAsync(d, b2, s2); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, b2, s2); err != nil {
		t.Fatal(err)
	}
	b3 := must[[]byte](t)(mr.AllocateHost[byte](p, 1000, s2))
	if &b3[0] == &b2[0] {
		t.Fatal("Allocate reused a block whose copy is still queued")
	}
	// Ordered on the same stream: at once, no wait.
	b4 := must[[]byte](t)(allocOrdered(p, 1000, s2))
	if &b4[0] != &b2[0] {
		t.Fatal("AllocateOrdered did not reuse the block freed on its stream")
	}
	if err := mr.FreeHost(p, b4, s2); err != nil {
		t.Fatal(err)
	}
	// Ordered on another stream: after a wait on the free's event.
	b5 := must[[]byte](t)(allocOrdered(p, 1000, s1))
	if &b5[0] != &b2[0] {
		t.Fatal("AllocateOrdered did not reuse the block freed on another stream")
	}
	if err := s1.Query(); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("s1 must wait on the held stream's free: Query = %v, want ErrNotReady", err)
	}
	release()
	for _, x := range [][]byte{b3, b5} {
		if err := mr.FreeHost(p, x, s1); err != nil {
			t.Fatal(err)
		}
	}
	want := mr.HostPoolStats{Hits: 3, Waits: 1, Misses: 2}
	if st := p.Stats(); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if u := p.Usage(); u.Used != 0 || u.Reserved != 2*(4<<10) || u.PeakUsed != 2000 {
		t.Errorf("usage %+v", u)
	}
	n, err := p.ReleaseContext(context.Background())
	if err != nil || n != 2*(4<<10) {
		t.Errorf("Release = %d, %v", n, err)
	}
	if st := p.Stats(); st.Released != 2 {
		t.Errorf("released %d blocks, want 2", st.Released)
	}
}

func TestHostPoolBadFrees(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{Devices: 2})
	other, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	os := must[gpu.Stream](t)(other.NewStream())
	p := mr.NewHostPool(dev)
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 100, s))
	freed := must[[]byte](t)(mr.AllocateHost[byte](p, 100, s))
	if err := mr.FreeHost(p, freed, s); err != nil {
		t.Fatal(err)
	}
	pageable := make([]byte, 100)
	for _, tc := range []struct {
		name string
		buf  []byte
		s    gpu.Stream
		want error
	}{
		{"pageable memory", pageable, s, mr.ErrUnknownPointer},
		{"interior sub-slice", b[8:], s, mr.ErrSubSlice},
		{"prefix sub-slice", b[:50], s, mr.ErrSubSlice},
		{"double free", freed, s, mr.ErrDoubleFree},
		{"nil stream", b, nil, gpu.ErrInvalidHandle},
		{"stream of another device", b, os, gpu.ErrWrongDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, stats := p.Usage(), p.Stats()
			if err := mr.FreeHost(p, tc.buf, tc.s); !errors.Is(err, tc.want) {
				t.Errorf("Free: %v, want %v", err, tc.want)
			}
			if u := p.Usage(); u != before {
				t.Errorf("usage changed: %+v, was %+v", u, before)
			}
			if st := p.Stats(); st != stats {
				t.Errorf("stats changed: %+v, was %+v", st, stats)
			}
		})
	}
	if _, err := mr.AllocateHost[byte](p, 1, nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Allocate on nil stream: %v", err)
	}
	if _, err := mr.AllocateHost[byte](p, 1, os); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("Allocate on another device's stream: %v", err)
	}
	// b is still live and frees normally.
	if err := mr.FreeHost(p, b, s); err != nil {
		t.Errorf("Free of the live slice after the bad frees: %v", err)
	}
	// A released block's address is unknown, not a double free.
	if _, err := p.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, b, s); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Errorf("Free after Release: %v, want ErrUnknownPointer", err)
	}
}

func TestHostPoolFreeRecordFails(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 100, s))
	release := dev.Hold(s) // work is pending: the free records an event
	boom := errors.New("injected")
	dev.FailNext(sim.OpEventRecord, 1, boom)
	if err := mr.FreeHost(p, b, s); !errors.Is(err, boom) {
		t.Fatalf("Free: %v, want the record's error", err)
	}
	if u := p.Usage(); u.Used != 100 {
		t.Errorf("a failed free changed usage: %+v", u)
	}
	release()
	if err := mr.FreeHost(p, b, s); err != nil {
		t.Errorf("Free after the failed one: %v", err)
	}
}

func TestHostPoolOutOfMemory(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{HostCapacity: 64 << 10})
	p := mr.NewHostPool(dev)
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 32<<10, s))
	_, err := mr.AllocateHost[byte](p, 64<<10, s)
	var oom *mr.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("Allocate past the capacity: %v, want *OutOfMemoryError", err)
	}
	if oom.Requested != 64<<10 || oom.Used != 32<<10 || oom.Reserved != 32<<10 {
		t.Errorf("OutOfMemoryError %+v", oom)
	}
	// A completed cached block of another class is given back to make room.
	if err := mr.FreeHost(p, b, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	c := must[[]byte](t)(mr.AllocateHost[byte](p, 64<<10, s))
	if u := p.Usage(); u.Used != 64<<10 || u.Reserved != 64<<10 {
		t.Errorf("usage %+v after the retry", u)
	}
	if err := mr.FreeHost(p, c, s); err != nil {
		t.Fatal(err)
	}
}

// TestHostPoolTyped runs on testdev's device (the GPU with
// STREAMALLOC_DEVICE=cuda).
func TestHostPoolTyped(t *testing.T) {
	dev := testdev.Device(t)
	s := must[gpu.Stream](t)(dev.NewStream())
	p := mr.NewHostPool(dev)
	v := must[[]float32](t)(mr.AllocateHost[float32](p, 1000, s))
	if len(v) != 1000 || p.Usage().Used != 4000 {
		t.Fatalf("len %d, usage %+v", len(v), p.Usage())
	}
	for i := range v {
		v[i] = float32(i)
	}
	d := must[gpu.DevicePtr](t)(dev.Malloc(4000))
	t.Cleanup(func() { dev.Free(d) })
	if err := dev.CopyHtoDAsync(d, mr.HostBytes(v), s); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, v, s); err != nil {
		t.Fatal(err)
	}
	w := must[[]float32](t)(mr.AllocateHost[float32](p, 1000, s))
	if err := dev.CopyDtoHAsync(mr.HostBytes(w), d, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		if w[i] != float32(i) {
			t.Fatalf("w[%d] = %v", i, w[i])
		}
	}
	if err := mr.FreeHost(p, w[1:], s); !errors.Is(err, mr.ErrSubSlice) {
		t.Errorf("FreeHost of a sub-slice: %v", err)
	}
	if err := mr.FreeHost(p, w, s); err != nil {
		t.Fatal(err)
	}
}

// TestHostPoolCopies runs 16 goroutines on 4 streams through one pool:
// each stages patterns to the device and back through pooled buffers,
// freeing them in stream order and checking every byte. Under -race on
// the simulator, a block handed out before the copies that used it are
// done (Allocate) or ordered (AllocateOrdered) is a reported data race.
//
// It runs on testdev's device: the GPU with STREAMALLOC_DEVICE=cuda.
func TestHostPoolCopies(t *testing.T) {
	dev := testdev.Device(t)
	p := mr.NewHostPool(dev)
	streams := make([]gpu.Stream, 4)
	for i := range streams {
		streams[i] = must[gpu.Stream](t)(dev.NewStream())
	}
	const goroutines, rounds = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- hostCopies(dev, p, streams[g%len(streams)], streams[(g+1)%len(streams)], g, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	st := p.Stats()
	if st.Hits == 0 || st.Misses == 0 {
		t.Errorf("stats %+v: want both reuse and growth", st)
	}
	u := p.Usage()
	if u.Used != 0 || u.PeakUsed == 0 || u.Reserved == 0 {
		t.Errorf("usage %+v", u)
	}
	if _, err := p.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Reserved != 0 {
		t.Errorf("reserved %d after Release", u.Reserved)
	}
}

// hostCopies is one goroutine of TestHostPoolCopies: per round, a pattern
// goes host → device through a host-ready block, device → device through
// an ordered block on another stream, and back to the host.
func hostCopies(dev gpu.Device, p *mr.HostPool, s, s2 gpu.Stream, g, rounds int) error {
	d1, err := dev.Malloc(64 << 10)
	if err != nil {
		return err
	}
	d2, err := dev.Malloc(64 << 10)
	if err != nil {
		return err
	}
	for r := range rounds {
		n := 1 + (g*7919+r*104729)%(60<<10)
		src, err := mr.AllocateHost[byte](p, n, s)
		if err != nil {
			return err
		}
		for i := range src {
			src[i] = byte(g*31 + r*7 + i)
		}
		want := bytes.Clone(src)
		if err := dev.CopyHtoDAsync(d1, src, s); err != nil {
			return err
		}
		if err := mr.FreeHost(p, src, s); err != nil {
			return err
		}
		// Through an ordered block on s: device-only use, no host access.
		mid, err := allocOrdered(p, n, s)
		if err != nil {
			return err
		}
		if err := dev.CopyDtoHAsync(mid, d1, s); err != nil {
			return err
		}
		if err := dev.CopyHtoDAsync(d2, mid, s); err != nil {
			return err
		}
		if err := mr.FreeHost(p, mid, s); err != nil {
			return err
		}
		// Back on the other stream, after s.
		e, err := dev.NewEvent(false)
		if err != nil {
			return err
		}
		if err := e.Record(s); err != nil {
			return err
		}
		if err := s2.WaitEvent(e); err != nil {
			return err
		}
		out, err := allocOrdered(p, n, s2)
		if err != nil {
			return err
		}
		if err := dev.CopyDtoHAsync(out, d2, s2); err != nil {
			return err
		}
		// d1 and d2 are rewritten next round on s: order s after s2.
		if err := e.Record(s2); err != nil {
			return err
		}
		if err := s.WaitEvent(e); err != nil {
			return err
		}
		if err := e.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(out, want) {
			return fmt.Errorf("goroutine %d round %d: %d bytes differ", g, r, n)
		}
		if err := mr.FreeHost(p, out, s2); err != nil {
			return err
		}
		if err := e.Destroy(); err != nil {
			return err
		}
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if err := dev.Free(d1); err != nil {
		return err
	}
	return dev.Free(d2)
}

// TestHostPoolOrderedAcrossStreams hands a block whose copy is held back on
// one stream to an ordered request on another: the second stream's write
// into it must wait for the first stream's read. Without the wait the
// bytes the first copy delivers are the second's (and -race reports it).
func TestHostPoolOrderedAcrossStreams(t *testing.T) {
	dev, s1, s2 := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	const n = 8 << 10
	dst := must[gpu.DevicePtr](t)(dev.Malloc(n))
	other := must[gpu.DevicePtr](t)(dev.Malloc(n))
	if err := dev.MemsetD8Async(other, 0xee, n, s2); err != nil {
		t.Fatal(err)
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	m := must[[]byte](t)(mr.AllocateHost[byte](p, n, s1))
	for i := range m {
		m[i] = byte(i % 251)
	}
	want := bytes.Clone(m)
	release := dev.Hold(s1)
	if err := dev.CopyHtoDAsync(dst, m, s1); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, m, s1); err != nil {
		t.Fatal(err)
	}
	m2 := must[[]byte](t)(allocOrdered(p, n, s2))
	if &m2[0] != &m[0] {
		t.Fatal("the ordered request did not get the cached block")
	}
	if err := dev.CopyDtoHAsync(m2, other, s2); err != nil {
		t.Fatal(err)
	}
	release()
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := dev.CopyDtoHAsync(got, dst, s1); err != nil {
		t.Fatal(err)
	}
	if err := s1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the copy on s1 read bytes written by s2 after the free")
	}
	if err := mr.FreeHost(p, m2, s2); err != nil {
		t.Fatal(err)
	}
}

// TestHostPoolRecordStream frees on an idle stream a block that a held copy
// on another stream still reads: without RecordStream the block would be
// ready at once; with it, Allocate must not hand it out until that copy
// is done.
func TestHostPoolRecordStream(t *testing.T) {
	dev, s1, s2 := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	d := must[gpu.DevicePtr](t)(dev.Malloc(4096))
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 4096, s1))
	release := dev.Hold(s2)
	if err := dev.CopyHtoDAsync(d, b, s2); err != nil {
		t.Fatal(err)
	}
	if err := p.RecordStream(b, s2); err != nil {
		t.Fatal(err)
	}
	if err := p.RecordStream(b, s2); err != nil { // once per stream is kept
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		buf  []byte
		s    gpu.Stream
		want error
	}{
		{"pageable memory", make([]byte, 8), s2, mr.ErrUnknownPointer},
		{"sub-slice", b[1:], s2, mr.ErrSubSlice},
		{"nil stream", b, nil, gpu.ErrInvalidHandle},
	} {
		if err := p.RecordStream(tc.buf, tc.s); !errors.Is(err, tc.want) {
			t.Errorf("RecordStream(%s): %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := mr.FreeHost(p, b, s1); err != nil { // s1 is idle
		t.Fatal(err)
	}
	c := must[[]byte](t)(mr.AllocateHost[byte](p, 4096, s1))
	if &c[0] == &b[0] {
		t.Fatal("a block still read by a copy on a recorded stream was handed out")
	}
	release()
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	e := must[[]byte](t)(mr.AllocateHost[byte](p, 4096, s1))
	if &e[0] != &b[0] {
		t.Fatal("the block was not reused once the recorded stream's copy completed")
	}
	if err := p.RecordStream(b, s2); err != nil {
		t.Fatal(err) // e is b again: live
	}
	for _, x := range [][]byte{c, e} {
		if err := mr.FreeHost(p, x, s1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RecordStream(c, s2); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("RecordStream of a freed slice: %v, want ErrDoubleFree", err)
	}
}

// ReleaseContext waits for the copies before a free without holding the
// pool, gives up when its context ends changing nothing, and releases the
// block once the copies are done.
func TestHostPoolReleaseContext(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	p := mr.NewHostPool(dev)
	d := must[gpu.DevicePtr](t)(dev.Malloc(64 << 10))
	defer dev.Free(d)
	b := must[[]byte](t)(mr.AllocateHost[byte](p, 64<<10, s))
	release := dev.Hold(s)
	if err := dev.CopyHtoDAsync(d, b, s); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, b, s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	n, err := p.ReleaseContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || n != 0 {
		t.Fatalf("ReleaseContext while the copy is held: %d, %v; want 0, DeadlineExceeded", n, err)
	}
	if u, st := p.Usage(), p.Stats(); u.Reserved != 64<<10 || st.Released != 0 {
		t.Fatalf("after a cancelled release: reserved %d, released %d blocks; want 64 KiB kept", u.Reserved, st.Released)
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if _, err := p.ReleaseContext(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("ReleaseContext with a cancelled context: %v", err)
	}
	release()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	n, err = p.ReleaseContext(ctx2)
	if err != nil || n != 64<<10 {
		t.Fatalf("ReleaseContext after the copy: %d, %v; want 64 KiB", n, err)
	}
	if u := p.Usage(); u.Reserved != 0 || p.Stats().Released != 1 {
		t.Errorf("after release: %+v, %+v", u, p.Stats())
	}
}

// allocOrdered is AllocateOrdered with the slice of its memory.
func allocOrdered(p *mr.HostPool, n int, s gpu.Stream) ([]byte, error) {
	ptr, err := p.AllocateOrdered(n, s)
	if err != nil {
		return nil, err
	}
	return p.Bytes(ptr, n)
}
