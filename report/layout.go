// The memory map of one resource: which segment holds each block, and
// where each segment is drawn.
//
// The map's segments come from the replay's timeline. A resource that
// reports its segments (mr.SegmentReporter: chunks, superblocks) gives them
// directly, and every block it granted lies in the one alive at its
// allocation that contains it; a block in none (an allocation the resource
// passed to its upstream whole, as an Arena's large requests) is a segment
// of its own. A resource that reports none (Direct, Async) gets regions:
// the union of the address ranges its blocks ever occupied, each alive from
// its first allocation to its last free, labelled as such on the page.
//
// Addresses of different segments are far apart and reused over time, so
// the map does not draw addresses: it packs segments into lanes, first fit
// in the order they appear, a lane being free again once its segment is
// released. A segment that continues another (the same base and size from
// the event the other ended: a change of owning stream) keeps its lane, so
// a chunk and its blocks do not jump. A block is drawn at its segment's
// lane plus its offset in the segment.
//
// Invariants (layout_test.go checks them, and the fuzz test on random
// timelines): two segments alive after the same event never overlap in
// lanes; every block granted has a segment alive from its allocation on
// that contains it; the map's height is at least the largest sum of the
// sizes of the segments alive at once.

package report

import (
	"cmp"
	"slices"

	"github.com/streamalloc/streamalloc/replay"
)

// The kinds of map segments.
const (
	segReported = 0 // reported by the resource (mr.SegmentReporter)
	segUpstream = 1 // a block in no reported segment: its own upstream allocation
	segRegion   = 2 // an address range of blocks of a resource that reports no segments
)

// mapSegment is one segment of the map.
type mapSegment struct {
	base     uint64
	size     int64
	stream   int32 // index in the timeline's streams, -1 if none
	from, to int64 // alive after events from through to-1; to -1: to the end
	kind     uint8
	lane     int64 // offset of its lane from the bottom of the map
}

// alive reports whether s exists after event e.
func (s *mapSegment) alive(e int64) bool { return s.from <= e && (s.to < 0 || s.to > e) }

// memoryMap is the map of one resource's timeline.
type memoryMap struct {
	segs []mapSegment // sorted by from, then base
	// blockSeg[i] is the index of block i's segment, -1 if it has none
	// (refused, or of size 0); blockOff[i] its offset in it.
	blockSeg []int32
	blockOff []int64
	height   int64 // top of the highest lane
}

// buildMap assigns the blocks of tl to segments and lays the segments out.
func buildMap(tl *replay.Timeline) *memoryMap {
	m := &memoryMap{blockSeg: make([]int32, len(tl.Blocks)), blockOff: make([]int64, len(tl.Blocks))}
	for i := range m.blockSeg {
		m.blockSeg[i] = -1
	}
	granted := func(b *replay.Block) bool { return !b.Failed && b.Size > 0 && b.Addr != 0 }
	if tl.SegmentsKnown {
		for _, s := range tl.Segments {
			m.segs = append(m.segs, mapSegment{base: s.Base, size: s.Size, stream: s.Stream, from: s.From, to: s.To, kind: segReported})
		}
		find := newSegmentFinder(m.segs)
		for i := range tl.Blocks {
			b := &tl.Blocks[i]
			if !granted(b) {
				continue
			}
			if k := find.at(b.Addr, b.Size, b.Alloc); k >= 0 {
				m.blockSeg[i] = int32(k)
				continue
			}
			m.blockSeg[i] = int32(len(m.segs))
			m.segs = append(m.segs, mapSegment{base: b.Addr, size: b.Size, stream: b.Stream, from: b.Alloc, to: b.Free, kind: segUpstream})
		}
	} else {
		m.regions(tl, granted)
	}
	for i, k := range m.blockSeg {
		if k >= 0 {
			m.blockOff[i] = int64(tl.Blocks[i].Addr - m.segs[k].base)
		}
	}
	m.sortSegments()
	m.layLanes()
	return m
}

// regions makes one segment of each maximal address range that the
// granted blocks cover (overlapping or touching ranges merge).
func (m *memoryMap) regions(tl *replay.Timeline, granted func(*replay.Block) bool) {
	var idx []int
	for i := range tl.Blocks {
		if granted(&tl.Blocks[i]) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(tl.Blocks[a].Addr, tl.Blocks[b].Addr) })
	for j := 0; j < len(idx); {
		b := &tl.Blocks[idx[j]]
		seg := mapSegment{base: b.Addr, stream: -1, from: b.Alloc, to: b.Free, kind: segRegion}
		end := b.Addr + uint64(b.Size)
		k := j
		for ; k < len(idx) && tl.Blocks[idx[k]].Addr <= end; k++ {
			c := &tl.Blocks[idx[k]]
			end = max(end, c.Addr+uint64(c.Size))
			seg.from = min(seg.from, c.Alloc)
			if seg.to >= 0 && (c.Free < 0 || c.Free > seg.to) {
				seg.to = c.Free
			}
			m.blockSeg[idx[k]] = int32(len(m.segs))
		}
		seg.size = int64(end - seg.base)
		m.segs = append(m.segs, seg)
		j = k
	}
}

// sortSegments orders the segments by from, then base, and renumbers the
// blocks' references.
func (m *memoryMap) sortSegments() {
	order := make([]int, len(m.segs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		sa, sb := &m.segs[a], &m.segs[b]
		if c := cmp.Compare(sa.from, sb.from); c != 0 {
			return c
		}
		return cmp.Compare(sa.base, sb.base)
	})
	newIndex := make([]int32, len(m.segs))
	segs := make([]mapSegment, len(m.segs))
	for to, from := range order {
		segs[to] = m.segs[from]
		newIndex[from] = int32(to)
	}
	m.segs = segs
	for i, k := range m.blockSeg {
		if k >= 0 {
			m.blockSeg[i] = newIndex[k]
		}
	}
}

// layLanes gives every segment a lane: first fit over the segments alive
// when it appears, its predecessor's lane for a continuation.
func (m *memoryMap) layLanes() {
	type key struct {
		base uint64
		size int64
		at   int64
	}
	ending := map[key]int{} // segments by (base, size, to)
	for i, s := range m.segs {
		if s.to >= 0 {
			ending[key{s.base, s.size, s.to}] = i
		}
	}
	var active []int // alive segments, sorted by lane
	for start := 0; start < len(m.segs); {
		now := m.segs[start].from
		end := start
		for end < len(m.segs) && m.segs[end].from == now {
			end++
		}
		// Release what ended at or before now.
		active = slices.DeleteFunc(active, func(i int) bool { return m.segs[i].to >= 0 && m.segs[i].to <= now })
		// Continuations first, in their predecessors' lanes (free: the
		// predecessor just left them).
		var rest []int
		for i := start; i < end; i++ {
			s := &m.segs[i]
			if p, ok := ending[key{s.base, s.size, now}]; ok && p < i && m.segs[p].kind == s.kind && laneFree(m.segs, active, m.segs[p].lane, s.size) {
				s.lane = m.segs[p].lane
				active = insertByLane(m.segs, active, i)
				continue
			}
			rest = append(rest, i)
		}
		for _, i := range rest {
			m.segs[i].lane = firstFit(m.segs, active, m.segs[i].size)
			active = insertByLane(m.segs, active, i)
		}
		for _, i := range active {
			m.height = max(m.height, m.segs[i].lane+m.segs[i].size)
		}
		start = end
	}
}

// firstFit returns the lowest lane offset where size bytes fit between
// the active segments (sorted by lane).
func firstFit(segs []mapSegment, active []int, size int64) int64 {
	at := int64(0)
	for _, i := range active {
		if segs[i].lane-at >= size {
			return at
		}
		at = max(at, segs[i].lane+segs[i].size)
	}
	return at
}

// laneFree reports whether [lane, lane+size) meets no active segment.
func laneFree(segs []mapSegment, active []int, lane, size int64) bool {
	for _, i := range active {
		if segs[i].lane < lane+size && lane < segs[i].lane+segs[i].size {
			return false
		}
	}
	return true
}

func insertByLane(segs []mapSegment, active []int, i int) []int {
	k, _ := slices.BinarySearchFunc(active, segs[i].lane, func(j int, lane int64) int { return cmp.Compare(segs[j].lane, lane) })
	return slices.Insert(active, k, i)
}

// segmentFinder finds the reported segment that holds a block.
type segmentFinder struct {
	segs    []mapSegment
	byBase  []int // segment indexes sorted by base
	maxSize int64
}

func newSegmentFinder(segs []mapSegment) *segmentFinder {
	f := &segmentFinder{segs: segs, byBase: make([]int, len(segs))}
	for i := range segs {
		f.byBase[i] = i
		f.maxSize = max(f.maxSize, segs[i].size)
	}
	slices.SortFunc(f.byBase, func(a, b int) int { return cmp.Compare(segs[a].base, segs[b].base) })
	return f
}

// at returns the index of the segment alive after event e that contains
// [addr, addr+size), or -1.
func (f *segmentFinder) at(addr uint64, size int64, e int64) int {
	// Segments with base <= addr, nearest first, while one could still
	// reach addr.
	k, _ := slices.BinarySearchFunc(f.byBase, addr, func(i int, a uint64) int {
		if f.segs[i].base <= a {
			return -1
		}
		return 1
	})
	for k--; k >= 0; k-- {
		s := &f.segs[f.byBase[k]]
		if addr-s.base >= uint64(f.maxSize) {
			break
		}
		if s.alive(e) && addr+uint64(size) <= s.base+uint64(s.size) {
			return f.byBase[k]
		}
	}
	return -1
}
