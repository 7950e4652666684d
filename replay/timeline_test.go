package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/unpickle"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// The timeline of a small trace, event by event: blocks with their
// streams and addresses, a refused allocation, a duplicate address, an
// unknown free, a block never freed; times; reserved steps.
func TestTimelineExact(t *testing.T) {
	dev := &fakeDevice{}
	res := newFakeResource(dev, 1024)
	r, err := Run(context.Background(), csv(
		"1,10:00:00.000100,allocate,0x100,512,0xa",  // 0: block 0 at 0x10000
		"1,10:00:00.000200,allocate,0x200,1024,0xa", // 1: refused (512+1024 > 1024)
		"1,10:00:00.000300,allocate,0x300,256,0xb",  // 2: block 2 at 0x10200, stream 0xb
		"1,10:00:00.000300,free,0x999,8,0xa",        // 3: unknown free
		"1,10:00:00.000400,free,0x200,1024,0xa",     // 4: the refused block ends
		"1,10:00:00.000500,free,0x100,512,0xb",      // 5: block 0 freed on 0xb
		"1,10:00:00.000600,allocate,0x300,100,0xc",  // 6: duplicate: block 2 ends, block 3 at 0x10300
	), dev, res, Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	tl := r.Timeline
	if tl == nil {
		t.Fatal("no timeline")
	}
	if !r.Simulated {
		t.Error("Simulated false for a device whose properties say simulated")
	}
	want := Timeline{
		Events:  7,
		Streams: []uint64{0xa, 0xb, 0xc},
		Blocks: []Block{
			{Alloc: 0, Free: 5, Size: 512, Stream: 0, FreeStream: 1, Addr: 0x10000, Stack: -1},
			{Alloc: 1, Free: 4, Size: 1024, Stream: 0, FreeStream: 0, Failed: true, Stack: -1},
			{Alloc: 2, Free: 6, Size: 256, Stream: 1, FreeStream: 2, Addr: 0x10200, Stack: -1},
			{Alloc: 6, Free: -1, Size: 100, Stream: 2, FreeStream: -1, Addr: 0x10300, Stack: -1},
		},
		// The fake reserves its high-water mark of used bytes.
		Reserved: []Step{{0, 512}, {2, 768}},
	}
	for _, us := range []int{100, 200, 300, 300, 400, 500, 600} {
		want.Times = append(want.Times, 10*time.Hour+time.Duration(us)*time.Microsecond)
	}
	if got, w := fmt.Sprintf("%+v", *tl), fmt.Sprintf("%+v", want); got != w {
		t.Errorf("timeline\n got %s\nwant %s", got, w)
	}
	if tl.SegmentsKnown || tl.Segments != nil {
		t.Errorf("a resource without segments: known %v, %v", tl.SegmentsKnown, tl.Segments)
	}
}

// Times all 0 give no Times; without Options.Timeline there is no
// timeline at all.
func TestTimelineUntimedAndOff(t *testing.T) {
	lines := []string{"1,0,allocate,0x100,8,0", "1,0,free,0x100,8,0"}
	dev := &fakeDevice{}
	r, err := Run(context.Background(), csv(lines...), dev, newFakeResource(dev, 1<<20), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeline == nil || r.Timeline.Times != nil || r.Timeline.Events != 2 || len(r.Timeline.Blocks) != 1 {
		t.Errorf("untimed trace: %+v", r.Timeline)
	}
	r, err = Run(context.Background(), csv(lines...), dev, newFakeResource(dev, 1<<20), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeline != nil {
		t.Errorf("a timeline nobody asked for: %+v", r.Timeline)
	}
}

// Past TimelineEvents nothing is recorded: the replay goes on, blocks
// still open keep Free -1.
func TestTimelineLimit(t *testing.T) {
	dev := &fakeDevice{}
	r, err := Run(context.Background(), csv(
		"1,1,allocate,0x100,8,0",
		"1,2,allocate,0x200,8,0",
		"1,3,free,0x100,8,0",
		"1,4,free,0x200,8,0", // past the limit
		"1,5,allocate,0x300,8,0",
	), dev, newFakeResource(dev, 1<<20), Options{Timeline: true, TimelineEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	tl := r.Timeline
	if r.Events != 5 || tl.Events != 3 || !tl.Truncated || len(tl.Times) != 3 || len(tl.Blocks) != 2 {
		t.Fatalf("events %d, timeline %+v", r.Events, tl)
	}
	if tl.Blocks[0].Free != 2 || tl.Blocks[1].Free != -1 {
		t.Errorf("blocks %+v", tl.Blocks)
	}
}

// liveAfter derives the trace's live bytes after every event from the
// blocks, as a report does.
func liveAfter(tl *Timeline) []uint64 {
	d := make([]int64, tl.Events+1)
	for _, b := range tl.Blocks {
		d[b.Alloc] += b.Size
		if b.Free >= 0 {
			d[b.Free] -= b.Size
		}
	}
	out := make([]uint64, tl.Events)
	var live int64
	for i := range out {
		live += d[i]
		out[i] = uint64(live)
	}
	return out
}

// reservedAfter expands the reserved steps to one value per event.
func reservedAfter(tl *Timeline) []uint64 {
	out := make([]uint64, tl.Events)
	k := 0
	for i := range out {
		for k+1 < len(tl.Reserved) && tl.Reserved[k+1].Event <= int64(i) {
			k++
		}
		out[i] = tl.Reserved[k].Bytes
	}
	return out
}

// On the shared traces and the simulator, the timeline agrees with what
// the replay measured (live bytes derived from the blocks give the
// series and the peak; the reserved steps give the peak reserved), and,
// for the resources that report segments, the segments explain the
// reserved bytes: alive after each event they add up to what the pool
// reserved (at most what the arena reserved: its large allocations are
// not segments), and every block granted lies in a segment alive from its
// allocation to its free (every block of the arena up to LargeSize, of
// binning up to its largest bin).
func TestTimelineOnSharedTraces(t *testing.T) {
	files, err := filepath.Glob("testdata/*.csv.gz")
	if err != nil || len(files) != 3 {
		t.Fatalf("shared traces: %v %v", files, err)
	}
	for _, file := range files {
		for _, rs := range simResources {
			if testing.Short() && rs.name != "pool" {
				continue
			}
			t.Run(filepath.Base(file)+"/"+rs.name, func(t *testing.T) {
				dev, err := sim.New(sim.Config{}).Device(0)
				if err != nil {
					t.Fatal(err)
				}
				res := rs.make(t, dev)
				f, err := trace.Open(file, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				r, err := Run(context.Background(), f, dev, res, Options{SeriesPoints: 500, Timeline: true})
				if err != nil {
					t.Fatal(err)
				}
				switch rs.name {
				case "pool":
					checkTimeline(t, r, true, 0)
				case "arena":
					// Requests above LargeSize (half the 4 MiB
					// superblock) go to the upstream whole.
					checkTimeline(t, r, false, 2<<20)
				case "binning":
					// Above its largest bin (1 MiB) as well.
					checkTimeline(t, r, false, 1<<20)
				default:
					checkTimeline(t, r, false, -1)
				}
			})
		}
	}
}

// checkTimeline checks r's timeline against r. exact: the segments add
// up to the reserved bytes; large: blocks above it need no segment (-1:
// the resource reports none).
func checkTimeline(t *testing.T, r *Result, exact bool, large int64) {
	t.Helper()
	tl := r.Timeline
	if tl.Events != r.Events || tl.Truncated || int64(len(tl.Times)) != r.Events || int64(len(tl.Blocks)) != r.Allocations {
		t.Fatalf("timeline of %d events, %d times, %d blocks; result %d events, %d allocations",
			tl.Events, len(tl.Times), len(tl.Blocks), r.Events, r.Allocations)
	}
	if len(tl.Streams) != r.Streams {
		t.Errorf("%d timeline streams, %d replayed", len(tl.Streams), r.Streams)
	}
	live := liveAfter(tl)
	var peak uint64
	for _, v := range live {
		peak = max(peak, v)
	}
	if peak != r.PeakLiveBytes {
		t.Errorf("peak live from the blocks %d, replay %d", peak, r.PeakLiveBytes)
	}
	reserved := reservedAfter(tl)
	from := int64(0)
	for _, s := range r.Series {
		var l, res uint64
		for i := from; i <= s.Event; i++ {
			l, res = max(l, live[i]), max(res, reserved[i])
		}
		if l != s.Live || res != s.Reserved || s.Time != tl.Times[s.Event] {
			t.Fatalf("series point at event %d: live %d reserved %d time %v; timeline gives %d %d %v",
				s.Event, s.Live, s.Reserved, s.Time, l, res, tl.Times[s.Event])
		}
		from = s.Event + 1
	}
	var peakRes uint64
	for _, st := range tl.Reserved {
		peakRes = max(peakRes, st.Bytes)
	}
	if peakRes != r.PeakReservedBytes {
		t.Errorf("peak of the reserved steps %d, replay %d", peakRes, r.PeakReservedBytes)
	}
	for i := 1; i < len(tl.Times); i++ {
		if tl.Blocks != nil && i < len(tl.Blocks) && tl.Blocks[i].Alloc < tl.Blocks[i-1].Alloc {
			t.Fatalf("blocks out of allocation order at %d", i)
		}
	}
	if large < 0 {
		if tl.SegmentsKnown || len(tl.Segments) != 0 {
			t.Errorf("segments from a resource that reports none: %d", len(tl.Segments))
		}
		return
	}
	if !tl.SegmentsKnown || len(tl.Segments) == 0 {
		t.Fatalf("no segments: known %v, %d spans", tl.SegmentsKnown, len(tl.Segments))
	}
	// Sum of the spans alive after each event == reserved after it.
	d := make([]int64, tl.Events+1)
	for _, s := range tl.Segments {
		if s.From < 0 || s.From >= tl.Events || (s.To >= 0 && s.To <= s.From) || s.Size <= 0 {
			t.Fatalf("bad span %+v", s)
		}
		d[s.From] += s.Size
		if s.To >= 0 {
			d[s.To] -= s.Size
		}
	}
	var sum int64
	for i := range tl.Events {
		sum += d[i]
		if uint64(sum) != reserved[i] && (exact || uint64(sum) > reserved[i]) {
			t.Fatalf("after event %d: segments add up to %d, reserved %d", i, sum, reserved[i])
		}
	}
	// Every granted block lies in a segment alive after its allocation
	// and after the event before its free.
	covered := func(addr uint64, size int64, e int64) bool {
		for _, s := range tl.Segments {
			if s.From <= e && (s.To < 0 || s.To > e) && addr >= s.Base && addr+uint64(size) <= s.Base+uint64(s.Size) {
				return true
			}
		}
		return false
	}
	for i, b := range tl.Blocks {
		if b.Failed || b.Size == 0 || (large > 0 && b.Size > large) {
			continue
		}
		last := b.Free - 1
		if b.Free < 0 {
			last = tl.Events - 1
		}
		if !covered(b.Addr, b.Size, b.Alloc) || !covered(b.Addr, b.Size, last) {
			t.Fatalf("block %d %+v: not inside a segment alive at events %d and %d", i, b, b.Alloc, last)
		}
	}
	for _, s := range tl.Segments {
		if s.Stream < -1 || int(s.Stream) >= len(tl.Streams) {
			t.Fatalf("span %+v: stream index out of range", s)
		}
	}
}

// segResource is a fakeResource that reports segments: after its k-th
// allocation (1-based), those of script[k].
type segResource struct {
	*fakeResource
	script map[int][]mr.Segment
	segs   []mr.Segment
}

func (r *segResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := r.fakeResource.Allocate(size, s)
	if next, ok := r.script[r.allocs]; ok {
		r.segs = next
	}
	return p, err
}

func (r *segResource) AppendSegments(dst []mr.Segment) []mr.Segment { return append(dst, r.segs...) }

// Segment spans open when a segment appears, close when it goes or
// changes owner (a new span with the new owner follows), and name the
// owner by trace stream; a reporter below an adaptor is found through
// mr.Chain.
func TestTimelineSegmentSpans(t *testing.T) {
	dev := &fakeDevice{}
	// Device streams 1 and 2 replay trace streams 0xa and 0xb.
	res := &segResource{fakeResource: newFakeResource(dev, 1<<20), script: map[int][]mr.Segment{
		1: {{Base: 0x1000, Size: 4096, Stream: 1}},
		2: {{Base: 0x1000, Size: 4096, Stream: 1}, {Base: 0x3000, Size: 4096, Stream: 2}},
		3: {{Base: 0x1000, Size: 4096, Stream: 2}, {Base: 0x3000, Size: 4096, Stream: 2}},
		4: {{Base: 0x3000, Size: 4096, Stream: 2}, {Base: 0x9000, Size: 4096}},
	}}
	r, err := Run(context.Background(), csv(
		"1,1,allocate,0x100,10,0xa",
		"1,2,allocate,0x200,10,0xb",
		"1,3,allocate,0x300,10,0xb",
		"1,4,allocate,0x400,10,0xa",
		"1,5,free,0x400,10,0xa",
	), dev, mr.NewStats(res, mr.StatsOptions{}), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []SegmentSpan{
		{Base: 0x1000, Size: 4096, Stream: 0, From: 0, To: 2},
		{Base: 0x3000, Size: 4096, Stream: 1, From: 1, To: -1},
		{Base: 0x1000, Size: 4096, Stream: 1, From: 2, To: 3},
		{Base: 0x9000, Size: 4096, Stream: -1, From: 3, To: -1},
	}
	if tl := r.Timeline; !tl.SegmentsKnown || fmt.Sprint(tl.Segments) != fmt.Sprint(want) {
		t.Errorf("spans (known %v)\n got %+v\nwant %+v", tl.SegmentsKnown, tl.Segments, want)
	}
}

// The stacks of a snapshot's allocations reach the timeline, each
// distinct stack once.
func TestTimelineStacks(t *testing.T) {
	frames := func(fn string) []any {
		return []any{map[any]any{"name": fn, "filename": "train.py", "line": int64(len(fn))}}
	}
	entry := func(action string, addr int64, fn string) map[any]any {
		return map[any]any{"action": action, "addr": addr, "size": int64(64), "stream": int64(0),
			"time_us": addr, "frames": frames(fn)}
	}
	snap := map[any]any{"device_traces": []any{[]any{
		entry("alloc", 1, "forward"),
		entry("alloc", 2, "backward"),
		entry("free_completed", 1, "forward"),
		entry("alloc", 3, "forward"),
		map[any]any{"action": "alloc", "addr": int64(4), "size": int64(8), "stream": int64(0)},
	}}}
	var buf bytes.Buffer
	if err := unpickle.Encode(&buf, snap, 2); err != nil {
		t.Fatal(err)
	}
	tr, _, err := trace.NewReader(&buf, "snap", nil)
	if err != nil {
		t.Fatal(err)
	}
	dev := &fakeDevice{}
	r, err := Run(context.Background(), tr, dev, newFakeResource(dev, 1<<20), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	tl := r.Timeline
	var got []string
	for _, b := range tl.Blocks {
		if b.Stack < 0 {
			got = append(got, "-")
			continue
		}
		got = append(got, fmt.Sprint(b.Stack, tl.Stacks[b.Stack]))
	}
	want := "[0 [forward (train.py:7)] 1 [backward (train.py:8)] 0 [forward (train.py:7)] -]"
	if fmt.Sprint(got) != want || len(tl.Stacks) != 2 {
		t.Errorf("stacks %v (%d distinct), want %s", got, len(tl.Stacks), want)
	}
}

// BenchmarkRunTimeline is BenchmarkRun's replay with and without a
// timeline, on the resources that report segments (polled after every
// event) and on direct (a reserved step at every event): the cost of
// Options.Timeline per event.
func BenchmarkRunTimeline(b *testing.B) {
	data, err := os.ReadFile("testdata/torch-serve-varlen-b.csv.gz")
	if err != nil {
		b.Fatal(err)
	}
	for _, rs := range simResources {
		if rs.name == "async" {
			continue
		}
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/timeline=%v", rs.name, on), func(b *testing.B) {
				dev, err := sim.New(sim.Config{}).Device(0)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var events int64
				for b.Loop() {
					tr, _, err := trace.NewReader(bytes.NewReader(data), "bench", nil)
					if err != nil {
						b.Fatal(err)
					}
					r, err := Run(context.Background(), tr, dev, rs.make(b, dev), Options{Timeline: on})
					if err != nil {
						b.Fatal(err)
					}
					events += r.Events
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			})
		}
	}
}
