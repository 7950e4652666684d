package sim_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func newDevice(t *testing.T) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return d.(*sim.Device)
}

// TestAdoptionConformance runs the foreign-handle suite on the simulator,
// whose raw calls stand for another library's.
func TestAdoptionConformance(t *testing.T) {
	dev := newDevice(t)
	gputest.RunAdoption(t, dev, dev)
}

// TestAdoptContext: the primary context is adopted, another is refused
// with ErrForeignContext, and anything else is an invalid handle.
func TestAdoptContext(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	other := sim.New(sim.Config{})
	d1, _ := b.Device(1)
	od, _ := other.Device(0)
	for _, c := range []struct {
		name string
		raw  uintptr
		want gpu.Device
		err  error
	}{
		{"primary", d1.(*sim.Device).Context(), d1, nil},
		{"created", d1.(*sim.Device).NewRawContext(), nil, gpu.ErrForeignContext},
		{"null", 0, nil, gpu.ErrInvalidHandle},
		{"another simulator's", od.(*sim.Device).Context(), nil, gpu.ErrInvalidHandle},
	} {
		got, err := b.AdoptContext(c.raw)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: AdoptContext(%#x) = %v, %v; want %v, %v", c.name, c.raw, got, err, c.want, c.err)
		}
	}
}

// TestAdoptBadHandles: handles that are not live objects of this device
// are refused, and handles destroyed by their owner under a live wrapper
// make every use through it fail with ErrDestroyed.
func TestAdoptBadHandles(t *testing.T) {
	d, e := newDevice(t), newDevice(t)
	rs, err := e.NewRawStream()
	if err != nil {
		t.Fatal(err)
	}
	re, _ := e.NewRawEvent(false)
	rp, _ := e.NewRawMemPool()
	_, err = d.AdoptStream(rs)
	wantIs(t, "stream of another device", err, gpu.ErrInvalidHandle)
	_, err = d.AdoptEvent(re)
	wantIs(t, "event of another device", err, gpu.ErrInvalidHandle)
	_, err = d.AdoptMemPool(rp)
	wantIs(t, "pool of another device", err, gpu.ErrInvalidHandle)
	_, err = d.AdoptStream(0x12345)
	wantIs(t, "unknown stream handle", err, gpu.ErrInvalidHandle)
	wantIs(t, "DestroyRawStream of an unknown handle", d.DestroyRawStream(0x12345), gpu.ErrInvalidHandle)
	own, _ := d.NewStream()
	wantIs(t, "DestroyRawStream of our own stream", d.DestroyRawStream(own.(gpu.RawHandle).Raw()), gpu.ErrInvalidHandle)

	// The owner destroys the stream, event and pool under live wrappers.
	s, err := e.AdoptStream(rs)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := e.AdoptEvent(re)
	p, _ := e.AdoptMemPool(rp)
	if err := errors.Join(e.DestroyRawStream(rs), e.DestroyRawEvent(re), e.DestroyRawMemPool(rp)); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "stream destroyed by its owner", s.Synchronize(), gpu.ErrDestroyed)
	_, err = e.MallocAsync(256, s)
	wantIs(t, "MallocAsync on a stream destroyed by its owner", err, gpu.ErrDestroyed)
	es, _ := e.NewStream()
	wantIs(t, "record of an event destroyed by its owner", ev.Record(es), gpu.ErrDestroyed)
	_, err = e.MallocFromPoolAsync(256, p, es)
	wantIs(t, "allocation from a pool destroyed by its owner", err, gpu.ErrDestroyed)
	_, err = e.AdoptStream(rs)
	wantIs(t, "adopting a destroyed stream", err, gpu.ErrInvalidHandle)
	wantIs(t, "DestroyRawStream twice", e.DestroyRawStream(rs), gpu.ErrInvalidHandle)
}

// TestAdoptConcurrently: goroutines adopting one handle at once all get
// the same wrapper.
func TestAdoptConcurrently(t *testing.T) {
	d := newDevice(t)
	raw, _ := d.NewRawStream()
	const n = 16
	got := make([]gpu.Stream, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.AdoptStream(raw)
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("goroutine %d got another wrapper (ID %d, want %d)", i, got[i].ID(), got[0].ID())
		}
	}
}

// TestAdoptedOrdering: an event recorded on an adopted stream orders it
// before a stream of ours, as the simulator's happens-before relation
// sees it; without the wait it does not.
func TestAdoptedOrdering(t *testing.T) {
	d := newDevice(t)
	raw, _ := d.NewRawStream()
	a, _ := d.AdoptStream(raw)
	own, _ := d.NewStream()
	p, err := d.MallocAsync(1024, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetD8Async(p, 1, 1024, a); err != nil {
		t.Fatal(err)
	}
	set := d.LastOp(a)
	if set.IsZero() {
		t.Fatal("LastOp of an adopted stream is zero")
	}
	q, err := d.MallocAsync(1024, own) // other bytes: no race before the wait
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetD8Async(q, 2, 1024, own); err != nil {
		t.Fatal(err)
	}
	if d.HappensBefore(set, d.LastOp(own)) {
		t.Fatal("unordered streams reported ordered")
	}
	e, _ := d.NewEvent(false)
	if err := errors.Join(e.Record(a), own.WaitEvent(e), d.MemsetD8Async(p, 3, 1024, own)); err != nil {
		t.Fatal(err)
	}
	if !d.HappensBefore(set, d.LastOp(own)) {
		t.Fatal("event wait from an adopted stream not seen as ordering")
	}
	if err := errors.Join(d.FreeAsync(p, own), d.FreeAsync(q, own), d.Synchronize()); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyCurrentPool: destroying the current pool makes the default
// pool current again, as the driver does.
func TestDestroyCurrentPool(t *testing.T) {
	d := newDevice(t)
	p, _ := d.NewMemPool()
	if err := d.SetCurrentMemPool(p); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(); err != nil {
		t.Fatal(err)
	}
	cur, err := d.CurrentMemPool()
	def, _ := d.DefaultMemPool()
	if err != nil || cur != def {
		t.Fatalf("current pool after destroying it: %v, %v; want the default pool", cur, err)
	}
	wantIs(t, "SetCurrentMemPool of a destroyed pool", d.SetCurrentMemPool(p), gpu.ErrDestroyed)
	wantIs(t, "SetCurrentMemPool(nil)", d.SetCurrentMemPool(nil), gpu.ErrInvalidHandle)
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got %v, want an error matching %v", what, err, target)
	}
}

// TestAdoptedCaptureGated: the capture gate covers the adopted legacy
// default stream and no other adopted stream, as on the card; a stream of
// ours adopted by its raw handle is ours, gated. On the adopted legacy
// stream a capture opens the gate before the stream reports it.
func TestAdoptedCaptureGated(t *testing.T) {
	d := newDevice(t)
	raw, err := d.NewRawStream()
	if err != nil {
		t.Fatal(err)
	}
	ours, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		raw  uintptr
		want bool
	}{
		{"legacy default stream", gpu.StreamLegacy, true},
		{"per-thread default stream", gpu.StreamPerThread, false},
		{"a raw stream of another library", raw, false},
		{"a stream of ours by its raw handle", ours.(gpu.RawHandle).Raw(), true},
	} {
		s, err := d.AdoptStream(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := gpu.CaptureGated(s); got != c.want {
			t.Errorf("%s: CaptureGated = %v, want %v", c.name, got, c.want)
		}
	}
	legacy, _ := d.AdoptStream(gpu.StreamLegacy)
	if err := gpu.BeginCapture(legacy, gpu.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if gpu.CaptureID(legacy) == 0 || !gpu.CapturesActive() {
		t.Errorf("capturing: CaptureID %d, CapturesActive %v: want both set", gpu.CaptureID(legacy), gpu.CapturesActive())
	}
	if _, err := gpu.EndCapture(legacy); err != nil {
		t.Fatal(err)
	}
	if gpu.CaptureID(legacy) != 0 {
		t.Errorf("after EndCapture: CaptureID %d, want 0", gpu.CaptureID(legacy))
	}
}
