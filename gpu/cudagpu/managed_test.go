package cudagpu_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu/gputest"
)

// TestManagedConformance runs the managed-memory and host-pool suite,
// which the simulator also passes, on the GPU.
func TestManagedConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunManaged(t, d)
}

// The driver on the card exports the _v2 entry points of prefetch and
// advice that the binding resolves.
func TestManagedEntryPointsLoaded(t *testing.T) {
	needDevice(t)
	for _, api := range []string{"cuMemPrefetchAsync", "cuMemAdvise", "cuMemPoolCreate", "cuMemAllocFromPoolAsync"} {
		if !cuda.Has(api) {
			t.Errorf("the driver does not export %s", api)
		}
	}
}
