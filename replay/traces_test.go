package replay

import (
	"bytes"
	"context"
	"testing"

	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // snapshots for trace.Open
)

// The three traces of ../shared/traces, copied into testdata. The
// expected numbers were computed without this package, by
//
//	zcat F | awk -F, 'NR>1{ if($3=="allocate"){ if($4 in L){cur-=L[$4]; d++}; L[$4]=$5; cur+=$5;
//	    if(cur>peak)peak=cur; a++ } else if($3=="free"){ fr++; if($4 in L){cur-=L[$4]; delete L[$4]}
//	    else u++ } n++; S[$6]=1 } END{print n, a, fr, peak, u+0, d+0, length(L), length(S)}'
//
// which prints events, allocations, frees, peak live bytes, unknown frees,
// duplicate allocations, blocks never freed and streams.
var sharedTraces = []struct {
	file                                  string
	events, allocs, frees, unknown, atEnd int64
	streams                               int
	peakLive                              uint64
}{
	{"testdata/torch-pipeline-2stream-b.csv.gz", 9090, 4547, 4543, 0, 4, 2, 940326920},
	{"testdata/torch-serve-varlen-b.csv.gz", 18102, 9051, 9051, 0, 0, 1, 294640904},
	{"testdata/torch-train-gpt-b.csv.gz", 16173, 8088, 8085, 0, 3, 1, 1597126984},
}

func replayFile(t *testing.T, file string, res func(*fakeDevice) mr.Resource, opts Options) (*Result, *fakeDevice) {
	t.Helper()
	f, err := trace.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dev := &fakeDevice{}
	r, err := Run(context.Background(), f, dev, res(dev), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, dev
}

func TestSharedTraces(t *testing.T) {
	for _, tc := range sharedTraces {
		t.Run(tc.file, func(t *testing.T) {
			var fr *fakeResource
			r, dev := replayFile(t, tc.file, func(d *fakeDevice) mr.Resource {
				fr = newFakeResource(d, 1<<40)
				return fr
			}, Options{})
			if r.Events != tc.events || r.Allocations != tc.allocs || r.Frees != tc.frees ||
				r.UnknownFrees != tc.unknown || r.FreedAtEnd != tc.atEnd || r.Streams != tc.streams ||
				r.PeakLiveBytes != tc.peakLive || r.Failures != 0 || r.DuplicateAllocations != 0 {
				t.Errorf("got %+v\nwant %+v", r, tc)
			}
			// The fake never reuses memory, so it reserves at least
			// the peak live bytes.
			if r.PeakReservedBytes < r.PeakLiveBytes || r.Fragmentation < 1 {
				t.Errorf("peak reserved %d < peak live %d", r.PeakReservedBytes, r.PeakLiveBytes)
			}
			if len(fr.live) != 0 || dev.allDown() != nil {
				t.Errorf("left %d blocks; streams: %v", len(fr.live), dev.allDown())
			}
		})
	}
}

// A replay through the logging adaptor writes a log that replays to the
// same allocations and peak live bytes; its frees include the replay's
// frees at the end.
func TestLogRoundTrip(t *testing.T) {
	for _, tc := range sharedTraces {
		t.Run(tc.file, func(t *testing.T) {
			var log bytes.Buffer
			var lg *mr.Logging
			first, _ := replayFile(t, tc.file, func(d *fakeDevice) mr.Resource {
				lg = mr.NewLogging(newFakeResource(d, 1<<40), &log, mr.LoggingOptions{})
				return lg
			}, Options{})
			if err := lg.Flush(); err != nil {
				t.Fatal(err)
			}
			dev := &fakeDevice{}
			second, err := Run(context.Background(), trace.NewCSVReader(&log, "log"), dev, newFakeResource(dev, 1<<40), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if second.Allocations != first.Allocations || second.PeakLiveBytes != first.PeakLiveBytes ||
				second.Frees != first.Frees+first.FreedAtEnd || second.Events != first.Events+first.FreedAtEnd ||
				second.FreedAtEnd != 0 || second.UnknownFrees != 0 || second.Streams != first.Streams {
				t.Errorf("replay of the log:\n%+v\nfirst replay:\n%+v", second, first)
			}
		})
	}
}

// The snapshot fixture of package trace/torchsnap (linked by the import
// above): the mapping of snapshot actions is tested there; here, that its
// events replay with the counts they imply.
func TestSnapshotReplay(t *testing.T) {
	r, _ := replayFile(t, "../trace/torchsnap/testdata/snapshot.pickle", func(d *fakeDevice) mr.Resource {
		return newFakeResource(d, 1<<40)
	}, Options{})
	// 11 events: 6 allocations of the trace + 2 preexisting blocks,
	// 3 frees, 1 oom; A0, B1, A3, A4 are never freed.
	want := counts{events: 11, allocs: 7, frees: 3, traceFailures: 1, atEnd: 4, streams: 2,
		// after A4 (event 9): A0 + A2 + B1 + A3 + A4
		peakLive: 1000 + 4096 + 777 + 2048 + 256,
		// the same blocks rounded up to 256 by the fake
		peakReserved: 1024 + 4096 + 1024 + 2048 + 256}
	if got := countsOf(r); got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
