// The capture wing's entry points in the table of every entry point, and
// the names of its results.

package cuda_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

func captureEntryPoints() []entryPoint {
	ctx := cuda.Context(1)
	dev := cuda.Device(0)
	s := cuda.Stream(1)
	g := cuda.Graph(1)
	x := cuda.GraphExec(1)
	first := func(_ any, err error) error { return err }
	return []entryPoint{
		{"Context.StreamBeginCapture", func() error { return ctx.StreamBeginCapture(s, cuda.CaptureModeRelaxed) }},
		{"Context.StreamEndCapture", func() error { return first(ctx.StreamEndCapture(s)) }},
		{"Context.StreamIsCapturing", func() error { return first(ctx.StreamIsCapturing(s)) }},
		{"Context.StreamCaptureInfo", func() error { _, _, err := ctx.StreamCaptureInfo(s); return err }},
		{"Context.GraphInstantiate", func() error { return first(ctx.GraphInstantiate(g, 0)) }},
		{"Context.GraphLaunch", func() error { return ctx.GraphLaunch(x, s) }},
		{"Context.GraphExecDestroy", func() error { return ctx.GraphExecDestroy(x) }},
		{"Context.GraphDestroy", func() error { return ctx.GraphDestroy(g) }},
		{"Context.DeviceGraphMemTrim", func() error { return ctx.DeviceGraphMemTrim(dev) }},
		{"Context.DeviceGraphMemAttribute", func() error { return first(ctx.DeviceGraphMemAttribute(dev, cuda.GraphMemUsedCurrent)) }},
		{"Context.DeviceSetGraphMemAttribute", func() error { return ctx.DeviceSetGraphMemAttribute(dev, cuda.GraphMemUsedHigh, 0) }},
		{"ThreadExchangeCaptureMode", func() error { return first(cuda.ThreadExchangeCaptureMode(cuda.CaptureModeRelaxed)) }},
	}
}

func TestCaptureResultNames(t *testing.T) {
	for _, c := range []struct {
		r    cuda.Result
		name string
	}{
		{cuda.ErrIllegalState, "CUDA_ERROR_ILLEGAL_STATE"},
		{cuda.ErrStreamCaptureUnsupported, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{cuda.ErrStreamCaptureInvalidated, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
		{cuda.ErrStreamCaptureMerge, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
		{cuda.ErrStreamCaptureUnmatched, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
		{cuda.ErrStreamCaptureUnjoined, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
		{cuda.ErrStreamCaptureIsolation, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
		{cuda.ErrStreamCaptureImplicit, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
		{cuda.ErrCapturedEvent, "CUDA_ERROR_CAPTURED_EVENT"},
		{cuda.ErrStreamCaptureWrongThread, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
	} {
		if got := c.r.Name(); got != c.name {
			t.Errorf("Result(%d).Name() = %q, want %q", int32(c.r), got, c.name)
		}
	}
}

// A relaxed capture of an allocation, a set, a copy and a free, ended on
// the goroutine's current thread, replays on the card: each launch writes
// the pattern, and the graph's memory shows in the graph memory
// attributes. The entry points all resolve on a driver that has them.
func TestCaptureRelaxedReplay(t *testing.T) {
	dev, ctx := needGPU(t)
	for _, api := range []string{"cuStreamBeginCapture", "cuStreamEndCapture", "cuStreamIsCapturing", "cuGraphInstantiate",
		"cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy", "cuDeviceGraphMemTrim", "cuDeviceGetGraphMemAttribute",
		"cuThreadExchangeStreamCaptureMode"} {
		if !cuda.Has(api) {
			t.Errorf("driver lacks %s", api)
		}
	}
	if !cuda.Has("cuStreamGetCaptureInfo_v3") && !cuda.Has("cuStreamGetCaptureInfo_v2") {
		t.Error("driver has neither cuStreamGetCaptureInfo_v3 nor _v2")
	}
	s := newStream(t, ctx)
	out := testdev.Must(ctx.MemAlloc(4096))(t)
	t.Cleanup(func() { ctx.MemFree(out) })

	if st := testdev.Must(ctx.StreamIsCapturing(s))(t); st != cuda.CaptureStatusNone {
		t.Fatalf("status before capture %d", st)
	}
	if err := ctx.StreamBeginCapture(s, cuda.CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	st, id, err := ctx.StreamCaptureInfo(s)
	if err != nil || st != cuda.CaptureStatusActive || id == 0 {
		t.Fatalf("capture info: %d, %d, %v; want active, an ID", st, id, err)
	}
	tmp, err := ctx.MemAllocAsync(4096, s)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, ctx.MemsetD8Async(tmp, 0x5a, 4096, s))
	mustOK(t, ctx.MemcpyDtoDAsync(out, tmp, 4096, s))
	mustOK(t, ctx.MemFreeAsync(tmp, s))
	g, err := ctx.StreamEndCapture(s)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.GraphDestroy(g)
	if st := testdev.Must(ctx.StreamIsCapturing(s))(t); st != cuda.CaptureStatusNone {
		t.Fatalf("status after capture %d", st)
	}
	x := testdev.Must(ctx.GraphInstantiate(g, 0))(t)
	defer ctx.GraphExecDestroy(x)
	for range 3 {
		mustOK(t, ctx.MemsetD8Async(out, 0, 4096, s))
		mustOK(t, ctx.GraphLaunch(x, s))
	}
	mustOK(t, ctx.StreamSynchronize(s))
	buf := make([]byte, 4096)
	mustOK(t, ctx.MemcpyDtoHAsync(buf, out, s))
	for i, b := range buf {
		if b != 0x5a {
			t.Fatalf("byte %d = %#x after the replays, want 0x5a", i, b)
		}
	}
	reserved := testdev.Must(ctx.DeviceGraphMemAttribute(dev, cuda.GraphMemReservedCurrent))(t)
	if reserved == 0 {
		t.Error("graph memory reserved 0 after launching a graph with an allocation")
	}
	// Used is the memory associated with graphs: the executable keeps
	// what its launches allocate, freed in the graph or not.
	if used := testdev.Must(ctx.DeviceGraphMemAttribute(dev, cuda.GraphMemUsedCurrent))(t); used < 4096 {
		t.Errorf("graph memory used %d while the executable lives, want at least 4096", used)
	}
}

// The thread's capture mode can be exchanged and put back.
func TestThreadExchangeCaptureMode(t *testing.T) {
	needGPU(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cuda.ThreadExchangeCaptureMode(cuda.CaptureModeRelaxed)
	if err != nil {
		t.Fatal(err)
	}
	if prev != cuda.CaptureModeGlobal {
		t.Errorf("a thread's initial mode is %d, want global (0)", prev)
	}
	back, err := cuda.ThreadExchangeCaptureMode(prev)
	if err != nil || back != cuda.CaptureModeRelaxed {
		t.Errorf("exchanging back: %d, %v; want relaxed (2)", back, err)
	}
}

// A global-mode capture ends only on the thread that began it: on another
// one the driver answers ErrStreamCaptureWrongThread, and the capture is
// over all the same (measured on the H100): ending it again on the right
// thread is ErrIllegalState. (gpu/cudagpu begins and ends such captures on
// a thread of its own.)
func TestEndCaptureWrongThread(t *testing.T) {
	_, ctx := needGPU(t)
	s := newStream(t, ctx)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mustOK(t, ctx.StreamBeginCapture(s, cuda.CaptureModeGlobal))
	var otherErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // a thread other than the test's
		defer runtime.UnlockOSThread()
		_, otherErr = ctx.StreamEndCapture(s)
	}()
	<-done
	if !errors.Is(otherErr, cuda.ErrStreamCaptureWrongThread) {
		t.Errorf("EndCapture on another thread: %v, want ErrStreamCaptureWrongThread", otherErr)
	}
	if st := testdev.Must(ctx.StreamIsCapturing(s))(t); st != cuda.CaptureStatusNone {
		t.Errorf("status %d after the wrong thread's EndCapture, want none", st)
	}
	if _, err := ctx.StreamEndCapture(s); !errors.Is(err, cuda.ErrIllegalState) {
		t.Errorf("EndCapture on the capturing thread after it: %v, want ErrIllegalState", err)
	}
}

// The legacy default stream cannot be captured: refused before the driver.
func TestBeginCaptureLegacyStream(t *testing.T) {
	_, ctx := needGPU(t)
	if err := ctx.StreamBeginCapture(0, cuda.CaptureModeRelaxed); !errors.Is(err, cuda.ErrStreamCaptureUnsupported) {
		t.Errorf("StreamBeginCapture(legacy stream): %v, want ErrStreamCaptureUnsupported", err)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
