package cudagpu_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
)

// driverLib makes raw handles with package cuda in the device's primary
// context, as another library using the driver (or the runtime) would.
type driverLib struct {
	ctx cuda.Context
	dev cuda.Device
}

func (l driverLib) NewRawStream() (uintptr, error) {
	s, err := l.ctx.StreamCreate(cuda.StreamNonBlocking)
	return uintptr(s), err
}

func (l driverLib) DestroyRawStream(raw uintptr) error { return l.ctx.StreamDestroy(cuda.Stream(raw)) }

func (l driverLib) NewRawEvent(timing bool) (uintptr, error) {
	flags := cuda.EventDisableTiming
	if timing {
		flags = cuda.EventDefault
	}
	e, err := l.ctx.EventCreate(flags)
	return uintptr(e), err
}

func (l driverLib) DestroyRawEvent(raw uintptr) error { return l.ctx.EventDestroy(cuda.Event(raw)) }

func (l driverLib) NewRawMemPool() (uintptr, error) {
	p, err := l.ctx.MemPoolCreate(l.dev)
	return uintptr(p), err
}

func (l driverLib) DestroyRawMemPool(raw uintptr) error {
	return l.ctx.MemPoolDestroy(cuda.MemPool(raw))
}

// TestAdoptionConformance runs the foreign-handle suite, which the
// simulator also passes, on the GPU with handles made through package cuda.
func TestAdoptionConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunAdoption(t, d, driverLib{d.Context(), d.Handle()})
}

// TestAdoptContexts: the primary context is adopted; a context of our own
// making, and a stream of it, are refused with ErrForeignContext; a null
// context is an invalid handle.
func TestAdoptContexts(t *testing.T) {
	b, d := needDevice(t)
	ca := b.(gpu.ContextAdopter)
	got, err := ca.AdoptContext(uintptr(d.Context()))
	if err != nil || got != gpu.Device(d) {
		t.Fatalf("AdoptContext(primary) = %v, %v; want device 0", got, err)
	}
	_, err = ca.AdoptContext(0)
	if !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("AdoptContext(0): %v, want ErrInvalidHandle", err)
	}
	other, err := cuda.CtxCreate(d.Handle())
	ok(t, err)
	defer func() { ok(t, other.Destroy()) }()
	_, err = ca.AdoptContext(uintptr(other))
	if !errors.Is(err, gpu.ErrForeignContext) {
		t.Errorf("AdoptContext(a created context): %v, want ErrForeignContext", err)
	}
	s, err := other.StreamCreate(cuda.StreamNonBlocking)
	ok(t, err)
	defer func() { ok(t, other.StreamDestroy(s)) }()
	_, err = d.AdoptStream(uintptr(s))
	if !errors.Is(err, gpu.ErrForeignContext) {
		t.Errorf("AdoptStream(stream of a created context): %v, want ErrForeignContext", err)
	}
	// The primary context's own streams are still accepted afterwards
	// (the checks left the thread's context usable).
	l, err := d.AdoptStream(0)
	ok(t, err)
	ok(t, l.Synchronize())
	if !l.(*cudagpu.Stream).Borrowed() {
		t.Error("the adopted legacy stream is not marked borrowed")
	}
}

// TestAdoptedStreamForeignCapture: a capture begun on the raw handle of an
// adopted stream, as PyTorch begins one on the stream it hands its
// allocator, is seen by gpu.CaptureID, so resources refuse it or route it
// instead of serving it from their free lists; once it ends, it is gone.
func TestAdoptedStreamForeignCapture(t *testing.T) {
	_, d := needDevice(t)
	lib := driverLib{d.Context(), d.Handle()}
	raw, err := lib.NewRawStream()
	if err != nil {
		t.Fatal(err)
	}
	defer lib.DestroyRawStream(raw)
	s, err := d.AdoptStream(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if id := gpu.CaptureID(s); id != 0 {
		t.Fatalf("CaptureID before any capture: %d, want 0", id)
	}
	ctx := d.Context()
	if err := ctx.StreamBeginCapture(cuda.Stream(raw), cuda.CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	_, want, err := ctx.StreamCaptureInfo(cuda.Stream(raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := gpu.CaptureID(s); got == 0 || got != want {
		t.Errorf("CaptureID during a capture begun on the raw handle: %d, want the driver's %d", got, want)
	}
	g, err := ctx.StreamEndCapture(cuda.Stream(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.GraphDestroy(g); err != nil {
		t.Fatal(err)
	}
	if id := gpu.CaptureID(s); id != 0 {
		t.Errorf("CaptureID after the capture ended: %d, want 0", id)
	}
}

// TestAdoptedLegacyStreamNeverCaptures checks the premise that lets
// CaptureID skip the driver's capture query for the legacy default stream:
// the driver refuses to begin a capture on it, named as 0 or as
// CU_STREAM_LEGACY, in every mode.
func TestAdoptedLegacyStreamNeverCaptures(t *testing.T) {
	_, d := needDevice(t)
	ctx := d.Context()
	for _, h := range []cuda.Stream{0, cuda.StreamLegacy} {
		s, err := d.AdoptStream(uintptr(h))
		if err != nil {
			t.Fatalf("AdoptStream(%#x): %v", uintptr(h), err)
		}
		for _, mode := range []cuda.CaptureMode{cuda.CaptureModeGlobal, cuda.CaptureModeThreadLocal, cuda.CaptureModeRelaxed} {
			err := ctx.StreamBeginCapture(h, mode)
			if !errors.Is(err, gpu.ErrStreamCaptureUnsupported) {
				if err == nil {
					if g, err := ctx.StreamEndCapture(h); err == nil {
						ctx.GraphDestroy(g)
					}
				}
				t.Errorf("cuStreamBeginCapture(%#x, mode %d): %v, want %v", uintptr(h), mode, err, gpu.ErrStreamCaptureUnsupported)
			}
			if id := gpu.CaptureID(s); id != 0 {
				t.Errorf("CaptureID of the legacy stream %#x: %d, want 0", uintptr(h), id)
			}
		}
		if err := s.Destroy(); err != nil {
			t.Errorf("Destroy of the adopted legacy stream %#x: %v", uintptr(h), err)
		}
	}
}
