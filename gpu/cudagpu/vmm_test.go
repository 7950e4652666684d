package cudagpu_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/gputest"
)

// TestVirtualMemoryConformance runs the virtual-memory suite, which the
// simulator also passes, on the GPU.
func TestVirtualMemoryConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunVirtualMemory(t, d)
}
