package mr

import (
	"testing"
	"unsafe"
)

// TestPoolChunkPadding: two chunks allocated back to back keep the
// counters that their homes' pairs write (first..cached) a cache line
// apart.
func TestPoolChunkPadding(t *testing.T) {
	var c poolChunk
	end := unsafe.Offsetof(c.cached) + unsafe.Sizeof(c.cached)
	if gap := unsafe.Sizeof(c) - end + unsafe.Offsetof(c.first); gap < cacheLine {
		t.Errorf("%d bytes between the counters of neighbouring chunks, want at least %d", gap, cacheLine)
	}
}
