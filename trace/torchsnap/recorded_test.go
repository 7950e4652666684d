package torchsnap

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

// recordedCounts is what the reader makes of each trace recorded on the
// H100 in testdata/traces at the module root (its README says how they
// were recorded): events, the allocations among them that the reader
// synthesized for blocks live before the history began (Line 0), failures,
// distinct streams, and the peak of live bytes.
var recordedCounts = map[string]struct {
	events, synthetic, failures, streams int
	peakLive                             int64
}{
	"compile-h100.pickle.gz":      {8825, 52, 0, 1, 3970572172},
	"cuda-graph-h100.pickle.gz":   {6082, 320, 0, 3, 374305192},
	"gpt2-train-h100.pickle.gz":   {52227, 148, 0, 1, 13594206920},
	"llama-generate-h100.csv.gz":  {513951, 0, 0, 1, 413776280},
	"oom-h100.pickle.gz":          {55242, 148, 3, 1, 9502481088},
	"resnet50-amp-h100.pickle.gz": {25769, 320, 0, 1, 3192592924},
	"three-stream-h100.pickle.gz": {34271, 7, 0, 4, 949485572},
}

// underRace are the traces read under the race detector, which makes the
// reader ten times slower (15 s for six of these traces on two cores): reading is one
// goroutine's work, so the others add no race coverage, only time.
var underRace = map[string]bool{"cuda-graph-h100.pickle.gz": true, "three-stream-h100.pickle.gz": true}

// Every recorded trace reads to the end without error; its counts are
// those pinned above, and for a snapshot they agree with the counts of
// actions PyTorch wrote beside it (<workload>-h100.json): one Alloc per
// "alloc", one Free per "free_completed", one AllocFailure per "oom".
func TestRecordedTraces(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "traces")
	files, err := filepath.Glob(filepath.Join(dir, "*.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(recordedCounts) {
		t.Fatalf("%d traces in %s, %d pinned", len(files), dir, len(recordedCounts))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := recordedCounts[name]
			if !ok {
				t.Fatalf("%s is not pinned", name)
			}
			if raceEnabled && !underRace[name] {
				t.Skip("read without the race detector only")
			}
			f, err := trace.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var events, synthetic, failures int
			ops := map[trace.Op]int{}
			streams := map[uint64]bool{}
			live := map[uint64]int64{}
			var cur, peak int64
			for {
				e, err := f.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				events++
				streams[e.Stream] = true
				if e.Line == 0 {
					synthetic++
				} else {
					ops[e.Op]++
				}
				switch e.Op {
				case trace.Alloc:
					live[e.Ptr] = e.Size
					cur += e.Size
					peak = max(peak, cur)
				case trace.Free:
					cur -= live[e.Ptr]
					delete(live, e.Ptr)
				case trace.AllocFailure:
					failures++
				}
			}
			got := recordedCounts[name]
			got.events, got.synthetic, got.failures, got.streams, got.peakLive = events, synthetic, failures, len(streams), peak
			if got != want {
				t.Errorf("read %+v, want %+v", got, want)
			}
			if !strings.HasSuffix(name, ".pickle.gz") {
				return
			}
			meta, err := os.ReadFile(filepath.Join(dir, strings.TrimSuffix(name, ".pickle.gz")+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Actions map[string]int `json:"actions"`
			}
			if err := json.Unmarshal(meta, &rec); err != nil {
				t.Fatal(err)
			}
			for op, action := range map[trace.Op]string{trace.Alloc: "alloc", trace.Free: "free_completed", trace.AllocFailure: "oom"} {
				if ops[op] != rec.Actions[action] {
					t.Errorf("%d %v events from the trace's entries, PyTorch counted %d %q", ops[op], op, rec.Actions[action], action)
				}
			}
		})
	}
}
