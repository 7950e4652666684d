// Package testdev gives tests the GPU backend, or device, that the
// environment asks for, so that one test runs on the simulator by default
// (go test ./..., CI) and on the real GPU when the GPU script runs it.
//
// STREAMALLOC_DEVICE selects: "sim" (the default: a fresh simulator for
// each call), "cuda" (the real driver; a test fails, never skips, when it
// cannot be used, so a GPU run that tested nothing cannot pass), or "auto"
// (cuda if usable, else sim). Anything else fails the test.
//
// Tests that use the real driver whatever the variable says (the cuda and
// cudagpu packages' own) call SkipWithoutGPU with the error of opening it;
// Must is the value-or-fail helper they share.
package testdev

import (
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
)

// Env is the environment variable that selects the backend.
const Env = "STREAMALLOC_DEVICE"

// Kind is the backend kind the environment asks for ("sim" if unset).
func Kind() string {
	if k := os.Getenv(Env); k != "" {
		return k
	}
	return "sim"
}

// Backend returns the backend of Kind(), failing tb if it cannot be
// opened. A simulator is new on every call, so tests do not share state;
// the CUDA backend is the process's one.
func Backend(tb testing.TB) gpu.Backend {
	tb.Helper()
	b, err := backend.Open(Kind())
	if err != nil {
		tb.Fatalf("testdev: %s=%q: %v", Env, Kind(), err)
	}
	return b
}

// Device returns device 0 of Backend(tb). On the real GPU it also checks,
// when the test ends, that the device has no error pending (a
// cuCtxSynchronize that fails means some work of the test failed).
func Device(tb testing.TB) gpu.Device {
	tb.Helper()
	b := Backend(tb)
	d, err := b.Device(0)
	if err != nil {
		tb.Fatalf("testdev: %s device 0: %v", b.Name(), err)
	}
	if !b.Simulated() {
		tb.Cleanup(func() {
			if err := d.Synchronize(); err != nil {
				tb.Errorf("testdev: device left in error after the test: %v", err)
			}
		})
	}
	return d
}

// Foreign returns a device that nothing made on Device belongs to:
// device 0 of a fresh simulator, whatever Kind says, for the checks that
// a stream of another device is refused (mrtest.Options.Foreign). On the
// GPU it is another backend's device, which resources must refuse too.
func Foreign(tb testing.TB) gpu.Device {
	tb.Helper()
	b, err := backend.Open("sim")
	if err != nil {
		tb.Fatalf("testdev: foreign device: %v", err)
	}
	d, err := b.Device(0)
	if err != nil {
		tb.Fatalf("testdev: foreign device: %v", err)
	}
	return d
}

// SkipWithoutGPU is for tests that use the real driver directly, whatever
// Kind says: given err, the error of opening the GPU, it skips tb, or
// fails it when the environment says a GPU is expected (Env=cuda, as the
// GPU script sets), so that a GPU run that tested nothing cannot pass.
// A nil err does nothing.
func SkipWithoutGPU(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if Kind() == "cuda" {
		tb.Fatalf("testdev: %s=cuda but no usable GPU: %v", Env, err)
	}
	tb.Skipf("no GPU: %v", err)
}

// Must(f())(tb) is f's value, tb failing at once if f failed.
func Must[T any](v T, err error) func(testing.TB) T {
	return func(tb testing.TB) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}
