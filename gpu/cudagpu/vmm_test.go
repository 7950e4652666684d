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

// TestPhysicalSharingConformance runs the sharing suite on the GPU, the
// device exporting to itself (package ipc's two-process test crosses a
// real process boundary).
func TestPhysicalSharingConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunPhysicalSharing(t, d, d)
}
