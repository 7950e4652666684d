package devarena

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// testDevice is the device the behaviour tests run on.
func testDevice(tb testing.TB) gpu.Device {
	tb.Helper()
	return simDevice(tb)
}

// simDevice is a fresh simulated device.
func simDevice(tb testing.TB) gpu.Device {
	tb.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		tb.Fatalf("simulated device: %v", err)
	}
	return dev
}
