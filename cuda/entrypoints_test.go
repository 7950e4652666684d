// The table of every entry point of package cuda, and the helper process
// that checks them under a chosen driver.
//
// Tests that need a particular driver state (no library at all, a library
// without cuInit, a driver that finds no device, one missing an entry
// point) cannot get it in the test process itself, where the driver is
// loaded once. They re-run the test binary with STREAMALLOC_CUDA_LIBRARY
// pointing at what they want and helperEnv naming the check to make;
// TestMain runs that check instead of the tests and exits non-zero, with
// the failures on stderr, if it fails.

package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
)

const helperEnv = "STREAMALLOC_CUDA_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

// entryPoint is one call of the package with arguments that would be
// valid handles' stand-ins; with no usable driver none of them reaches
// the driver.
type entryPoint struct {
	name string
	call func() error
}

func entryPoints() []entryPoint {
	ctx := cuda.Context(1)
	dev := cuda.Device(0)
	s := cuda.Stream(1)
	e := cuda.Event(1)
	pool := cuda.MemPool(1)
	mod := cuda.Module(1)
	fn := cuda.Function(1)
	buf := make([]byte, 16)
	var params cuda.Params
	params.U32(1)
	first := func(_ any, err error) error { return err }
	eps := []entryPoint{
		{"Init", cuda.Init},
		{"DeviceCount", func() error { return first(cuda.DeviceCount()) }},
		{"GetDevice", func() error { return first(cuda.GetDevice(0)) }},
		{"Device.Name", func() error { return first(dev.Name()) }},
		{"Device.TotalMem", func() error { return first(dev.TotalMem()) }},
		{"Device.Attribute", func() error { return first(dev.Attribute(cuda.AttrMemoryPoolsSupported)) }},
		{"Device.ComputeCapability", func() error { _, _, err := dev.ComputeCapability(); return err }},
		{"Device.PrimaryCtxRetain", func() error { return first(dev.PrimaryCtxRetain()) }},
		{"Device.PrimaryCtxRelease", dev.PrimaryCtxRelease},
		{"Device.DefaultMemPool", func() error { return first(dev.DefaultMemPool()) }},
		{"Device.MemPool", func() error { return first(dev.MemPool()) }},
		{"Device.SetMemPool", func() error { return dev.SetMemPool(pool) }},
		{"CurrentContext", func() error { return first(cuda.CurrentContext()) }},
		{"Context.SetCurrent", ctx.SetCurrent},
		{"CtxCreate", func() error { return first(cuda.CtxCreate(dev)) }},
		{"Context.Destroy", ctx.Destroy},
		{"Context.Synchronize", ctx.Synchronize},
		{"Context.MemGetInfo", func() error { _, _, err := ctx.MemGetInfo(); return err }},
		{"Context.StreamCreate", func() error { return first(ctx.StreamCreate(cuda.StreamNonBlocking)) }},
		{"Context.StreamDestroy", func() error { return ctx.StreamDestroy(s) }},
		{"Context.StreamSynchronize", func() error { return ctx.StreamSynchronize(s) }},
		{"Context.StreamQuery", func() error { return ctx.StreamQuery(s) }},
		{"Context.StreamWaitEvent", func() error { return ctx.StreamWaitEvent(s, e) }},
		{"Context.EventCreate", func() error { return first(ctx.EventCreate(cuda.EventDisableTiming)) }},
		{"Context.EventDestroy", func() error { return ctx.EventDestroy(e) }},
		{"Context.EventRecord", func() error { return ctx.EventRecord(e, s) }},
		{"Context.EventQuery", func() error { return ctx.EventQuery(e) }},
		{"Context.EventSynchronize", func() error { return ctx.EventSynchronize(e) }},
		{"Context.EventElapsed", func() error { return first(ctx.EventElapsed(e, e)) }},
		{"Context.MemAlloc", func() error { return first(ctx.MemAlloc(256)) }},
		{"Context.MemFree", func() error { return ctx.MemFree(0x1000) }},
		{"Context.MemAllocAsync", func() error { return first(ctx.MemAllocAsync(256, s)) }},
		{"Context.MemFreeAsync", func() error { return ctx.MemFreeAsync(0x1000, s) }},
		{"Context.MemAllocFromPoolAsync", func() error { return first(ctx.MemAllocFromPoolAsync(256, pool, s)) }},
		{"Context.MemAllocManaged", func() error { return first(ctx.MemAllocManaged(256, cuda.MemAttachGlobal)) }},
		{"Context.MemAllocHost", func() error { return first(ctx.MemAllocHost(256)) }},
		{"Context.MemFreeHost", func() error { return ctx.MemFreeHost(unsafe.Pointer(&buf[0])) }},
		{"Context.MemsetD8Async", func() error { return ctx.MemsetD8Async(0x1000, 7, 16, s) }},
		{"Context.MemcpyHtoDAsync", func() error { return ctx.MemcpyHtoDAsync(0x1000, buf, s) }},
		{"Context.MemcpyDtoHAsync", func() error { return ctx.MemcpyDtoHAsync(buf, 0x1000, s) }},
		{"Context.MemcpyDtoDAsync", func() error { return ctx.MemcpyDtoDAsync(0x1000, 0x2000, 16, s) }},
		{"Context.MemPoolCreate", func() error { return first(ctx.MemPoolCreate(dev)) }},
		{"Context.MemPoolDestroy", func() error { return ctx.MemPoolDestroy(pool) }},
		{"Context.MemPoolAttribute", func() error { return first(ctx.MemPoolAttribute(pool, cuda.PoolReleaseThreshold)) }},
		{"Context.MemPoolSetAttribute", func() error { return ctx.MemPoolSetAttribute(pool, cuda.PoolReleaseThreshold, 0) }},
		{"Context.MemPoolTrimTo", func() error { return ctx.MemPoolTrimTo(pool, 0) }},
		{"Context.ModuleLoadData", func() error { return first(ctx.ModuleLoadData(".version 7.0")) }},
		{"Context.ModuleUnload", func() error { return ctx.ModuleUnload(mod) }},
		{"Context.ModuleGetFunction", func() error { return first(ctx.ModuleGetFunction(mod, "k")) }},
		{"Context.FuncParamSizes", func() error { return first(ctx.FuncParamSizes(fn)) }},
		{"Context.LaunchKernel", func() error {
			return ctx.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, &params)
		}},
		// Foreign-handle wing.
		{"Context.StreamContext", func() error { return first(ctx.StreamContext(s)) }},
		{"Context.Device", func() error { return first(ctx.Device()) }},
	}
	return append(append(append(eps, captureEntryPoints()...), vmmEntryPoints()...), managedEntryPoints()...)
}

// checkAll reports every entry point whose error does not match want.
func checkAll(want error) []string {
	var bad []string
	for _, ep := range entryPoints() {
		if err := ep.call(); !errors.Is(err, want) {
			bad = append(bad, fmt.Sprintf("%s: got %v, want %v", ep.name, err, want))
		}
	}
	return bad
}

// runHelper makes the check named by mode in this (child) process and
// returns its exit status.
func runHelper(mode string) int {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	switch mode {
	case "nodriver":
		// No library at all: everything is ErrNoDriver, the version too.
		bad = checkAll(cuda.ErrNoDriver)
		if v, err := cuda.DriverVersion(); !errors.Is(err, cuda.ErrNoDriver) || v != 0 {
			fail("DriverVersion: got %d, %v; want 0, ErrNoDriver", v, err)
		}
		if cuda.Has("cuInit") {
			fail("Has(cuInit) with no driver")
		}
		if got := cuda.ErrorName(cuda.ErrOutOfMemory); got != "CUDA_ERROR_OUT_OF_MEMORY" {
			fail("ErrorName without driver: %q", got)
		}
	case "nocuinit":
		// A library without cuInit is no driver either, and says why.
		bad = checkAll(cuda.ErrNoDriver)
		if err := cuda.Init(); err == nil || !strings.Contains(err.Error(), "has no cuInit") {
			fail("Init: %v, want it to name the missing cuInit", err)
		}
	case "nodevice":
		// A driver whose cuInit finds no device: every entry point but
		// the version says ErrNoDevice, as an *Error naming cuInit.
		bad = checkAll(cuda.ErrNoDevice)
		var ce *cuda.Error
		if err := cuda.Init(); !errors.As(err, &ce) || ce.Op != "cuInit" {
			fail("Init: %v, want *cuda.Error from cuInit", err)
		}
		if os.Getenv("STREAMALLOC_CUDA_FAKE_VERSION") != "" {
			if v, err := cuda.DriverVersion(); err != nil || v != 13000 {
				fail("DriverVersion: got %d, %v; want 13000 from the stand-in", v, err)
			}
		} else if v, err := cuda.DriverVersion(); err != nil || v <= 0 {
			fail("DriverVersion with no device: got %d, %v; want the real version", v, err)
		}
	case "hotcalls":
		// A stand-in that counts its entry points (hotcalls_test.go).
		bad = hotCalls()
	case "missing":
		// A driver that initializes but lacks every other entry point:
		// calls fail with ErrNotSupported, never by calling NULL.
		if err := cuda.Init(); err != nil {
			fail("Init: %v", err)
		}
		if !cuda.Has("cuInit") || cuda.Has("cuMemAllocAsync") {
			fail("Has: cuInit %v, cuMemAllocAsync %v; want true, false", cuda.Has("cuInit"), cuda.Has("cuMemAllocAsync"))
		}
		for _, ep := range entryPoints() {
			if ep.name == "Init" {
				continue
			}
			if err := ep.call(); !errors.Is(err, cuda.ErrNotSupported) {
				fail("%s: got %v, want ErrNotSupported", ep.name, err)
			}
		}
	default:
		fail("unknown helper mode %q", mode)
	}
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, b)
	}
	if len(bad) > 0 {
		return 1
	}
	fmt.Println("helper", mode, "ok")
	return 0
}
