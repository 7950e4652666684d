// The data of one trace, as the page's script reads it: a header and
// columns in a container (container.go).
//
// A trace's results share what belongs to the trace (its times, its
// blocks, its streams and stacks): those columns are taken from the first
// result with a timeline, and every other result of the trace charts with
// it only if its timeline covers the same events and blocks. What belongs
// to a resource (where its blocks went, its reserved bytes, its segments)
// is a set of columns per resource, named r<k>.<column>.
//
// Columns of the trace (Blocks rows unless said):
//
//	time          ns since the first event, per event (absent if untimed);
//	              made non-decreasing, a drop of more than 12 h taken as
//	              midnight in a log of times of day
//	alloc, free   event indexes (free -1: not freed within the timeline)
//	size          bytes
//	stream, fstream  indexes into streams (fstream -1 while free is -1)
//	stack         index into stacks, -1 for none
//
// Columns of resource k:
//
//	r<k>.failed   1 if the resource refused the block
//	r<k>.seg      index of the block's map segment, -1 for none
//	r<k>.off      the block's offset in its segment
//	r<k>.res.ev, r<k>.res.val   reserved bytes: steps (from event ev on)
//	r<k>.s.from, .s.to, .s.size, .s.lane, .s.stream, .s.kind,
//	r<k>.s.hi, .s.lo            the map's segments (layout.go), sorted by
//	                            from; hi and lo the two halves of the base
//
// A trace without any timeline carries, per resource with a series,
// r<k>.res.ev and r<k>.res.val from the series (each point's maximum from
// the first event it covers), and live.ev, live.val likewise.

package report

import (
	"strconv"
	"time"

	"github.com/streamalloc/streamalloc/replay"
)

// traceHeader is the JSON header of a trace's container.
type traceHeader struct {
	Name      string `json:"name"`
	Events    int64  `json:"events"`
	Truncated bool   `json:"truncated"`
	Timed     bool   `json:"timed"`
	// SeriesOnly: no result of the trace recorded a timeline; the
	// overview comes from the series.
	SeriesOnly bool                   `json:"seriesOnly"`
	Blocks     int                    `json:"blocks"`
	Streams    []string               `json:"streams"`
	Frames     []string               `json:"frames"`
	Stacks     [][]int                `json:"stacks"`
	Resources  []resourceHeader       `json:"resources"`
	Columns    map[string]columnEntry `json:"columns"`
}

// resourceHeader describes one charted result of the trace.
type resourceHeader struct {
	Name         string `json:"name"`
	Color        string `json:"color"`
	PeakReserved uint64 `json:"peakReserved"`
	PeakLive     uint64 `json:"peakLive"`
	Failures     int64  `json:"failures"`
	// Segments says what the memory map shows: "reported" (the
	// resource's own segments), "regions" (address ranges of its blocks;
	// the resource reports no segments) or "" (no timeline).
	Segments  string `json:"segments"`
	MapSegs   int    `json:"mapSegments"`
	MapHeight int64  `json:"mapHeight"`
	Upstream  int    `json:"upstream"` // blocks that are segments of their own
}

// traceData is one trace's container and what the markup says of it.
type traceData struct {
	header traceHeader
	blob   string   // the container, base64
	left   []string // results of the trace that are not charted
}

// chartedResult is a result and its legend name.
type chartedResult struct {
	r     *replay.Result
	name  string
	color string
}

// timelineTimes converts the timeline's times to non-decreasing
// nanoseconds since the first event.
func timelineTimes(ts []time.Duration) []int64 {
	out := make([]int64, len(ts))
	var day, prev time.Duration
	for i, t := range ts {
		t += day
		if i > 0 && t < prev-12*time.Hour {
			// A time of day that wrapped past midnight.
			day += 24 * time.Hour
			t += 24 * time.Hour
		}
		if i > 0 && t < prev {
			t = prev
		}
		prev = t
		out[i] = int64(t - ts[0])
	}
	return out
}

// sameTrace reports whether two timelines cover the same events and blocks.
func sameTrace(a, b *replay.Timeline) bool {
	if a.Events != b.Events || len(a.Blocks) != len(b.Blocks) || len(a.Streams) != len(b.Streams) {
		return false
	}
	for i := range a.Blocks {
		x, y := &a.Blocks[i], &b.Blocks[i]
		if x.Alloc != y.Alloc || x.Free != y.Free || x.Size != y.Size || x.Stream != y.Stream {
			return false
		}
	}
	return true
}

// buildTraceData builds the container of one trace from its charted
// results (in legend order).
func buildTraceData(name string, charted []chartedResult) (*traceData, error) {
	td := &traceData{header: traceHeader{Name: name, Streams: []string{}, Frames: []string{}, Stacks: [][]int{}}}
	var base *replay.Timeline
	for _, c := range charted {
		if c.r.Timeline != nil {
			base = c.r.Timeline
			break
		}
	}
	var cols []column
	var kept []chartedResult
	if base != nil {
		for _, c := range charted {
			if c.r.Timeline != nil && sameTrace(base, c.r.Timeline) {
				kept = append(kept, c)
			} else {
				td.left = append(td.left, c.name)
			}
		}
		cols = traceColumns(&td.header, base)
		for k, c := range kept {
			rh, rc := resourceColumns(k, c, c.r.Timeline)
			td.header.Resources = append(td.header.Resources, rh)
			cols = append(cols, rc...)
		}
	} else {
		td.header.SeriesOnly = true
		var live []replay.Sample
		for _, c := range charted {
			if len(c.r.Series) == 0 {
				td.left = append(td.left, c.name)
				continue
			}
			kept = append(kept, c)
			if len(c.r.Series) > len(live) {
				live = c.r.Series
			}
			td.header.Events = max(td.header.Events, c.r.Events, c.r.Series[len(c.r.Series)-1].Event+1)
		}
		if len(kept) == 0 {
			return td, nil
		}
		ev, val := seriesSteps(live, func(s replay.Sample) uint64 { return s.Live })
		cols = append(cols, column{name: "live.ev", vals: ev, delta: true}, column{name: "live.val", vals: val})
		for k, c := range kept {
			td.header.Resources = append(td.header.Resources, resourceHeader{Name: c.name, Color: c.color,
				PeakReserved: c.r.PeakReservedBytes, PeakLive: c.r.PeakLiveBytes, Failures: c.r.Failures})
			ev, val := seriesSteps(c.r.Series, func(s replay.Sample) uint64 { return s.Reserved })
			p := resPrefix(k)
			cols = append(cols, column{name: p + "res.ev", vals: ev, delta: true}, column{name: p + "res.val", vals: val})
		}
	}
	blob, err := encodeContainer(&td.header, func(d map[string]columnEntry) { td.header.Columns = d }, cols)
	if err != nil {
		return nil, err
	}
	td.blob = blob
	return td, nil
}

// seriesSteps turns a series into steps: each point's value from the
// first event it covers. Points out of order (not from a replay) are
// dropped.
func seriesSteps(s []replay.Sample, field func(replay.Sample) uint64) (ev, val []int64) {
	next := int64(0)
	for _, p := range s {
		if p.Event < next || p.Event >= maxExact {
			continue
		}
		ev = append(ev, next)
		val = append(val, int64(min(field(p), maxExact)))
		next = p.Event + 1
	}
	return ev, val
}

func resPrefix(k int) string { return "r" + strconv.Itoa(k) + "." }

// traceColumns fills the trace's part of the header from tl and returns
// its columns.
func traceColumns(h *traceHeader, tl *replay.Timeline) []column {
	h.Events = tl.Events
	h.Truncated = tl.Truncated
	h.Timed = tl.Times != nil
	h.Blocks = len(tl.Blocks)
	for _, s := range tl.Streams {
		h.Streams = append(h.Streams, "0x"+strconv.FormatUint(s, 16))
	}
	// Frames once each, stacks as lists of frame indexes.
	frameIndex := map[string]int{}
	for _, st := range tl.Stacks {
		ids := make([]int, len(st))
		for i, f := range st {
			s := f.String()
			id, ok := frameIndex[s]
			if !ok {
				id = len(h.Frames)
				h.Frames = append(h.Frames, s)
				frameIndex[s] = id
			}
			ids[i] = id
		}
		h.Stacks = append(h.Stacks, ids)
	}
	n := len(tl.Blocks)
	alloc, free, size := make([]int64, n), make([]int64, n), make([]int64, n)
	stream, fstream, stack := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, b := range tl.Blocks {
		alloc[i], free[i], size[i] = b.Alloc, b.Free, min(b.Size, maxExact)
		stream[i], fstream[i], stack[i] = int64(b.Stream), int64(b.FreeStream), int64(b.Stack)
	}
	cols := []column{
		{name: "alloc", vals: alloc, delta: true},
		{name: "free", vals: free},
		{name: "size", vals: size},
		{name: "stream", vals: stream},
		{name: "fstream", vals: fstream},
		{name: "stack", vals: stack},
	}
	if h.Timed {
		cols = append(cols, column{name: "time", vals: timelineTimes(tl.Times), delta: true})
	}
	return cols
}

// resourceColumns returns the header and the columns of the k-th charted
// resource.
func resourceColumns(k int, c chartedResult, tl *replay.Timeline) (resourceHeader, []column) {
	rh := resourceHeader{Name: c.name, Color: c.color, PeakReserved: c.r.PeakReservedBytes,
		PeakLive: c.r.PeakLiveBytes, Failures: c.r.Failures, Segments: "regions"}
	if tl.SegmentsKnown {
		rh.Segments = "reported"
	}
	m := buildMap(tl)
	rh.MapSegs, rh.MapHeight = len(m.segs), m.height
	n := len(tl.Blocks)
	failed, seg, off := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, b := range tl.Blocks {
		if b.Failed {
			failed[i] = 1
		}
		seg[i], off[i] = int64(m.blockSeg[i]), m.blockOff[i]
	}
	resEv, resVal := make([]int64, len(tl.Reserved)), make([]int64, len(tl.Reserved))
	for i, s := range tl.Reserved {
		resEv[i], resVal[i] = s.Event, int64(min(s.Bytes, maxExact))
	}
	ns := len(m.segs)
	from, to, size, lane := make([]int64, ns), make([]int64, ns), make([]int64, ns), make([]int64, ns)
	stream, kind, hi, lo := make([]int64, ns), make([]int64, ns), make([]int64, ns), make([]int64, ns)
	for i, s := range m.segs {
		from[i], to[i], size[i], lane[i] = s.from, s.to, min(s.size, maxExact), min(s.lane, maxExact)
		stream[i], kind[i] = int64(s.stream), int64(s.kind)
		hi[i], lo[i] = int64(s.base>>32), int64(s.base&0xffffffff)
		if s.kind == segUpstream {
			rh.Upstream++
		}
	}
	p := resPrefix(k)
	return rh, []column{
		{name: p + "failed", vals: failed},
		{name: p + "seg", vals: seg},
		{name: p + "off", vals: off},
		{name: p + "res.ev", vals: resEv, delta: true},
		{name: p + "res.val", vals: resVal},
		{name: p + "s.from", vals: from, delta: true},
		{name: p + "s.to", vals: to},
		{name: p + "s.size", vals: size},
		{name: p + "s.lane", vals: lane},
		{name: p + "s.stream", vals: stream},
		{name: p + "s.kind", vals: kind},
		{name: p + "s.hi", vals: hi},
		{name: p + "s.lo", vals: lo},
	}
}
