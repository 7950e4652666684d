package devarena

// Tests that need the simulator's hooks: the happens-before relation
// between stream operations, and fault injection.

import (
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func newSim(t *testing.T) *sim.Device {
	t.Helper()
	return simDevice(t).(*sim.Device)
}

// TestResetOrdering: Reset is ordered after the arena's own stream, and
// after another stream only through an event. Kernels of two streams may
// share an arena within an epoch (their adds are atomic); it is the reset
// that needs the order.
func TestResetOrdering(t *testing.T) {
	d := newSim(t)
	k := loadKernels(t, d)
	s1, s2 := newStream(t, d), newStream(t, d)
	g := newGuarded(d)
	a := newArena(t, g, s1, Config{Size: 4096, Align: 8})
	defer closeArena(t, g, a)
	created := d.LastOp(s1)
	ready := newEvent(t, d)
	if err := ready.Record(s1); err != nil {
		t.Fatal(err)
	}

	release := d.Hold(s1) // a long kernel: nothing below runs on s1 until release
	defer release()
	if err := k.Bump(s1, a, 10, 8); err != nil {
		t.Fatal(err)
	}
	ownKernel := d.LastOp(s1)

	// Another stream uses the arena once it is created...
	if err := s2.WaitEvent(ready); err != nil {
		t.Fatal(err)
	}
	if err := k.Bump(s2, a, 10, 8); err != nil {
		t.Fatal(err)
	}
	otherKernel := d.LastOp(s2)
	if !d.HappensBefore(created, otherKernel) {
		t.Error("the other stream's kernel is not ordered after the arena's creation")
	}
	done := newEvent(t, d)
	if err := done.Record(s2); err != nil {
		t.Fatal(err)
	}
	// ...and later work of that stream is not ordered with the reset.
	scratch, err := d.MallocAsync(256, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeAsync(scratch, s2)
	if err := d.MemsetD8Async(scratch, 0, 256, s2); err != nil {
		t.Fatal(err)
	}
	unrelated := d.LastOp(s2)

	if err := s1.WaitEvent(done); err != nil {
		t.Fatal(err)
	}
	if err := a.Reset(); err != nil {
		t.Fatal(err)
	}
	reset := d.LastOp(s1)
	for _, c := range []struct {
		name string
		a, b sim.OpID
		want bool
	}{
		{"own stream's kernel before reset", ownKernel, reset, true},
		{"other stream's kernel before reset (event)", otherKernel, reset, true},
		{"other stream's later work and reset", unrelated, reset, false},
		{"reset and other stream's later work", reset, unrelated, false},
	} {
		if got := d.HappensBefore(c.a, c.b); got != c.want {
			t.Errorf("%s: HappensBefore = %v, want %v", c.name, got, c.want)
		}
	}

	release()
	st, err := a.Stats()
	if err != nil || st != (Stats{}) {
		t.Fatalf("after both kernels and the reset: %+v, %v; want zero", st, err)
	}
}

func newEvent(t *testing.T, dev gpu.Device) gpu.Event {
	t.Helper()
	e, err := dev.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Destroy() })
	return e
}

// TestFaults: a failing driver call in New, Reset, Stats or Close is
// returned wrapped, loses no memory, and leaves the arena usable.
func TestFaults(t *testing.T) {
	d := newSim(t)
	s := newStream(t, d)
	g := newGuarded(d)

	t.Run("New/copy", func(t *testing.T) {
		d.FailNext(sim.OpCopy, 1, gpu.ErrLaunchFailed)
		if a, err := New(g, s, Config{Size: 64}); !errors.Is(err, gpu.ErrLaunchFailed) || a != nil {
			t.Fatalf("New with a failing copy: %v, %v", a, err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if g.liveBlocks() != 0 {
			t.Fatalf("New's failure leaked %d blocks", g.liveBlocks())
		}
	})
	t.Run("New/allocate", func(t *testing.T) {
		d.FailNext(sim.OpMallocAsync, 1, gpu.ErrOutOfMemory)
		if _, err := New(g, s, Config{Size: 64}); !errors.Is(err, gpu.ErrOutOfMemory) {
			t.Fatalf("New with a failing allocation: %v", err)
		}
	})

	stats := func(a *Arena) error { _, err := a.Stats(); return err }
	for _, c := range []struct {
		name string
		op   sim.Op
		call func(a *Arena) error
	}{
		{"Reset/memset", sim.OpMemset, (*Arena).Reset},
		{"Stats/pinned", sim.OpMallocHost, stats},
		{"Stats/event", sim.OpEventCreate, stats},
		{"Stats/copy", sim.OpCopy, stats},
		{"Stats/record", sim.OpEventRecord, stats},
		{"Stats/wait", sim.OpEventSynchronize, stats},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newArena(t, g, s, Config{Size: 64})
			defer closeArena(t, g, a)
			d.FailNext(c.op, 1, gpu.ErrInvalidValue)
			if err := c.call(a); !errors.Is(err, gpu.ErrInvalidValue) {
				t.Fatalf("with a failing %v: %v, want the injected error", c.op, err)
			}
			if err := c.call(a); err != nil {
				t.Fatalf("second try: %v", err)
			}
			if st, err := a.Stats(); err != nil || st != (Stats{}) {
				t.Fatalf("after the fault: %+v, %v", st, err)
			}
		})
	}
	a := newArena(t, g, s, Config{Size: 64})
	defer closeArena(t, g, a)
	t.Run("Close/free", func(t *testing.T) {
		d.FailNext(sim.OpFreeAsync, 1, gpu.ErrInvalidValue)
		if err := a.Close(); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Fatalf("Close with a failing free: %v", err)
		}
		if a.Closed() || g.liveBlocks() != 1 {
			t.Fatalf("after a failed free: closed %v, %d live blocks", a.Closed(), g.liveBlocks())
		}
		// The deferred closeArena retries and must succeed.
	})
}

// TestIllegalHeader: a kernel handed a pointer that is not a header fails
// its launch (an illegal address, or a header that does not check out) and
// writes nothing; the host-side checks (Tag, Bump) are bypassed here.
func TestIllegalHeader(t *testing.T) {
	d := newSim(t)
	k := loadKernels(t, d)
	g := newGuarded(d)
	s0 := newStream(t, d)
	junk, err := g.Allocate(4096, s0) // all poison: alignment 0xA5A5A5A5
	if err != nil {
		t.Fatal(err)
	}
	defer g.Deallocate(junk, 4096, s0)
	if err := s0.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		hdr  gpu.DevicePtr
		want error
	}{
		{"unmapped", 0x1000, gpu.ErrIllegalAddress},
		{"misaligned", junk + 4, gpu.ErrMisalignedAddress},
		{"not a header", junk, ErrInvalidAlign},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A stream of its own: the failure is sticky.
			s, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			if err := d.Launch(k.bump, gpu.Dim3{X: 1}, gpu.Dim3{X: 32}, 0, s, c.hdr, uint64(32), uint64(8)); err != nil {
				t.Fatalf("launch: %v", err)
			}
			if err := s.Synchronize(); !errors.Is(err, c.want) {
				t.Fatalf("kernel on %#x: %v, want %v", c.hdr, err, c.want)
			}
		})
	}
	b := readBack(t, d, s0, junk, 4096)
	if i := notPoison(b); i >= 0 {
		t.Errorf("byte %d of the junk header written", i)
	}
}

// TestRegionStreamOrder: the region is allocated, initialised, reset and
// freed in order on the arena's stream, none of it waiting for the stream:
// with the stream held by a long kernel, New, a kernel, Reset and Close all
// return at once, nothing they enqueued has run, and each is ordered after
// the one before; the free is ordered after the kernel that used the region.
func TestRegionStreamOrder(t *testing.T) {
	d := newSim(t)
	k := loadKernels(t, d)
	s := newStream(t, d)
	g := newGuarded(d)
	release := d.Hold(s)
	defer release()
	held := d.LastOp(s)

	returned := make(chan []sim.OpID, 1)
	go func() {
		var ops []sim.OpID
		defer func() { returned <- ops }()
		a, err := New(g, s, Config{Size: 4096, Align: 8})
		if err != nil {
			t.Errorf("New: %v", err)
			return
		}
		ops = append(ops, d.LastOp(s))
		if err := k.Bump(s, a, 100, 8); err != nil {
			t.Errorf("Bump: %v", err)
			return
		}
		ops = append(ops, d.LastOp(s))
		if err := a.Reset(); err != nil {
			t.Errorf("Reset: %v", err)
			return
		}
		ops = append(ops, d.LastOp(s))
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
			return
		}
		ops = append(ops, d.LastOp(s))
	}()
	var ops []sim.OpID
	select {
	case ops = <-returned:
	case <-time.After(30 * time.Second):
		release()
		<-returned // no t.Errorf from the goroutine after the test ends
		t.Fatal("New, Reset or Close waited for the held stream")
	}
	if t.Failed() {
		return
	}
	names := []string{"hold", "header copy", "kernel", "reset", "free"}
	ops = append([]sim.OpID{held}, ops...)
	for i := 1; i < len(ops); i++ {
		if !d.HappensBefore(ops[i-1], ops[i]) {
			t.Errorf("%s is not ordered before %s (was it enqueued on the arena's stream?)", names[i-1], names[i])
		}
		if d.Completed(ops[i]) {
			t.Errorf("%s ran while the stream was held", names[i])
		}
	}
	release()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, op := range ops {
		if !d.Completed(op) {
			t.Errorf("%s did not run after the release", names[i])
		}
	}
	if n := g.liveBlocks(); n != 0 {
		t.Errorf("%d blocks live after Close", n)
	}
}
