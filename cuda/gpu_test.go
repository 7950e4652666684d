// Tests and benchmarks that need a GPU. Without one they skip, unless
// STREAMALLOC_DEVICE=cuda says a GPU is expected, in which case they fail:
// the GPU script (scripts/gpu-run.sh) sets it, so a GPU run that silently
// tested nothing is impossible.

package cuda_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

var (
	gpuOnce sync.Once
	gpuDev  cuda.Device
	gpuCtx  cuda.Context
	gpuErr  error
)

// needGPU returns the primary context of device 0, retained once for the
// whole test binary.
func needGPU(tb testing.TB) (cuda.Device, cuda.Context) {
	tb.Helper()
	gpuOnce.Do(func() {
		if gpuErr = cuda.Init(); gpuErr != nil {
			return
		}
		if gpuDev, gpuErr = cuda.GetDevice(0); gpuErr != nil {
			return
		}
		gpuCtx, gpuErr = gpuDev.PrimaryCtxRetain()
	})
	testdev.SkipWithoutGPU(tb, gpuErr)
	return gpuDev, gpuCtx
}

func newStream(tb testing.TB, ctx cuda.Context) cuda.Stream {
	tb.Helper()
	s := testdev.Must(ctx.StreamCreate(cuda.StreamNonBlocking))(tb)
	tb.Cleanup(func() {
		if err := ctx.StreamDestroy(s); err != nil {
			tb.Error(err)
		}
	})
	return s
}

func newEvent(tb testing.TB, ctx cuda.Context, flags uint32) cuda.Event {
	tb.Helper()
	e := testdev.Must(ctx.EventCreate(flags))(tb)
	tb.Cleanup(func() {
		if err := ctx.EventDestroy(e); err != nil {
			tb.Error(err)
		}
	})
	return e
}

func TestDeviceProperties(t *testing.T) {
	dev, ctx := needGPU(t)
	n := testdev.Must(cuda.DeviceCount())(t)
	v := testdev.Must(cuda.DriverVersion())(t)
	name := testdev.Must(dev.Name())(t)
	total := testdev.Must(dev.TotalMem())(t)
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	pools := testdev.Must(dev.Attribute(cuda.AttrMemoryPoolsSupported))(t)
	sms := testdev.Must(dev.Attribute(cuda.AttrMultiprocessorCount))(t)
	free, total2, err := ctx.MemGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("driver %d, %d device(s); device 0: %q, %d MiB, sm_%d%d, %d SMs, pools %d, free %d MiB",
		v, n, name, total>>20, major, minor, sms, pools, free>>20)
	if n < 1 || v < 11020 || name == "" || total == 0 || major < 7 || pools != 1 || sms < 1 {
		t.Errorf("implausible properties")
	}
	if total2 != total || free == 0 || free > total {
		t.Errorf("MemGetInfo free %d total %d, TotalMem %d", free, total2, total)
	}
	if !cuda.Has("cuMemAllocAsync") || !cuda.Has("cuEventElapsedTime") {
		t.Errorf("driver lacks stream-ordered allocation or event timing")
	}
	if got := cuda.ErrorName(cuda.Result(2)); got != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("driver's name for 2 is %q", got)
	}
}

// Retaining the primary context again gives the same context, and a
// release balances a retain: the test binary's own retain keeps it alive.
func TestPrimaryContextRetainRelease(t *testing.T) {
	dev, ctx := needGPU(t)
	again := testdev.Must(dev.PrimaryCtxRetain())(t)
	if again != ctx {
		t.Errorf("second retain gave context %#x, want the primary %#x", again, ctx)
	}
	if err := dev.PrimaryCtxRelease(); err != nil {
		t.Fatalf("release: %v", err)
	}
	p := testdev.Must(ctx.MemAlloc(1 << 20))(t)
	if err := ctx.MemFree(p); err != nil {
		t.Fatalf("context unusable after a balanced retain and release: %v", err)
	}
}

func TestInvalidOrdinal(t *testing.T) {
	needGPU(t)
	n := testdev.Must(cuda.DeviceCount())(t)
	for _, ord := range []int{-1, n, 1 << 40} {
		if _, err := cuda.GetDevice(ord); !errors.Is(err, cuda.ErrInvalidDevice) {
			t.Errorf("GetDevice(%d): %v, want ErrInvalidDevice", ord, err)
		}
	}
}

// The context rule: a call works on any OS thread, whatever is current
// there, and leaves its context current.
func TestContextBoundOnAnyThread(t *testing.T) {
	_, ctx := needGPU(t)
	s := newStream(t, ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A thread of its own, with no context current on it.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := cuda.Context(0).SetCurrent(); err != nil {
				errs <- err
				return
			}
			p, err := ctx.MemAllocAsync(1<<16, s)
			if err != nil {
				errs <- err
				return
			}
			if err := ctx.MemFreeAsync(p, s); err != nil {
				errs <- err
				return
			}
			if cur, err := cuda.CurrentContext(); err != nil || cur != ctx {
				errs <- errors.New("context not left current")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}

func TestNullHandles(t *testing.T) {
	_, ctx := needGPU(t)
	s := newStream(t, ctx)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"EventRecord(0)", ctx.EventRecord(0, s), cuda.ErrInvalidHandle},
		{"EventQuery(0)", ctx.EventQuery(0), cuda.ErrInvalidHandle},
		{"EventSynchronize(0)", ctx.EventSynchronize(0), cuda.ErrInvalidHandle},
		{"EventDestroy(0)", ctx.EventDestroy(0), cuda.ErrInvalidHandle},
		{"StreamWaitEvent(s, 0)", ctx.StreamWaitEvent(s, 0), cuda.ErrInvalidHandle},
		{"StreamDestroy(0)", ctx.StreamDestroy(0), cuda.ErrInvalidHandle},
		{"MemPoolTrimTo(0)", ctx.MemPoolTrimTo(0, 0), cuda.ErrInvalidHandle},
		{"ModuleUnload(0)", ctx.ModuleUnload(0), cuda.ErrInvalidHandle},
		{"null context", cuda.Context(0).Synchronize(), cuda.ErrInvalidContext},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
}

func TestStreamsAndEvents(t *testing.T) {
	_, ctx := needGPU(t)
	k := loadKernels(t, ctx)
	s1, s2 := newStream(t, ctx), newStream(t, ctx)
	e := newEvent(t, ctx, cuda.EventDisableTiming)
	if err := ctx.EventQuery(e); err != nil {
		t.Fatalf("never-recorded event: %v, want nil", err)
	}
	// s1 spins; an event recorded after the spin is not ready, and s2,
	// waiting on it, is not either.
	k.spin(t, s1, 200*time.Millisecond)
	if err := ctx.EventRecord(e, s1); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamWaitEvent(s2, e); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamQuery(s1); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("StreamQuery(spinning s1) = %v, want ErrNotReady", err)
	}
	if err := ctx.EventQuery(e); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("EventQuery(behind spin) = %v, want ErrNotReady", err)
	}
	if err := ctx.EventSynchronize(e); err != nil {
		t.Fatal(err)
	}
	if err := ctx.EventQuery(e); err != nil {
		t.Errorf("EventQuery after Synchronize = %v", err)
	}
	if err := ctx.StreamSynchronize(s2); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamQuery(s2); err != nil {
		t.Errorf("StreamQuery(idle s2) = %v", err)
	}
}

func TestEventTiming(t *testing.T) {
	_, ctx := needGPU(t)
	k := loadKernels(t, ctx)
	s := newStream(t, ctx)
	start, end := newEvent(t, ctx, cuda.EventDefault), newEvent(t, ctx, cuda.EventDefault)
	untimed := newEvent(t, ctx, cuda.EventDisableTiming)
	for _, e := range []cuda.Event{start, untimed} {
		if err := ctx.EventRecord(e, s); err != nil {
			t.Fatal(err)
		}
	}
	k.spin(t, s, 20*time.Millisecond)
	if err := ctx.EventRecord(end, s); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.EventElapsed(start, end); !errors.Is(err, cuda.ErrNotReady) {
		t.Errorf("elapsed before completion: %v, want ErrNotReady", err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	d, err := ctx.EventElapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if d < 19*time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("a 20ms spin measured %v", d)
	}
	if _, err := ctx.EventElapsed(untimed, end); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("elapsed from an untimed event: %v, want ErrInvalidHandle", err)
	}
}

func TestMemory(t *testing.T) {
	_, ctx := needGPU(t)
	s := newStream(t, ctx)
	const n = 1 << 20
	a := testdev.Must(ctx.MemAllocAsync(n, s))(t)
	b := testdev.Must(ctx.MemAlloc(n))(t)
	if a == 0 || b == 0 || a%256 != 0 || b%256 != 0 {
		t.Fatalf("pointers %#x %#x", a, b)
	}
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := ctx.MemcpyHtoDAsync(a, src, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemcpyDtoDAsync(b, a, n, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemsetD8Async(b+100, 0xAB, 50, s); err != nil {
		t.Fatal(err)
	}
	// Into pinned memory the copy is asynchronous: read it after a sync.
	pinned := testdev.Must(ctx.MemAllocHost(n))(t)
	host := unsafe.Slice((*byte)(pinned), n)
	if err := ctx.MemcpyDtoHAsync(host, b, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	for i := range host {
		want := src[i]
		if i >= 100 && i < 150 {
			want = 0xAB
		}
		if host[i] != want {
			t.Fatalf("byte %d = %#x, want %#x", i, host[i], want)
		}
	}
	// Into Go memory (pageable) the copy is complete when the call returns.
	back := make([]byte, n)
	if err := ctx.MemcpyDtoHAsync(back, a, s); err != nil {
		t.Fatal(err)
	}
	if string(back) != string(src) {
		t.Fatal("pageable DtoH copy differs")
	}
	if err := ctx.MemFreeAsync(a, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemFree(b); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemFreeHost(pinned); err != nil {
		t.Fatal(err)
	}
	// Managed memory is reachable from the device.
	m := testdev.Must(ctx.MemAllocManaged(4096, cuda.MemAttachGlobal))(t)
	if err := ctx.MemsetD8Async(m, 0x5A, 4096, s); err != nil {
		t.Fatal(err)
	}
	var last [1]byte
	if err := ctx.MemcpyDtoHAsync(last[:], m+4095, s); err != nil {
		t.Fatal(err)
	}
	if last[0] != 0x5A {
		t.Errorf("managed byte = %#x", last[0])
	}
	if err := ctx.MemFree(m); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}

func TestBadSizes(t *testing.T) {
	_, ctx := needGPU(t)
	s := newStream(t, ctx)
	const absurd = 1 << 50 // 1 PiB
	if _, err := ctx.MemAlloc(absurd); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("MemAlloc(1 PiB): %v, want ErrOutOfMemory", err)
	}
	if _, err := ctx.MemAllocAsync(absurd, s); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("MemAllocAsync(1 PiB): %v, want ErrOutOfMemory", err)
	}
	if _, err := ctx.MemAlloc(0); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("MemAlloc(0): %v, want ErrInvalidValue", err)
	}
	// The driver accepts a stream-ordered allocation of 0 bytes (seen on
	// the H100; gpu/cudagpu refuses it). Whatever it returned goes back.
	p0, err := ctx.MemAllocAsync(0, s)
	t.Logf("MemAllocAsync(0): %#x, %v", p0, err)
	if err == nil && p0 != 0 {
		if err := ctx.MemFreeAsync(p0, s); err != nil {
			t.Errorf("freeing the 0-byte allocation: %v", err)
		}
	}
	// The device is still usable.
	p := testdev.Must(ctx.MemAllocAsync(1<<20, s))(t)
	if err := ctx.MemFreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatalf("after out-of-memory: %v", err)
	}
}

func TestMemPools(t *testing.T) {
	dev, ctx := needGPU(t)
	s := newStream(t, ctx)
	def := testdev.Must(dev.DefaultMemPool())(t)
	if cur := testdev.Must(dev.MemPool())(t); cur != def {
		t.Errorf("current pool %#x is not the default %#x", cur, def)
	}
	pool := testdev.Must(ctx.MemPoolCreate(dev))(t)
	defer func() {
		if err := ctx.MemPoolDestroy(pool); err != nil {
			t.Error(err)
		}
	}()
	for _, a := range []cuda.PoolAttribute{cuda.PoolReuseFollowEventDependencies, cuda.PoolReuseAllowOpportunistic, cuda.PoolReuseAllowInternalDependencies} {
		if err := ctx.MemPoolSetAttribute(pool, a, 0); err != nil {
			t.Fatal(err)
		}
		if v := testdev.Must(ctx.MemPoolAttribute(pool, a))(t); v != 0 {
			t.Errorf("attribute %d = %d after setting 0", a, v)
		}
		if err := ctx.MemPoolSetAttribute(pool, a, 1); err != nil {
			t.Fatal(err)
		}
		if v := testdev.Must(ctx.MemPoolAttribute(pool, a))(t); v != 1 {
			t.Errorf("attribute %d = %d after setting 1", a, v)
		}
		if err := ctx.MemPoolSetAttribute(pool, a, 2); !errors.Is(err, cuda.ErrInvalidValue) {
			t.Errorf("reuse policy 2: %v, want ErrInvalidValue", err)
		}
	}
	const n = 64 << 20
	if err := ctx.MemPoolSetAttribute(pool, cuda.PoolReleaseThreshold, 1<<40); err != nil {
		t.Fatal(err)
	}
	p := testdev.Must(ctx.MemAllocFromPoolAsync(n, pool, s))(t)
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	used := testdev.Must(ctx.MemPoolAttribute(pool, cuda.PoolUsedMemCurrent))(t)
	if used < n {
		t.Errorf("used %d while %d allocated", used, n)
	}
	if err := ctx.MemFreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	reserved := testdev.Must(ctx.MemPoolAttribute(pool, cuda.PoolReservedMemCurrent))(t)
	used = testdev.Must(ctx.MemPoolAttribute(pool, cuda.PoolUsedMemCurrent))(t)
	high := testdev.Must(ctx.MemPoolAttribute(pool, cuda.PoolUsedMemHigh))(t)
	if reserved < n || used != 0 || high < n {
		t.Errorf("after free with a high threshold: reserved %d used %d used-high %d", reserved, used, high)
	}
	if err := ctx.MemPoolTrimTo(pool, 0); err != nil {
		t.Fatal(err)
	}
	if r := testdev.Must(ctx.MemPoolAttribute(pool, cuda.PoolReservedMemCurrent))(t); r != 0 {
		t.Errorf("reserved %d after TrimTo(0)", r)
	}
	if err := ctx.MemPoolSetAttribute(pool, cuda.PoolUsedMemHigh, 0); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemPoolSetAttribute(pool, cuda.PoolUsedMemHigh, 5); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("setting a high-water mark to 5: %v, want ErrInvalidValue", err)
	}
	if err := ctx.MemPoolSetAttribute(pool, cuda.PoolReservedMemCurrent, 0); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("setting reserved-current: %v, want ErrInvalidValue", err)
	}
	if _, err := ctx.MemPoolAttribute(pool, 99); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("attribute 99: %v, want ErrInvalidValue", err)
	}
	// The device's current pool can be switched and switched back.
	if err := dev.SetMemPool(pool); err != nil {
		t.Fatal(err)
	}
	if cur := testdev.Must(dev.MemPool())(t); cur != pool {
		t.Errorf("current pool %#x after SetMemPool(%#x)", cur, pool)
	}
	if err := dev.SetMemPool(def); err != nil {
		t.Fatal(err)
	}
}

// An event of one context recorded on a stream of another is refused.
func TestEventFromAnotherContext(t *testing.T) {
	dev, ctx := needGPU(t)
	other, err := cuda.CtxCreate(dev)
	if err != nil {
		t.Fatalf("CtxCreate: %v", err)
	}
	defer func() {
		if err := other.Destroy(); err != nil {
			t.Error(err)
		}
	}()
	if cur := testdev.Must(cuda.CurrentContext())(t); cur == other {
		t.Error("CtxCreate left the new context current")
	}
	foreign := testdev.Must(other.EventCreate(cuda.EventDisableTiming))(t)
	defer other.EventDestroy(foreign)
	s := newStream(t, ctx)
	// The driver's answer, seen on the H100 (driver 580): invalid handle.
	err = ctx.EventRecord(foreign, s)
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Op != "cuEventRecord" || !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Fatalf("recording another context's event: %v, want an *Error of cuEventRecord matching ErrInvalidHandle", err)
	}
	// The stream is still usable.
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatalf("after the refused record: %v", err)
	}
}

// kernelSet is the built-in kernels loaded straight through this package.
type kernelSet struct {
	ctx                 cuda.Context
	fill, check, spinFn cuda.Function
}

func loadKernels(tb testing.TB, ctx cuda.Context) *kernelSet {
	tb.Helper()
	m := testdev.Must(ctx.ModuleLoadData(kernels.PTX))(tb)
	tb.Cleanup(func() {
		if err := ctx.ModuleUnload(m); err != nil {
			tb.Error(err)
		}
	})
	return &kernelSet{
		ctx:    ctx,
		fill:   testdev.Must(ctx.ModuleGetFunction(m, kernels.FillEntry))(tb),
		check:  testdev.Must(ctx.ModuleGetFunction(m, kernels.CheckEntry))(tb),
		spinFn: testdev.Must(ctx.ModuleGetFunction(m, kernels.SpinEntry))(tb),
	}
}

func (k *kernelSet) spin(tb testing.TB, s cuda.Stream, d time.Duration) {
	tb.Helper()
	var p cuda.Params
	p.U64(uint64(d))
	if err := k.ctx.LaunchKernel(k.spinFn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, &p); err != nil {
		tb.Fatal(err)
	}
}

func TestKernels(t *testing.T) {
	_, ctx := needGPU(t)
	k := loadKernels(t, ctx)
	s := newStream(t, ctx)
	const words = 1<<20 + 3
	const seed = 0xC0FFEE
	p := testdev.Must(ctx.MemAllocAsync(4*words, s))(t)
	errCount := testdev.Must(ctx.MemAllocAsync(4, s))(t)
	if err := ctx.MemsetD8Async(errCount, 0, 4, s); err != nil {
		t.Fatal(err)
	}
	var fp cuda.Params
	fp.Ptr(p)
	fp.U64(words)
	fp.U32(seed)
	if err := ctx.LaunchKernel(k.fill, [3]uint32{4096, 1, 1}, [3]uint32{256, 1, 1}, 0, s, &fp); err != nil {
		t.Fatal(err)
	}
	host := make([]byte, 4*words)
	if err := ctx.MemcpyDtoHAsync(host, p, s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < words; i++ {
		if got := binary.LittleEndian.Uint32(host[4*i:]); got != seed+uint32(i) {
			t.Fatalf("word %d = %#x, want %#x", i, got, seed+uint32(i))
		}
	}
	// Plant three mismatches; check must count exactly them.
	for _, i := range []int{0, 77777, words - 1} {
		if err := ctx.MemsetD8Async(p+cuda.DevicePtr(4*i), 0xFF, 1, s); err != nil {
			t.Fatal(err)
		}
	}
	var cp cuda.Params
	cp.Ptr(p)
	cp.U64(words)
	cp.U32(seed)
	cp.Ptr(errCount)
	if err := ctx.LaunchKernel(k.check, [3]uint32{4096, 1, 1}, [3]uint32{256, 1, 1}, 0, s, &cp); err != nil {
		t.Fatal(err)
	}
	var cnt [4]byte
	if err := ctx.MemcpyDtoHAsync(cnt[:], errCount, s); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(cnt[:]); got != 3 {
		t.Errorf("check counted %d mismatches, want 3", got)
	}
	if err := ctx.MemFreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemFreeAsync(errCount, s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}

func TestFuncParamSizes(t *testing.T) {
	_, ctx := needGPU(t)
	k := loadKernels(t, ctx)
	for _, tt := range []struct {
		f    cuda.Function
		want string
	}{
		{k.fill, "[8 8 4]"},
		{k.check, "[8 8 4 8]"},
		{k.spinFn, "[8]"},
	} {
		sizes, err := ctx.FuncParamSizes(tt.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(sizes); got != tt.want {
			t.Errorf("parameter sizes %s, want %s", got, tt.want)
		}
	}
	if _, err := ctx.FuncParamSizes(0); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("FuncParamSizes(0): %v", err)
	}
}

func TestModuleAndLaunchErrors(t *testing.T) {
	_, ctx := needGPU(t)
	k := loadKernels(t, ctx)
	s := newStream(t, ctx)
	m := testdev.Must(ctx.ModuleLoadData(kernels.PTX))(t)
	defer ctx.ModuleUnload(m)
	if _, err := ctx.ModuleGetFunction(m, "no_such_kernel"); !errors.Is(err, cuda.ErrNotFound) {
		t.Errorf("unknown function: %v, want ErrNotFound", err)
	}
	_, err := ctx.ModuleLoadData(".version 7.0\n.target sm_70\n.address_size 64\nthis is not ptx\n")
	if !errors.Is(err, cuda.ErrInvalidPTX) && !errors.Is(err, cuda.ErrInvalidImage) {
		t.Errorf("bad PTX: %v, want ErrInvalidPTX", err)
	}
	if _, err := ctx.ModuleLoadData("a\x00b"); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("PTX with NUL: %v, want ErrInvalidValue", err)
	}
	var many cuda.Params
	for range cuda.MaxParams + 1 {
		many.U64(1)
	}
	if err := ctx.LaunchKernel(k.spinFn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, &many); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("too many params: %v, want ErrInvalidValue", err)
	}
	var one cuda.Params
	one.U64(0)
	if err := ctx.LaunchKernel(k.spinFn, [3]uint32{0, 1, 1}, [3]uint32{1, 1, 1}, 0, s, &one); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("zero grid: %v, want ErrInvalidValue", err)
	}
	if err := ctx.LaunchKernel(k.spinFn, [3]uint32{1, 1, 1}, [3]uint32{4096, 1, 1}, 0, s, &one); err == nil {
		t.Errorf("4096 threads per block launched")
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}

// The hot calls allocate nothing.
func TestHotCallsDoNotAllocate(t *testing.T) {
	_, ctx := needGPU(t)
	s1, s2 := newStream(t, ctx), newStream(t, ctx)
	e := newEvent(t, ctx, cuda.EventDisableTiming)
	var failed error
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := ctx.MemAllocAsync(4096, s1)
		if err == nil {
			err = ctx.MemFreeAsync(p, s1)
		}
		if err == nil {
			err = ctx.EventRecord(e, s1)
		}
		if err == nil {
			err = ctx.StreamWaitEvent(s2, e)
		}
		if err == nil {
			err = ctx.EventQuery(e)
			if errors.Is(err, cuda.ErrNotReady) {
				err = nil
			}
		}
		if err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Errorf("hot calls allocate %.1f times per round, want 0", allocs)
	}
	if err := ctx.StreamSynchronize(s2); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkMemAllocAsyncFreeAsync(b *testing.B) {
	_, ctx := needGPU(b)
	s := newStream(b, ctx)
	b.ReportAllocs()
	for b.Loop() {
		p, err := ctx.MemAllocAsync(1<<20, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := ctx.MemFreeAsync(p, s); err != nil {
			b.Fatal(err)
		}
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkMemAllocFree(b *testing.B) {
	_, ctx := needGPU(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := ctx.MemAlloc(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := ctx.MemFree(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEventRecord(b *testing.B) {
	_, ctx := needGPU(b)
	s := newStream(b, ctx)
	e := newEvent(b, ctx, cuda.EventDisableTiming)
	b.ReportAllocs()
	for b.Loop() {
		if err := ctx.EventRecord(e, s); err != nil {
			b.Fatal(err)
		}
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkStreamWaitEvent(b *testing.B) {
	_, ctx := needGPU(b)
	s1, s2 := newStream(b, ctx), newStream(b, ctx)
	e := newEvent(b, ctx, cuda.EventDisableTiming)
	if err := ctx.EventRecord(e, s1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := ctx.StreamWaitEvent(s2, e); err != nil {
			b.Fatal(err)
		}
	}
	if err := ctx.StreamSynchronize(s2); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCgoCall is the floor under every call: one cgo call into the
// driver's cheapest entry point (cuDriverGetVersion).
func BenchmarkCgoCall(b *testing.B) {
	needGPU(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cuda.DriverVersion(); err != nil {
			b.Fatal(err)
		}
	}
}
