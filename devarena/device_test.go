package devarena

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

// testDevice is the device the behaviour tests and the benchmark run on:
// the simulator unless STREAMALLOC_DEVICE says otherwise (the GPU script
// sets it to cuda; see internal/testdev).
func testDevice(tb testing.TB) gpu.Device {
	tb.Helper()
	return testdev.Device(tb)
}

// simDevice is a fresh simulated device, for tests of the simulator's
// hooks and for "another device" in the bad-input tests.
func simDevice(tb testing.TB) gpu.Device {
	tb.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		tb.Fatalf("simulated device: %v", err)
	}
	return dev
}
