package sim_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/gputest"
	_ "github.com/streamalloc/streamalloc/gpu/kernels" // registers the Go kernels
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestConformance runs the backend conformance suite on the simulator.
func TestConformance(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	gputest.Run(t, dev)
}

// TestManagedConformance runs the managed-memory and host-pool suite on
// the simulator.
func TestManagedConformance(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	gputest.RunManaged(t, dev)
}
