package mr

import (
	"slices"
	"testing"
	"unsafe"
)

// TestPoolChunkPadding: two chunks allocated back to back keep the
// fields that their homes' allocations and frees write (live, cached,
// first, pending) a cache line apart, and live, cached and small, which
// every one of them reads, within 32 bytes, so that they share a line
// when the chunk starts 0 or 32 bytes into one.
func TestPoolChunkPadding(t *testing.T) {
	var c poolChunk
	written := []uintptr{unsafe.Offsetof(c.live), unsafe.Offsetof(c.cached), unsafe.Offsetof(c.first), unsafe.Offsetof(c.pending)}
	lo, end := written[0], written[0]+8
	for _, o := range written {
		lo, end = min(lo, o), max(end, o+8)
	}
	if gap := unsafe.Sizeof(c) - end + lo; gap < cacheLine {
		t.Errorf("%d bytes between the counters of neighbouring chunks, want at least %d", gap, cacheLine)
	}
	hot := []uintptr{unsafe.Offsetof(c.live), unsafe.Offsetof(c.cached), unsafe.Offsetof(c.small)}
	if span := slices.Max(hot) + 8 - slices.Min(hot); span > 32 {
		t.Errorf("live, cached and small span %d bytes, want at most 32", span)
	}
}
