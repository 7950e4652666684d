package cudagpu_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A global-mode capture begun on one goroutine ends on another: the
// backend runs both calls on the capture's own thread.
func TestEndCaptureOnAnotherGoroutine(t *testing.T) {
	_, d := needDevice(t)
	s, err := d.NewStream()
	ok(t, err)
	defer s.Destroy()
	cs := s.(gpu.CaptureStream)
	for _, mode := range []gpu.CaptureMode{gpu.CaptureGlobal, gpu.CaptureThreadLocal, gpu.CaptureRelaxed} {
		ok(t, cs.BeginCapture(mode))
		ok(t, d.MemsetD8Async(0, 0, 0, s))
		res := make(chan error)
		go func() {
			g, err := cs.EndCapture()
			if err == nil {
				err = g.Destroy()
			}
			res <- err
		}()
		if err := <-res; err != nil {
			t.Errorf("%v capture ended on another goroutine: %v", mode, err)
		}
		if cs.CaptureID() != 0 {
			t.Errorf("%v: CaptureID %d after the capture", mode, cs.CaptureID())
		}
	}
}

// CaptureID is what resources call on every request: no allocation (and
// no driver call: it reads the Go-side state).
func TestCaptureIDAllocationFree(t *testing.T) {
	_, d := needDevice(t)
	s, err := d.NewStream()
	ok(t, err)
	defer s.Destroy()
	var id uint64
	if n := testing.AllocsPerRun(1000, func() { id += gpu.CaptureID(s) }); n != 0 {
		t.Errorf("CaptureID allocates %v times per call", n)
	}
	if id != 0 {
		t.Errorf("CaptureID %d on a stream not capturing", id)
	}
}

// A nil *Stream answers every question without the driver, and a pool
// refuses it as a nil stream: no method panics on it.
func TestNilStream(t *testing.T) {
	var s *cudagpu.Stream
	if s.ID() != 0 || s.Device() != nil || s.CaptureGated() || s.CaptureID() != 0 {
		t.Errorf("nil stream: ID %d, Device %v, CaptureGated %v, CaptureID %d; want 0, nil, false, 0",
			s.ID(), s.Device(), s.CaptureGated(), s.CaptureID())
	}
	if err := s.Synchronize(); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Synchronize on a nil stream: %v, want gpu.ErrInvalidHandle", err)
	}
	dev, err := sim.New(sim.Config{}).Device(0)
	ok(t, err)
	p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	defer p.Close()
	if _, err := p.Allocate(1<<20, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Pool.Allocate on a nil *cudagpu.Stream: %v, want gpu.ErrInvalidHandle", err)
	}
}
