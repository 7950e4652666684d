package mr_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// newSimVirtual is a Virtual on a simulated device of capacity bytes, with
// two streams.
func newSimVirtual(t *testing.T, capacity uint64) (*sim.Device, *mr.Virtual, [2]gpu.Stream) {
	t.Helper()
	return newSimVirtualOpts(t, capacity, mr.VirtualOptions{})
}

// newSimVirtualOpts is newSimVirtual with options (ReserveSize 64 MiB
// unless set).
func newSimVirtualOpts(t *testing.T, capacity uint64, opts mr.VirtualOptions) (*sim.Device, *mr.Virtual, [2]gpu.Stream) {
	t.Helper()
	d, err := sim.New(sim.Config{Capacity: capacity}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	dev := d.(*sim.Device)
	if opts.ReserveSize == 0 {
		opts.ReserveSize = 64 << 20
	}
	v := newVirtual(t, dev, opts)
	var ss [2]gpu.Stream
	for i := range ss {
		if ss[i], err = dev.NewStream(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss[i].Destroy() })
	}
	return dev, v, ss
}

// inUse is the device memory the simulator counts as taken.
func inUse(t *testing.T, dev gpu.Device) uint64 {
	t.Helper()
	free, total, err := dev.MemGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	return total - free
}

// TestVirtualGrowableCommit: a growable allocation commits and decommits
// granules anywhere in its range; a decommit is unmapped only after its
// stream's work; the counters and the device agree on what is mapped.
func TestVirtualGrowableCommit(t *testing.T) {
	dev, v, ss := newSimVirtual(t, 64<<20)
	s := ss[0]
	g := v.GrowGranularity()
	p, err := v.AllocateGrowable(2*g, 16*g, s)
	if err != nil {
		t.Fatal(err)
	}
	st := v.Stats()
	if st.Growable != 1 || st.Mapped != uint64(2*g) || st.Live != uint64(2*g) || st.Reserved != 64<<20+uint64(16*g) {
		t.Fatalf("after AllocateGrowable: %+v", st)
	}
	// A hole: granules 5 and 6, then the one after the first two.
	if err := v.Commit(p, 5*g, 2*g, s); err != nil {
		t.Fatal(err)
	}
	if err := v.Commit(p, 2*g, g, s); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, dev); got != uint64(5*g) || v.Stats().Mapped != uint64(5*g) {
		t.Fatalf("device %d, mapped %d; want %d", got, v.Stats().Mapped, 5*g)
	}
	// The committed granules take a set; one over an unmapped granule
	// (3) is refused, as the card refuses it.
	if err := dev.MemsetD8Async(p+gpu.DevicePtr(5*g), 7, 2*g, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	err = dev.MemsetD8Async(p+gpu.DevicePtr(3*g), 7, g, s)
	if err == nil {
		err = s.Synchronize()
	}
	if !errors.Is(err, gpu.ErrInvalidValue) && !errors.Is(err, gpu.ErrIllegalAddress) {
		t.Fatalf("a set over an unmapped granule: got %v, want ErrInvalidValue or ErrIllegalAddress", err)
	}
	// A decommit behind held work stays mapped until the work is done.
	s = ss[1]
	release := dev.Hold(s)
	if err := v.Decommit(p, 5*g, 2*g, s); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != uint64(5*g) || st.Pending != uint64(2*g) || st.Live != uint64(3*g) {
		t.Fatalf("decommit behind held work: %+v", st)
	}
	release()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != uint64(3*g) || st.Pending != 0 || st.PeakMapped != uint64(5*g) {
		t.Fatalf("after the work: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(3*g) {
		t.Fatalf("device memory in use %d, want %d", got, 3*g)
	}
	// Freed whole, at its limit: every granule goes, then the range.
	if err := v.Deallocate(p, 16*g, s); err != nil {
		t.Fatal(err)
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != 0 || st.Growable != 0 || st.Reserved != 64<<20 || st.Live != 0 {
		t.Fatalf("after the free: %+v", st)
	}
}

// TestVirtualGrowableBadInput: each bad call is its typed error and
// changes nothing.
func TestVirtualGrowableBadInput(t *testing.T) {
	_, v, ss := newSimVirtual(t, 64<<20)
	s := ss[0]
	g := v.GrowGranularity()
	p, err := v.AllocateGrowable(g, 8*g, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"AllocateGrowable size 0", func() error { _, err := v.AllocateGrowable(0, g, s); return err }, mr.ErrInvalidSize},
		{"AllocateGrowable size not granules", func() error { _, err := v.AllocateGrowable(g/2, g, s); return err }, mr.ErrInvalidSize},
		{"AllocateGrowable size above limit", func() error { _, err := v.AllocateGrowable(2*g, g, s); return err }, mr.ErrInvalidSize},
		{"AllocateGrowable negative", func() error { _, err := v.AllocateGrowable(-g, g, s); return err }, mr.ErrInvalidSize},
		{"AllocateGrowable nil stream", func() error { _, err := v.AllocateGrowable(g, g, nil); return err }, gpu.ErrInvalidHandle},
		{"Commit unknown pointer", func() error { return v.Commit(p+gpu.DevicePtr(g), 0, g, s) }, mr.ErrUnknownPointer},
		{"Commit committed granule", func() error { return v.Commit(p, 0, g, s) }, gpu.ErrInvalidValue},
		{"Commit beyond the range", func() error { return v.Commit(p, 8*g, g, s) }, mr.ErrInvalidSize},
		{"Commit misaligned", func() error { return v.Commit(p, g/2, g, s) }, mr.ErrInvalidSize},
		{"Commit empty", func() error { return v.Commit(p, g, 0, s) }, mr.ErrInvalidSize},
		{"Decommit unmapped granule", func() error { return v.Decommit(p, 2*g, g, s) }, gpu.ErrInvalidValue},
		{"Decommit unknown pointer", func() error { return v.Decommit(p+1, 0, g, s) }, mr.ErrUnknownPointer},
		{"Deallocate at the committed size", func() error { return v.Deallocate(p, g, s) }, mr.ErrSizeMismatch},
	} {
		before := v.Stats()
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if after := v.Stats(); after != before {
			t.Errorf("%s changed the counters: %+v -> %+v", c.name, before, after)
		}
	}
	if err := v.Deallocate(p, 8*g, s); err != nil {
		t.Fatal(err)
	}
	if err := v.Deallocate(p, 8*g, s); !errors.Is(err, mr.ErrDoubleFree) && !errors.Is(err, mr.ErrUnknownPointer) {
		t.Fatalf("second free: got %v, want ErrDoubleFree or ErrUnknownPointer", err)
	}
}

// handOffHeld grows range a to three granules and b to one, holds a's
// stream, and hands two of a's granules to b: decommitted from a's
// second granule on a's stream and committed at b's second on b's, so
// the decommit's work waits behind the hold. It returns a, b and the
// function that lets a's stream run.
func handOffHeld(t *testing.T, dev *sim.Device, v *mr.Virtual, ss [2]gpu.Stream) (a, b gpu.DevicePtr, release func()) {
	t.Helper()
	g := v.GrowGranularity()
	a, err := v.AllocateGrowable(3*g, 4*g, ss[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err = v.AllocateGrowable(g, 4*g, ss[1])
	if err != nil {
		t.Fatal(err)
	}
	release = dev.Hold(ss[0])
	if err := v.Decommit(a, g, 2*g, ss[0]); err != nil {
		release()
		t.Fatal(err)
	}
	if err := v.Commit(b, g, 2*g, ss[1]); err != nil {
		release()
		t.Fatalf("commit with a's decommitted memory: %v", err)
	}
	return a, b, release
}

// TestVirtualGrowableHandoff: memory one range decommits goes to another
// range's commit while the decommit's work still runs, after the
// committing stream waits for it: the device never holds both, and the
// first range cannot commit those addresses again (ErrGrowBlocked) until
// the work is done.
func TestVirtualGrowableHandoff(t *testing.T) {
	dev, v, ss := newSimVirtual(t, 8<<20) // four granules
	g := v.GrowGranularity()
	// The device is full: b grows only with a's memory.
	a, b, release := handOffHeld(t, dev, v, ss)
	st := v.Stats()
	if st.Handoffs != 2 || st.Mapped != uint64(4*g) || st.Pending != 0 {
		t.Fatalf("after the handoff: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(4*g) {
		t.Fatalf("device memory in use %d, want %d", got, 4*g)
	}
	// ss[1] waits for the decommit: its work cannot run before ss[0]'s.
	if err := dev.MemsetD8Async(b+gpu.DevicePtr(g), 1, 2*g, ss[1]); err != nil {
		t.Fatal(err)
	}
	if err := v.Commit(a, g, g, ss[0]); !errors.Is(err, mr.ErrGrowBlocked) {
		t.Fatalf("commit of addresses still mapped for b: got %v, want ErrGrowBlocked", err)
	}
	release()
	if err := ss[1].Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	// a's old addresses are unmapped now; a commit there needs memory the
	// device does not have.
	if err := v.Commit(a, g, g, ss[0]); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("commit on a full device: got %v, want ErrOutOfMemory", err)
	}
	for _, x := range []gpu.DevicePtr{a, b} {
		if err := v.Deallocate(x, 4*g, ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, dev); got != 0 || v.Stats().Mapped != 0 {
		t.Fatalf("after the frees: device %d, mapped %d", got, v.Stats().Mapped)
	}
}

// TestVirtualGrowableWaitForDecommits: with WaitForDecommits, a commit of
// addresses whose memory went to another range while their decommit's
// work still runs waits for that work on the host, unmaps them and
// commits, where without it the commit is refused
// (TestVirtualGrowableHandoff); the memory it waited for stays with the
// range it went to.
func TestVirtualGrowableWaitForDecommits(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 10<<20, mr.VirtualOptions{WaitForDecommits: true}) // five granules
	g := v.GrowGranularity()
	a, b, release := handOffHeld(t, dev, v, ss)
	defer release()
	if st := v.Stats(); st.Handoffs != 2 || st.Mapped != uint64(4*g) || st.HostWaits != 0 {
		t.Fatalf("after the handoff: %+v", st)
	}
	done := make(chan error, 1)
	go func() { done <- v.Commit(a, g, g, ss[0]) }()
	select {
	case err := <-done:
		t.Fatalf("commit of addresses still mapped for b returned %v while the decommit's work was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("commit after the decommit's work: %v", err)
	}
	// a's first two granules and its new one, b's three (two of them
	// a's old memory): five granules, the device's all.
	st := v.Stats()
	if st.HostWaits != 1 || st.Live != uint64(5*g) || st.Mapped != uint64(5*g) {
		t.Fatalf("after the commit that waited: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(5*g) {
		t.Fatalf("device memory in use %d, want %d", got, 5*g)
	}
	// The new granule is a's: writable on its stream.
	if err := dev.MemsetD8Async(a+gpu.DevicePtr(g), 2, g, ss[0]); err != nil {
		t.Fatal(err)
	}
	// a's third granule went to b as well; its decommit has completed, so
	// a commit there waits for nothing and needs memory the device does
	// not have.
	if err := v.Commit(a, 2*g, g, ss[0]); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("commit on a full device: got %v, want ErrOutOfMemory", err)
	}
	if st := v.Stats(); st.HostWaits != 1 {
		t.Fatalf("host waits %d after a commit whose decommit had completed, want 1", st.HostWaits)
	}
	for _, x := range []gpu.DevicePtr{a, b} {
		if err := v.Deallocate(x, 4*g, ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, dev); got != 0 || v.Stats().Mapped != 0 {
		t.Fatalf("after the frees: device %d, mapped %d", got, v.Stats().Mapped)
	}
}

// TestVirtualGrowableDecommitWaitLimit: with WaitForDecommits and a
// DecommitWaitLimit, a commit whose decommit's work outlasts the limit is
// refused with ErrGrowBlocked (and the deadline), changes nothing but
// WaitsRefused, and succeeds once the work is done.
func TestVirtualGrowableDecommitWaitLimit(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 10<<20, mr.VirtualOptions{WaitForDecommits: true, DecommitWaitLimit: 20 * time.Millisecond})
	g := v.GrowGranularity()
	a, b, release := handOffHeld(t, dev, v, ss)
	defer release()
	before := v.Stats()
	err := v.Commit(a, g, g, ss[0])
	if !errors.Is(err, mr.ErrGrowBlocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit past the wait limit: got %v, want ErrGrowBlocked and DeadlineExceeded", err)
	}
	after := v.Stats()
	if after.WaitsRefused != 1 || after.HostWaits != 0 {
		t.Fatalf("after the refused wait: %+v", after)
	}
	after.WaitsRefused = before.WaitsRefused
	if after != before {
		t.Fatalf("the refused commit changed the counters: %+v -> %+v", before, after)
	}
	release()
	if err := v.Commit(a, g, g, ss[0]); err != nil {
		t.Fatalf("commit after the decommit's work: %v", err)
	}
	for _, x := range []gpu.DevicePtr{a, b} {
		if err := v.Deallocate(x, 4*g, ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mr.NewVirtual(dev, mr.VirtualOptions{DecommitWaitLimit: -time.Second}); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Fatalf("NewVirtual with a negative wait limit: got %v, want ErrInvalidValue", err)
	}
}

// TestVirtualGrowablePieces: a commit maps its new memory in pieces
// (PiecesPerCommit 1: one piece per run of a power of two granules); a
// decommit of part of a piece leaves its memory mapped (Idle) until the
// rest is decommitted, DecommitSpan says which part of a range gives all
// its memory back, and a commit of idle granules takes them back without
// new memory.
func TestVirtualGrowablePieces(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 64<<20, mr.VirtualOptions{PiecesPerCommit: 1})
	s := ss[0]
	g := v.GrowGranularity()
	p, err := v.AllocateGrowable(g, 16*g, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Commit(p, g, 4*g, s); err != nil { // one piece: granules 1-4
		t.Fatal(err)
	}
	for _, c := range []struct {
		off, n, lo, hi int
	}{
		{2 * g, g, 0, 0},     // inside the piece
		{g, 4 * g, g, 5 * g}, // the piece whole
		{0, 5 * g, 0, 5 * g}, // both pieces
		{0, 3 * g, 0, g},     // the first, and part of the second
		{3 * g, 2 * g, 0, 0}, // the tail of the piece
		{5 * g, g, 0, 0},     // not committed
		{g, 20 * g, 0, 0},    // beyond the range
		{g / 2, g, 0, 0},     // misaligned
	} {
		if lo, hi := v.DecommitSpan(p, c.off, c.n); lo != c.lo || hi != c.hi {
			t.Errorf("DecommitSpan(%d, %d) = [%d, %d), want [%d, %d)", c.off, c.n, lo, hi, c.lo, c.hi)
		}
	}
	if lo, hi := v.DecommitSpan(p+gpu.DevicePtr(g), 0, g); lo != hi {
		t.Errorf("DecommitSpan of an unknown pointer = [%d, %d), want empty", lo, hi)
	}
	// Part of the piece: decommitted for the caller, its memory kept.
	if err := v.Decommit(p, 2*g, g, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Live != uint64(4*g) || st.Mapped != uint64(5*g) || st.Idle != uint64(g) || st.Pending != uint64(g) {
		t.Fatalf("after decommitting part of a piece: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(5*g) {
		t.Fatalf("device memory in use %d, want %d", got, 5*g)
	}
	// The rest of the piece but that granule: the span is the piece now.
	if lo, hi := v.DecommitSpan(p, g, g); lo != 0 || hi != 0 {
		t.Errorf("DecommitSpan of one of three committed granules of a piece = [%d, %d), want empty", lo, hi)
	}
	// Taken back: no new memory.
	if err := v.Commit(p, 2*g, g, s); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Live != uint64(5*g) || st.Mapped != uint64(5*g) || st.Idle != 0 || st.Pending != 0 || st.PeakMapped != uint64(5*g) {
		t.Fatalf("after taking an idle granule back: %+v", st)
	}
	if err := dev.MemsetD8Async(p, 3, 5*g, s); err != nil {
		t.Fatal(err)
	}
	// Decommitted in two calls, the piece goes back whole.
	if err := v.Decommit(p, g, 2*g, s); err != nil {
		t.Fatal(err)
	}
	if err := v.Decommit(p, 3*g, 2*g, ss[1]); err != nil {
		t.Fatal(err)
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Live != uint64(g) || st.Mapped != uint64(g) || st.Idle != 0 || st.Pending != 0 {
		t.Fatalf("after decommitting the whole piece: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(g) {
		t.Fatalf("device memory in use %d, want %d", got, g)
	}
	if err := v.Deallocate(p, 16*g, s); err != nil {
		t.Fatal(err)
	}
	if _, err := mr.NewVirtual(dev, mr.VirtualOptions{PiecesPerCommit: -1}); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Fatalf("NewVirtual with PiecesPerCommit -1: got %v, want ErrInvalidValue", err)
	}
}

// TestVirtualGrowableWaitPieces: with WaitForDecommits and no
// PiecesPerCommit, every piece is one granule, so a decommit of one
// granule of a large commit gives its memory back.
func TestVirtualGrowableWaitPieces(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 256<<20, mr.VirtualOptions{WaitForDecommits: true})
	g := v.GrowGranularity()
	p, err := v.AllocateGrowable(64*g, 64*g, ss[0])
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := v.DecommitSpan(p, 5*g, g); lo != 5*g || hi != 6*g {
		t.Fatalf("DecommitSpan of one granule = [%d, %d), want [%d, %d)", lo, hi, 5*g, 6*g)
	}
	if err := v.Decommit(p, 5*g, g, ss[0]); err != nil {
		t.Fatal(err)
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != uint64(63*g) || st.Idle != 0 {
		t.Fatalf("after decommitting one granule: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(63*g) {
		t.Fatalf("device memory in use %d, want %d", got, 63*g)
	}
	if err := v.Deallocate(p, 64*g, ss[0]); err != nil {
		t.Fatal(err)
	}
}

// TestVirtualGrowablePieceHandoff: a waiting piece of several granules
// goes whole to another range's commit that has room for it, and the
// device holds its memory once.
func TestVirtualGrowablePieceHandoff(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 16<<20, mr.VirtualOptions{PiecesPerCommit: 1}) // eight granules
	g := v.GrowGranularity()
	a, err := v.AllocateGrowable(4*g, 8*g, ss[0]) // one piece of four
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.AllocateGrowable(g, 8*g, ss[1])
	if err != nil {
		t.Fatal(err)
	}
	release := dev.Hold(ss[0])
	if err := v.Decommit(a, 0, 4*g, ss[0]); err != nil {
		t.Fatal(err)
	}
	// Seven granules: a's four, then three new ones.
	if err := v.Commit(b, g, 7*g, ss[1]); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Handoffs != 4 || st.Mapped != uint64(8*g) || st.Pending != 0 || st.Live != uint64(8*g) {
		t.Fatalf("after the handoff: %+v", st)
	}
	if got := inUse(t, dev); got != uint64(8*g) {
		t.Fatalf("device memory in use %d, want %d", got, 8*g)
	}
	if err := v.Commit(a, 0, g, ss[0]); !errors.Is(err, mr.ErrGrowBlocked) {
		t.Fatalf("commit of addresses still mapped for b: got %v, want ErrGrowBlocked", err)
	}
	if err := dev.MemsetD8Async(b, 1, 8*g, ss[1]); err != nil {
		t.Fatal(err)
	}
	release()
	if err := ss[1].Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, dev); got != uint64(8*g) || v.Stats().Mapped != uint64(8*g) {
		t.Fatalf("after a's unmap: device %d, mapped %d, want %d", got, v.Stats().Mapped, 8*g)
	}
	for _, x := range []gpu.DevicePtr{a, b} {
		if err := v.Deallocate(x, 8*g, ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, dev); got != 0 || v.Stats().Mapped != 0 {
		t.Fatalf("after the frees: device %d, mapped %d", got, v.Stats().Mapped)
	}
}

// FuzzVirtualGrowable runs growable allocations, commits and decommits of
// granules (on either of two streams), frees and releases on a Virtual
// resource against a model of which granules each range has committed: a
// commit of committed granules and a decommit of uncommitted ones are
// ErrInvalidValue and change nothing; live bytes are the committed ones;
// the device's memory in use is the mapped bytes, at least the committed
// ones and, after ReleaseContext, exactly those and the idle part of
// pieces with committed granules left (none when a piece is one granule);
// out of memory only when the device has not the granules; ErrGrowBlocked
// only over granules decommitted since the last ReleaseContext. The
// first byte picks the pieces' size (PiecesPerCommit).
func FuzzVirtualGrowable(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 0, 3, 2, 3, 0, 1, 1, 5, 4, 0})
	f.Add([]byte{0, 0, 3, 0, 0, 2, 3, 0, 0, 1, 0, 1, 6, 1, 1, 0, 2, 5, 4, 1})
	f.Add([]byte{1, 0, 0, 3, 1, 0, 3, 0, 5, 3, 1, 0, 0, 2, 1, 0, 1, 3, 5, 4, 0})
	f.Add([]byte{2, 0, 0, 3, 0, 1, 1, 0, 4, 3, 3, 0, 0, 1, 1, 1, 1, 0, 4, 3, 5, 4, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		const capacity = 16 << 20
		d, err := sim.New(sim.Config{Capacity: capacity}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		// The first byte picks how commits cut their memory: the
		// default, or pieces of up to 2 or 4 granules.
		perCommit := 0
		if len(ops) > 0 {
			perCommit = int(ops[0]) % 3
			ops = ops[1:]
		}
		v, err := mr.NewVirtual(d, mr.VirtualOptions{ReserveSize: 16 << 20, PiecesPerCommit: perCommit})
		if err != nil {
			t.Fatal(err)
		}
		var streams [2]gpu.Stream
		for i := range streams {
			if streams[i], err = d.NewStream(); err != nil {
				t.Fatal(err)
			}
			defer streams[i].Destroy()
		}
		g := v.GrowGranularity()
		const limit = 8
		type rng struct {
			p         gpu.DevicePtr
			committed [limit]bool
			recent    [limit]bool // decommitted since the last ReleaseContext
		}
		var ranges []*rng
		committed := func() uint64 {
			var n uint64
			for _, r := range ranges {
				for _, c := range r.committed {
					if c {
						n += uint64(g)
					}
				}
			}
			return n
		}
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		for len(ops) > 0 {
			op := next() % 6
			s := streams[next()%2]
			switch op {
			case 0: // a range with 1 to 4 granules committed
				k := 1 + next()%4
				p, err := v.AllocateGrowable(k*g, limit*g, s)
				if err != nil {
					if !errors.Is(err, mr.ErrOutOfMemory) || v.Stats().Mapped+uint64(k*g) <= capacity {
						t.Fatalf("AllocateGrowable(%d) with %d mapped: %v", k*g, v.Stats().Mapped, err)
					}
					continue
				}
				r := &rng{p: p}
				for i := range k {
					r.committed[i] = true
				}
				ranges = append(ranges, r)
			case 1, 2, 3: // commit or decommit 1 to 4 granules
				if len(ranges) == 0 {
					continue
				}
				r := ranges[next()%len(ranges)]
				i, k := next()%limit, 1+next()%4
				k = min(k, limit-i)
				anyC, allC, blockable := false, true, false
				for j := i; j < i+k; j++ {
					anyC = anyC || r.committed[j]
					allC = allC && r.committed[j]
					blockable = blockable || r.recent[j]
				}
				before := v.Stats()
				if op == 3 {
					err := v.Decommit(r.p, i*g, k*g, s)
					if !allC {
						if !errors.Is(err, gpu.ErrInvalidValue) || v.Stats() != before {
							t.Fatalf("decommit of uncommitted granules: %v", err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("decommit: %v", err)
					}
					for j := i; j < i+k; j++ {
						r.committed[j], r.recent[j] = false, true
					}
					continue
				}
				err := v.Commit(r.p, i*g, k*g, s)
				switch {
				case anyC:
					if !errors.Is(err, gpu.ErrInvalidValue) {
						t.Fatalf("commit of committed granules: %v", err)
					}
				case err == nil:
					for j := i; j < i+k; j++ {
						r.committed[j] = true
					}
				case errors.Is(err, mr.ErrGrowBlocked) && blockable:
				case errors.Is(err, mr.ErrOutOfMemory) && before.Mapped+uint64(k*g) > capacity:
				default:
					t.Fatalf("commit of %d granules at %d with %d mapped: %v", k, i, before.Mapped, err)
				}
				// A failed commit leaves the allocations as they were
				// (its reap of completed frees may give memory back).
				if after := v.Stats(); err != nil && (after.Live != before.Live || after.Mapped > before.Mapped) {
					t.Fatalf("a failed commit changed the counters: %+v -> %+v", before, after)
				}
			case 4: // free a range
				if len(ranges) == 0 {
					continue
				}
				j := next() % len(ranges)
				if err := v.Deallocate(ranges[j].p, limit*g, s); err != nil {
					t.Fatal(err)
				}
				ranges = append(ranges[:j], ranges[j+1:]...)
			case 5:
				if err := v.ReleaseContext(context.Background()); err != nil {
					t.Fatal(err)
				}
				for _, r := range ranges {
					r.recent = [limit]bool{}
				}
				// What stays mapped beyond the committed granules is
				// the idle part of pieces with committed granules left.
				if st := v.Stats(); st.Mapped != committed()+st.Idle || st.Pending != st.Idle {
					t.Fatalf("after ReleaseContext: %+v, committed %d", st, committed())
				}
			}
			st := v.Stats()
			if st.Live != committed() || st.Mapped < committed() || st.Idle > st.Pending || (perCommit == 0 && st.Idle != 0) {
				t.Fatalf("stats %+v, committed %d", st, committed())
			}
			if free, total, _ := d.MemGetInfo(); total-free != st.Mapped {
				t.Fatalf("device memory in use %d, mapped %d", total-free, st.Mapped)
			}
		}
		for _, r := range ranges {
			if err := v.Deallocate(r.p, limit*g, streams[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if free, total, _ := d.MemGetInfo(); free != total {
			t.Fatalf("after Close: %d bytes in use", total-free)
		}
	})
}

// TestVirtualOptions: Options reports the options in effect, the range
// rounded up to the granularity and PiecesPerCommit's default filled in
// (one granule a piece under WaitForDecommits).
func TestVirtualOptions(t *testing.T) {
	for _, tc := range []struct {
		opts       mr.VirtualOptions
		wantPieces int
	}{
		{mr.VirtualOptions{}, mr.DefaultVirtualPiecesPerCommit},
		{mr.VirtualOptions{PiecesPerCommit: 5}, 5},
		{mr.VirtualOptions{WaitForDecommits: true}, math.MaxInt},
		{mr.VirtualOptions{WaitForDecommits: true, PiecesPerCommit: 2, DecommitWaitLimit: time.Second}, 2},
	} {
		_, v, _ := newSimVirtualOpts(t, 10<<20, tc.opts)
		got := v.Options()
		want := tc.opts
		want.PiecesPerCommit = tc.wantPieces
		g := uint64(v.GrowGranularity())
		if want.ReserveSize = got.ReserveSize; got.ReserveSize == 0 || got.ReserveSize%g != 0 {
			t.Errorf("%+v: reserve size %d, want a positive multiple of %d", tc.opts, got.ReserveSize, g)
		}
		if got != want {
			t.Errorf("Options() = %+v, want %+v", got, want)
		}
	}
}
