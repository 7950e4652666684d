// Segments: the spans of upstream memory a suballocator cuts its
// allocations from, listed on demand, so that a report can show which
// live block keeps which span reserved.
//
// A segment is one allocation a resource made from its upstream to carve
// blocks out of: a Pool's chunk, an Arena's superblock, a FixedSize chunk
// (and the chunks of a Binning's FixedSize bins). Allocations passed to
// the upstream whole (an Arena's or a Binning's large requests) are not
// segments: each is its own upstream allocation, with nothing else in it.
//
// Invariants:
//   - AppendSegments reads the copy-on-write span indexes the resources keep
//     for their frees (spanindex.go) and atomic owner pointers, so it
//     takes no lock at all and allocates nothing when dst has room: a
//     replay may call it after every event.
//   - The list is in address order and its segments do not overlap. It is
//     exact when no operation runs concurrently; during one it is the
//     layout before or after each growth or release.
//   - A segment's Stream is the ID of the stream that owns it now (a Pool
//     chunk's home, an Arena superblock's arena), or 0: a superblock idle in
//     the Arena's global list, a chunk being released, or a resource whose
//     segments belong to no stream (FixedSize hands its blocks to any
//     stream).

package mr

import (
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// Segment is one span of upstream memory a resource allocates from.
type Segment struct {
	Base gpu.DevicePtr
	Size int
	// Stream is the ID (gpu.Stream.ID) of the stream the segment belongs
	// to, or 0 if it belongs to none.
	Stream uint64
}

// SegmentReporter is implemented by resources that cut their allocations
// out of larger spans of their upstream's memory (Pool, Arena, FixedSize,
// Binning).
type SegmentReporter interface {
	// AppendSegments appends the segments the resource holds now to dst,
	// in address order, and returns the extended slice. It takes no lock
	// and allocates nothing when dst has room.
	AppendSegments(dst []Segment) []Segment
}

var (
	_ SegmentReporter = (*Pool)(nil)
	_ SegmentReporter = (*Arena)(nil)
	_ SegmentReporter = (*FixedSize)(nil)
	_ SegmentReporter = (*Binning)(nil)
)

// AppendSegments appends the pool's chunks, each with the ID of its home
// stream.
func (p *Pool) AppendSegments(dst []Segment) []Segment {
	p.chunks.visit(func(e *span[*poolChunk]) {
		var home uint64
		if h := e.v.home.Load(); h != nil {
			home = h.id
		}
		dst = append(dst, Segment{Base: e.base, Size: e.size, Stream: home})
	})
	return dst
}

// AppendSegments appends the arena's superblocks, each with the ID of the
// stream whose arena owns it (0 while it waits in the global arena).
// Large allocations are not segments.
func (r *Arena) AppendSegments(dst []Segment) []Segment {
	r.index.visit(func(e *span[*superblock]) {
		var owner uint64
		if a := e.v.owner.Load(); a != nil {
			owner = a.s.ID()
		}
		dst = append(dst, Segment{Base: e.base, Size: e.size, Stream: owner})
	})
	return dst
}

// AppendSegments appends the resource's chunks; their blocks go to any
// stream, so Stream is 0.
func (r *FixedSize) AppendSegments(dst []Segment) []Segment {
	r.chunks.visit(func(e *span[*fsChunk]) {
		dst = append(dst, Segment{Base: e.base, Size: e.size})
	})
	return dst
}

// AppendSegments appends the chunks of every bin that reports segments
// (the FixedSize bins it made, and bins given in BinningOptions that
// implement SegmentReporter), merged into address order. Large
// allocations are not segments.
func (r *Binning) AppendSegments(dst []Segment) []Segment {
	start := len(dst)
	for _, b := range r.bins {
		if sr, ok := b.r.(SegmentReporter); ok {
			dst = sr.AppendSegments(dst)
		}
	}
	// Each bin's list is sorted; their union need not be. SortFunc is an
	// in-place pdqsort: no allocation.
	if !slices.IsSortedFunc(dst[start:], cmpSegments) {
		slices.SortFunc(dst[start:], cmpSegments)
	}
	return dst
}

func cmpSegments(a, b Segment) int {
	switch {
	case a.Base < b.Base:
		return -1
	case a.Base > b.Base:
		return 1
	}
	return 0
}
