package report

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/replay"
)

// checkMap checks the invariants of layout.go on m built from tl: alive
// segments never share lane space, every granted block has a segment
// alive from its allocation (to its free, for reported segments) that
// contains it, and the height covers the lanes.
func checkMap(t *testing.T, tl *replay.Timeline, m *memoryMap) {
	t.Helper()
	for i := 1; i < len(m.segs); i++ {
		if m.segs[i].from < m.segs[i-1].from {
			t.Fatalf("segments not sorted by from at %d", i)
		}
	}
	for e := int64(0); e < tl.Events; e++ {
		var sum int64
		for i := range m.segs {
			a := &m.segs[i]
			if !a.alive(e) {
				continue
			}
			sum += a.size
			if a.lane < 0 || a.lane+a.size > m.height {
				t.Fatalf("segment %d lane %d+%d outside the map's height %d", i, a.lane, a.size, m.height)
			}
			for j := i + 1; j < len(m.segs); j++ {
				b := &m.segs[j]
				if b.alive(e) && a.lane < b.lane+b.size && b.lane < a.lane+a.size {
					t.Fatalf("after event %d segments %d %+v and %d %+v share lanes", e, i, *a, j, *b)
				}
			}
		}
		if sum > m.height {
			t.Fatalf("after event %d: %d bytes of segments alive, map height %d", e, sum, m.height)
		}
	}
	for i, b := range tl.Blocks {
		k := m.blockSeg[i]
		if b.Failed || b.Size == 0 || b.Addr == 0 {
			if k != -1 {
				t.Errorf("block %d %+v has segment %d", i, b, k)
			}
			continue
		}
		if k < 0 {
			t.Fatalf("granted block %d %+v has no segment", i, b)
		}
		s := &m.segs[k]
		if b.Addr < s.base || b.Addr+uint64(b.Size) > s.base+uint64(s.size) || int64(b.Addr-s.base) != m.blockOff[i] {
			t.Fatalf("block %d %+v at offset %d of segment %+v", i, b, m.blockOff[i], *s)
		}
		last := b.Free - 1
		if b.Free < 0 {
			last = tl.Events - 1
		}
		if !s.alive(b.Alloc) || (s.kind != segReported && !s.alive(last)) {
			t.Fatalf("block %d %+v in segment %+v not alive over its life", i, b, *s)
		}
	}
}

func TestBuildMapReported(t *testing.T) {
	tl := &replay.Timeline{
		Events:        8,
		SegmentsKnown: true,
		Streams:       []uint64{0, 7},
		Segments: []replay.SegmentSpan{
			{Base: 0x1000, Size: 0x1000, Stream: 0, From: 0, To: 4},  // a chunk...
			{Base: 0x1000, Size: 0x1000, Stream: 1, From: 4, To: -1}, // ...that changes owner: same lane
			{Base: 0x8000, Size: 0x2000, Stream: 0, From: 1, To: 3},
			{Base: 0x9000, Size: 0x800, Stream: 1, From: 3, To: -1}, // inside the released one's old range
		},
		Blocks: []replay.Block{
			{Alloc: 0, Free: 6, Size: 0x100, Addr: 0x1100, Stack: -1},
			{Alloc: 1, Free: 2, Size: 0x2000, Addr: 0x8000, Stack: -1},
			{Alloc: 2, Free: -1, Size: 0x10, Failed: true, Stack: -1},
			{Alloc: 3, Free: 5, Size: 0x200, Addr: 0x9100, Stack: -1},
			{Alloc: 5, Free: 7, Size: 0x4000, Addr: 0x20000, Stack: -1}, // in no segment: its own
			{Alloc: 6, Free: -1, Size: 0, Stack: -1},
		},
	}
	m := buildMap(tl)
	checkMap(t, tl, m)
	got := ""
	for _, s := range m.segs {
		got += fmt.Sprintf("%#x+%#x k%d s%d %d..%d lane %#x; ", s.base, s.size, s.kind, s.stream, s.from, s.to, s.lane)
	}
	want := "0x1000+0x1000 k0 s0 0..4 lane 0x0; " +
		"0x8000+0x2000 k0 s0 1..3 lane 0x1000; " +
		"0x9000+0x800 k0 s1 3..-1 lane 0x1000; " +
		"0x1000+0x1000 k0 s1 4..-1 lane 0x0; " +
		"0x20000+0x4000 k1 s0 5..7 lane 0x1800; "
	if got != want {
		t.Errorf("segments\n got %s\nwant %s", got, want)
	}
	if fmt.Sprint(m.blockSeg) != "[0 1 -1 2 4 -1]" || m.height != 0x5800 {
		t.Errorf("block segments %v, height %#x", m.blockSeg, m.height)
	}
}

// A resource that reports no segments gets the union of its blocks'
// address ranges, each alive from its first allocation to its last free.
func TestBuildMapRegions(t *testing.T) {
	tl := &replay.Timeline{
		Events: 6,
		Blocks: []replay.Block{
			{Alloc: 0, Free: 2, Size: 0x100, Addr: 0x1000},
			{Alloc: 1, Free: 4, Size: 0x100, Addr: 0x1100}, // touches the first: one region
			{Alloc: 2, Free: 3, Size: 0x80, Addr: 0x1040},  // inside it, later
			{Alloc: 3, Free: -1, Size: 0x100, Addr: 0x5000},
			{Alloc: 4, Free: 5, Size: 0x10, Failed: true},
		},
	}
	m := buildMap(tl)
	checkMap(t, tl, m)
	if len(m.segs) != 2 {
		t.Fatalf("regions %+v", m.segs)
	}
	a, b := m.segs[0], m.segs[1]
	if a.base != 0x1000 || a.size != 0x200 || a.from != 0 || a.to != 4 || a.kind != segRegion || a.stream != -1 ||
		b.base != 0x5000 || b.size != 0x100 || b.from != 3 || b.to != -1 {
		t.Errorf("regions %+v %+v", a, b)
	}
	if fmt.Sprint(m.blockSeg) != "[0 0 0 1 -1]" || fmt.Sprint(m.blockOff) != "[0 256 64 0 0]" {
		t.Errorf("blocks %v at %v", m.blockSeg, m.blockOff)
	}
	if b.lane != 0x200 || m.height != 0x300 {
		t.Errorf("lanes: %#x, height %#x", b.lane, m.height)
	}
}

// randomTimeline builds a timeline with segments that come and go, change
// owner, and blocks inside them or outside all of them, from a seed.
func randomTimeline(rng *rand.Rand, known bool) *replay.Timeline {
	tl := &replay.Timeline{Events: int64(10 + rng.IntN(60)), SegmentsKnown: known, Streams: []uint64{0, 1, 2}}
	type live struct {
		seg  replay.SegmentSpan
		used []bool // 16 slots of size/16
	}
	var open []*live
	next := uint64(1 << 20)
	for e := int64(0); e < tl.Events; e++ {
		switch rng.IntN(6) {
		case 0, 1: // a new segment
			size := int64(16 * (1 + rng.IntN(8)) * 256)
			base := next
			if rng.IntN(3) == 0 && len(tl.Segments) > 0 { // reuse an old address range
				base = tl.Segments[rng.IntN(len(tl.Segments))].Base
			}
			next += uint64(size) + uint64(rng.IntN(4))*4096
			l := &live{seg: replay.SegmentSpan{Base: base, Size: size, Stream: int32(rng.IntN(3)) - 1, From: e, To: -1}, used: make([]bool, 16)}
			clash := false
			for _, o := range open {
				if o.seg.Base < base+uint64(size) && base < o.seg.Base+uint64(o.seg.Size) {
					clash = true
				}
			}
			if !clash {
				open = append(open, l)
			}
		case 2: // a segment goes, or changes owner
			if len(open) > 0 {
				k := rng.IntN(len(open))
				l := open[k]
				l.seg.To = e
				tl.Segments = append(tl.Segments, l.seg)
				open = append(open[:k], open[k+1:]...)
				if rng.IntN(2) == 0 {
					l.seg.From, l.seg.To, l.seg.Stream = e, -1, int32(rng.IntN(3))-1
					open = append(open, l)
				}
			}
		default: // a block, in a segment or of its own; freed later or never
			b := replay.Block{Alloc: e, Free: -1, Stack: -1, Size: int64(1 + rng.IntN(200))}
			if rng.IntN(8) == 0 {
				b.Failed = true
			} else if len(open) > 0 && rng.IntN(4) > 0 {
				l := open[rng.IntN(len(open))]
				slot := rng.IntN(16)
				b.Addr = l.seg.Base + uint64(slot)*uint64(l.seg.Size/16)
				b.Size = min(b.Size, l.seg.Size/16)
				// It lives while the segment does (the resource keeps a
				// segment with a live block).
				if l.seg.To < 0 {
					b.Free = -1
				}
			} else {
				b.Addr = next
				next += uint64(b.Size) + 256
				if rng.IntN(2) == 0 {
					b.Free = e + 1 + rng.Int64N(tl.Events-e)
					if b.Free >= tl.Events {
						b.Free = -1
					}
				}
			}
			tl.Blocks = append(tl.Blocks, b)
		}
	}
	for _, l := range open {
		tl.Segments = append(tl.Segments, l.seg)
	}
	return tl
}

func FuzzBuildMap(f *testing.F) {
	for i := range 20 {
		f.Add(uint64(i), i%3 != 0)
	}
	f.Fuzz(func(t *testing.T, seed uint64, known bool) {
		tl := randomTimeline(rand.New(rand.NewPCG(seed, 1)), known)
		checkMap(t, tl, buildMap(tl))
	})
}

func randomTimelineSeed(seed uint64, known bool) *replay.Timeline {
	return randomTimeline(rand.New(rand.NewPCG(seed, 1)), known)
}
