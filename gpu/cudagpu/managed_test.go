package cudagpu_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/gputest"
)

// TestManagedConformance runs the managed-memory and host-pool suite,
// which the simulator also passes, on the GPU.
func TestManagedConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunManaged(t, d)
}
