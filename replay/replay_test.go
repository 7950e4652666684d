package replay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

func csv(lines ...string) trace.Reader {
	return trace.NewCSVReader(strings.NewReader(trace.Header+"\n"+strings.Join(lines, "\n")+"\n"), "t.csv")
}

// counts is the part of a Result that these tests pin down.
type counts struct {
	events, allocs, frees, unknown, failures, traceFailures, dups, atEnd int64
	streams                                                              int
	peakLive, peakReserved                                               uint64
}

func countsOf(r *Result) counts {
	return counts{r.Events, r.Allocations, r.Frees, r.UnknownFrees, r.Failures, r.TraceFailures,
		r.DuplicateAllocations, r.FreedAtEnd, r.Streams, r.PeakLiveBytes, r.PeakReservedBytes}
}

func TestRunCounts(t *testing.T) {
	tests := []struct {
		name     string
		lines    []string
		capacity uint64
		want     counts
	}{
		{"alloc free", []string{
			"1,0,allocate,0x100,1000,0",
			"1,0,allocate,0x200,24,0",
			"1,0,free,0x100,1000,0",
			"1,0,allocate,0x300,10,0",
		}, 1 << 30, counts{events: 4, allocs: 3, frees: 1, atEnd: 2, streams: 1,
			peakLive: 1024, peakReserved: 1024 + 256}},
		{"unknown and double frees", []string{
			"1,0,free,0x999,8,0",
			"1,0,allocate,0x100,8,0",
			"1,0,free,0x100,8,0",
			"1,0,free,0x100,8,0",
		}, 1 << 30, counts{events: 4, allocs: 1, frees: 3, unknown: 2, streams: 1, peakLive: 8, peakReserved: 256}},
		{"trace failures are counted, not replayed", []string{
			"1,0,allocate failure,0x0,4096,0",
			"1,0,allocate,0x100,8,0",
		}, 1 << 30, counts{events: 2, allocs: 1, traceFailures: 1, atEnd: 1, streams: 1, peakLive: 8, peakReserved: 256}},
		{"duplicate allocation frees the older block", []string{
			"1,0,allocate,0x100,512,0",
			"1,0,allocate,0x100,256,0",
			"1,0,free,0x100,256,0",
		}, 1 << 30, counts{events: 3, allocs: 2, frees: 1, dups: 1, streams: 1, peakLive: 512, peakReserved: 512}},
		{"out of memory is counted and the free of it is not unknown", []string{
			"1,0,allocate,0x100,512,0",
			"1,0,allocate,0x200,1024,0", // refused: 512+1024 > 1024
			"1,0,allocate,0x300,256,0",
			"1,0,free,0x200,1024,0",
			"1,0,free,0x100,512,0",
			"1,0,free,0x300,256,0",
		}, 1024, counts{events: 6, allocs: 3, frees: 3, failures: 1, streams: 1,
			peakLive: 512 + 1024 + 256, peakReserved: 768}},
		{"streams", []string{
			"1,0,allocate,0x100,8,0x0",
			"1,0,allocate,0x200,8,0x7f",
			"1,0,allocate,0x300,8,127", // the same stream as 0x7f
			"1,0,free,0x100,8,0xabc",   // a third stream
		}, 1 << 30, counts{events: 4, allocs: 3, frees: 1, atEnd: 2, streams: 3, peakLive: 24, peakReserved: 768}},
		{"zero sizes", []string{
			"1,0,allocate,0x100,0,0",
			"1,0,free,0x100,0,0",
		}, 1 << 30, counts{events: 2, allocs: 1, frees: 1, streams: 1}},
		{"empty trace", nil, 1 << 30, counts{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := &fakeDevice{}
			res := newFakeResource(dev, tc.capacity)
			r, err := Run(context.Background(), csv(tc.lines...), dev, res, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := countsOf(r); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if len(res.live) != 0 {
				t.Errorf("%d blocks left in the resource", len(res.live))
			}
			if err := dev.allDown(); err != nil {
				t.Error(err)
			}
			if r.Trace != "t.csv" || r.Device != "fake" || r.Resource != "*replay.fakeResource" {
				t.Errorf("names %q %q %q", r.Trace, r.Device, r.Resource)
			}
			if r.PeakLiveBytes > 0 {
				if want := float64(r.PeakReservedBytes) / float64(r.PeakLiveBytes); r.Fragmentation != want {
					t.Errorf("fragmentation %v, want %v", r.Fragmentation, want)
				}
			} else if r.Fragmentation != 0 {
				t.Errorf("fragmentation %v with nothing live", r.Fragmentation)
			}
		})
	}
}

// Each event runs on the stream of its trace stream; the frees at the end
// run on the allocation's stream, in allocation order.
func TestRunStreamsAndOrder(t *testing.T) {
	dev := &fakeDevice{}
	res := newFakeResource(dev, 1<<30)
	_, err := Run(context.Background(), csv(
		"1,0,allocate,0x100,100,0xa",
		"1,0,allocate,0x200,200,0xb",
		"1,0,allocate,0x300,300,0xa",
		"1,0,free,0x100,100,0xb", // freed on another stream
		"1,0,allocate,0x400,400,0xb",
	), dev, res, Options{Resource: "fake", Device: "dev0"})
	if err != nil {
		t.Fatal(err)
	}
	// Streams are created lazily: 0xa is device stream 1, 0xb is 2.
	want := []call{
		{size: 100, stream: 1}, {size: 200, stream: 2}, {size: 300, stream: 1},
		{free: true, size: 100, stream: 2},
		{size: 400, stream: 2},
		// at the end, in allocation order, each on its own stream
		{free: true, size: 200, stream: 2}, {free: true, size: 300, stream: 1}, {free: true, size: 400, stream: 2},
	}
	if len(res.calls) != len(want) {
		t.Fatalf("calls %+v", res.calls)
	}
	for i, c := range res.calls {
		c.p = 0
		if c != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, c, want[i])
		}
	}
}

func TestRunWithoutUsageReporter(t *testing.T) {
	dev := &fakeDevice{}
	res := plainResource{newFakeResource(dev, 1<<30)}
	var _ mr.Resource = res
	if _, ok := any(res).(mr.UsageReporter); ok {
		t.Fatal("plainResource reports usage")
	}
	r, err := Run(context.Background(), csv(
		"1,0,allocate,0x100,1000,0",
		"1,0,allocate,0x200,24,0",
		"1,0,free,0x100,1000,0",
	), dev, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.PeakReservedBytes != r.PeakLiveBytes || r.PeakLiveBytes != 1024 || r.Fragmentation != 1 {
		t.Errorf("peak reserved %d, live %d, fragmentation %v; want reserved = live = 1024",
			r.PeakReservedBytes, r.PeakLiveBytes, r.Fragmentation)
	}
}

// failingReader returns its events, then err.
type failingReader struct {
	evs []trace.Event
	err error
}

func (f *failingReader) Name() string { return "failing" }
func (f *failingReader) Next() (trace.Event, error) {
	if len(f.evs) == 0 {
		return trace.Event{}, f.err
	}
	ev := f.evs[0]
	f.evs = f.evs[1:]
	return ev, nil
}

// Every error path frees what was allocated and takes the streams down,
// and the error says what and where.
func TestRunErrorsClean(t *testing.T) {
	ctxDone, cancel := context.WithCancel(context.Background())
	cancel()
	three := []string{"1,0,allocate,0x100,100,0", "1,0,allocate,0x200,100,0x1", "1,0,allocate,0x300,100,0x2"}
	tests := []struct {
		name  string
		tr    trace.Reader
		ctx   context.Context
		setup func(*fakeDevice, *fakeResource)
		want  error  // errors.Is target
		msg   string // substring of the message
	}{
		{"bad line", csv(append(three, "1,0,allocate,0x400,-1,0")...), context.Background(), nil,
			trace.ErrNegativeSize, "t.csv:5"},
		{"reader failure", &failingReader{evs: []trace.Event{{Op: trace.Alloc, Ptr: 1, Size: 8, Line: 1}},
			err: errors.New("tape snapped")}, context.Background(), nil, nil, "tape snapped"},
		{"invalid op", &failingReader{evs: []trace.Event{{Op: trace.Alloc, Ptr: 1, Size: 8, Line: 1}, {Op: 9, Line: 2}},
			err: errors.New("unreachable")}, context.Background(), nil, nil, "failing:2: event with invalid op"},
		{"allocate fails", csv(three...), context.Background(),
			func(d *fakeDevice, r *fakeResource) { r.failOn = 3; r.failErr = gpu.ErrLaunchFailed },
			gpu.ErrLaunchFailed, "t.csv:4: allocate 100 bytes"},
		{"deallocate fails", csv(append(three, "1,0,free,0x100,100,0")...), context.Background(),
			func(d *fakeDevice, r *fakeResource) { r.freeErr = mr.ErrDoubleFree },
			mr.ErrDoubleFree, "t.csv:5: free 0x100"},
		{"stream creation fails", csv(three...), context.Background(),
			func(d *fakeDevice, r *fakeResource) { d.failStream = 2 },
			gpu.ErrOutOfMemory, "t.csv:4: create a stream"},
		{"cancelled", csv(three...), ctxDone, nil, context.Canceled, "stopped after 0 events"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := &fakeDevice{}
			res := newFakeResource(dev, 1<<30)
			if tc.setup != nil {
				tc.setup(dev, res)
			}
			r, err := Run(tc.ctx, tc.tr, dev, res, Options{})
			if err == nil {
				t.Fatalf("no error; result %+v", r)
			}
			if r != nil {
				t.Errorf("a result with the error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if res.freeErr == nil && len(res.live) != 0 {
				t.Errorf("%d blocks left allocated", len(res.live))
			}
			if err := dev.allDown(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRunCancelMidway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	lines := make([]string, 5000)
	for i := range lines {
		lines[i] = "1,0,allocate,0x" + strings.Repeat("1", 1+i%9) + "00,256,0"
	}
	calls := 0
	dev := &fakeDevice{}
	res := newFakeResource(dev, 1<<40)
	_, err := Run(ctx, csv(lines...), dev, res, Options{ProgressEvery: 100, Progress: func(p Progress) {
		calls++
		if p.Events == 2000 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped after 2048 events") {
		t.Fatalf("error %v, want a cancellation after 2048 events", err)
	}
	if calls != 20 || len(res.live) != 0 || dev.allDown() != nil {
		t.Errorf("progress calls %d, live %d, streams %v", calls, len(res.live), dev.allDown())
	}
}

func TestRunProgress(t *testing.T) {
	f, err := trace.Open("testdata/torch-serve-varlen-b.csv.gz", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ps []Progress
	dev := &fakeDevice{}
	_, err = Run(context.Background(), f, dev, newFakeResource(dev, 1<<40), Options{ProgressEvery: 1000,
		Progress: func(p Progress) { ps = append(ps, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 18+1 {
		t.Fatalf("%d progress reports, want 19", len(ps))
	}
	for i, p := range ps[:len(ps)-1] {
		if p.Events != int64(1000*(i+1)) || p.Final || p.Total <= 0 || p.Fraction() < 0 || p.Fraction() > 1 {
			t.Errorf("report %d: %+v fraction %v", i, p, p.Fraction())
		}
		if i > 0 && p.Done < ps[i-1].Done {
			t.Errorf("report %d went back: %+v after %+v", i, p, ps[i-1])
		}
	}
	last := ps[len(ps)-1]
	if !last.Final || last.Events != 18102 || last.Fraction() != 1 {
		t.Errorf("last report %+v fraction %v", last, last.Fraction())
	}
	if (Progress{}).Fraction() != -1 {
		t.Error("unknown total does not give -1")
	}
}

func TestRunSeries(t *testing.T) {
	f, err := trace.Open("testdata/torch-train-gpt-b.csv.gz", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dev := &fakeDevice{}
	r, err := Run(context.Background(), f, dev, newFakeResource(dev, 1<<40), Options{SeriesPoints: 500})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Series); n < 250 || n > 500 {
		t.Fatalf("%d points, want 250..500", n)
	}
	var peakLive, peakRes uint64
	for i, s := range r.Series {
		if i > 0 && s.Event <= r.Series[i-1].Event {
			t.Fatalf("point %d: event %d after %d", i, s.Event, r.Series[i-1].Event)
		}
		peakLive, peakRes = max(peakLive, s.Live), max(peakRes, s.Reserved)
	}
	if last := r.Series[len(r.Series)-1].Event; last != r.Events-1 {
		t.Errorf("last point at event %d, want %d", last, r.Events-1)
	}
	if peakLive != r.PeakLiveBytes || peakRes != r.PeakReservedBytes {
		t.Errorf("series peaks %d/%d, result %d/%d", peakLive, peakRes, r.PeakLiveBytes, r.PeakReservedBytes)
	}
}

func TestRunNilArguments(t *testing.T) {
	dev := &fakeDevice{}
	if _, err := Run(context.Background(), nil, dev, newFakeResource(dev, 1), Options{}); err == nil {
		t.Error("nil trace accepted")
	}
	if _, err := Run(context.Background(), csv(), nil, newFakeResource(dev, 1), Options{}); err == nil {
		t.Error("nil device accepted")
	}
	if _, err := Run(context.Background(), csv(), dev, nil, Options{}); err == nil {
		t.Error("nil resource accepted")
	}
	//lint:ignore SA1012 a nil context is accepted on purpose
	if _, err := Run(nil, csv("1,0,allocate,0x1,1,0"), dev, newFakeResource(dev, 1<<20), Options{}); err != nil { //nolint:staticcheck
		t.Errorf("nil context: %v", err)
	}
}

func TestRunReleasesBeforeDestroyingStreams(t *testing.T) {
	dev := &fakeDevice{}
	res := &releasingResource{fakeResource: newFakeResource(dev, 1<<30)}
	_, err := Run(context.Background(), csv("1,0,allocate,0x100,8,0x1", "1,0,allocate,0x200,8,0x2"), dev, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.releases != 1 || len(res.streamsAtRelease) != 2 || res.streamsAtRelease[0] || res.streamsAtRelease[1] {
		t.Errorf("%d releases; streams destroyed at release: %v", res.releases, res.streamsAtRelease)
	}
	if len(res.live) != 0 || dev.allDown() != nil {
		t.Errorf("live %d, streams %v", len(res.live), dev.allDown())
	}
}
