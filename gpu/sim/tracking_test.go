package sim

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// trackedCount returns the lengths of the device's touched and failed
// lists.
//
//go:norace
func trackedCount(d *Device) (touched, failed int) {
	d.trackMu.Lock()
	defer d.trackMu.Unlock()
	return len(d.touched), len(d.failed)
}

// A device-wide synchronization (cuCtxSynchronize, cuMemFree) visits the
// streams that enqueued work since the last one and the failed ones, not
// every stream: with 20,000 idle streams, a Free visits none. A stream
// with a sticky error is reported by every later one, until it is
// destroyed and drained.
func TestDeviceSyncVisitsTouchedStreams(t *testing.T) {
	dev, err := New(Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*Device)
	var ss []gpu.Stream
	for range 20000 {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	e, _ := d.NewEvent(false)
	for _, s := range ss[:5000] {
		if err := e.Record(s); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := trackedCount(d); n != 5000 {
		t.Fatalf("%d streams listed after work on 5000", n)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	p, err := d.Malloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := trackedCount(d); n != 0 {
		t.Fatalf("%d streams listed after a device synchronization", n)
	}
	if err := d.Free(p); err != nil { // synchronizes the device: visits nothing
		t.Fatal(err)
	}
	if err := e.Record(ss[7]); err != nil {
		t.Fatal(err)
	}
	if err := e.Record(ss[7]); err != nil {
		t.Fatal(err)
	}
	if n, _ := trackedCount(d); n != 1 {
		t.Fatalf("%d streams listed after work on one", n)
	}

	// A fault: a memset that runs after its memory was unmapped, reported
	// by this synchronization and the next ones.
	bad, other := ss[9], ss[10]
	q, err := d.Malloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	release := d.Hold(bad)
	if err := d.MemsetD8Async(q, 0, 16, bad); err != nil {
		t.Fatal(err)
	}
	if err := d.FreeAsync(q, other); err != nil {
		t.Fatal(err)
	}
	if err := other.Synchronize(); err != nil { // unmaps q
		t.Fatal(err)
	}
	release()
	for i := range 3 {
		if err := d.Synchronize(); !errors.Is(err, gpu.ErrIllegalAddress) {
			t.Fatalf("device synchronization %d: %v, want the sticky %v", i, err, gpu.ErrIllegalAddress)
		}
	}
	if _, f := trackedCount(d); f != 1 {
		t.Errorf("%d failed streams listed, want 1", f)
	}
	if err := bad.Destroy(); err != nil {
		t.Fatal(err)
	}
	d.Synchronize()
	if _, f := trackedCount(d); f != 0 {
		t.Errorf("a destroyed, drained stream is still listed as failed")
	}
	if err := d.Synchronize(); err != nil {
		t.Errorf("after the failed stream was destroyed: %v", err)
	}
}
