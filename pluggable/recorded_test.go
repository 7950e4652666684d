package pluggable

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // PyTorch snapshots
)

// Every trace recorded from PyTorch on the H100 (the module's
// testdata/traces and this package's testdata), replayed through the
// allocator as the C ABI calls it: each recorded stream a raw stream made
// as another library would (SimNewStream), the legacy stream for stream 0,
// in the order of the trace. It compares the pool over cuMemAlloc (the
// default, chunks) with the pool over Virtual (upstream=vmm, growth in
// place) and over Virtual's chunks (in_place=false, with and without
// wait_frees) on what issue 13 measures: peak reserved over peak live
// bytes.

// recordedEvent is one call of a recorded trace: an allocation (with an id
// of its own) or the free of allocation id, on recorded stream index
// stream.
type recordedEvent struct {
	alloc  bool
	id     int
	size   uint64
	stream int
}

// readRecorded reads a trace of any format trace.Open knows into events;
// refused allocations (out of memory on the card) are left out, as the
// host never got a pointer for them. It returns the number of streams.
func readRecorded(t *testing.T, file string) ([]recordedEvent, int) {
	t.Helper()
	f, err := trace.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	live := map[uint64]int{} // address -> id
	streams := map[uint64]int{0: 0}
	var evs []recordedEvent
	for {
		ev, err := f.Next()
		if err == io.EOF {
			return evs, len(streams)
		}
		if err != nil {
			t.Fatal(err)
		}
		s, ok := streams[ev.Stream]
		if !ok {
			s = len(streams)
			streams[ev.Stream] = s
		}
		switch ev.Op {
		case trace.Alloc:
			live[ev.Ptr] = len(evs)
			evs = append(evs, recordedEvent{alloc: true, id: len(evs), size: uint64(ev.Size), stream: s})
		case trace.Free:
			id, ok := live[ev.Ptr]
			if !ok {
				t.Fatalf("%s frees %#x, never allocated", file, ev.Ptr)
			}
			delete(live, ev.Ptr)
			evs = append(evs, recordedEvent{id: id, size: uint64(ev.Size), stream: s})
		}
	}
}

// recordedReplay is what one replay gave.
type recordedReplay struct {
	st      Stats
	elapsed time.Duration // the host's time in Alloc and Free but the first
	calls   int
}

// replayRecorded replays evs through a fresh allocator of conf on the
// simulator. Every call must succeed, live bytes must follow the trace
// exactly, and reserved bytes must cover live bytes after every call.
func replayRecorded(t *testing.T, evs []recordedEvent, nstreams int, conf string) recordedReplay {
	t.Helper()
	a, _ := newSim(t, conf)
	return replayRecordedOn(t, a, evs, nstreams)
}

// replayRecordedOn is replayRecorded through allocator a, fresh.
func replayRecordedOn(t *testing.T, a *Allocator, evs []recordedEvent, nstreams int) recordedReplay {
	t.Helper()
	raw := make([]uintptr, nstreams)
	for i := 1; i < nstreams; i++ {
		s, err := a.SimNewStream(0)
		if err != nil {
			t.Fatal(err)
		}
		raw[i] = s
	}
	type block struct {
		p    uintptr
		size uint64
		s    int
	}
	live := map[int]block{}
	var cur, peak uint64
	var out recordedReplay
	var first time.Duration // the first call opens the device: not timed
	for i, ev := range evs {
		if i == 1 {
			first = out.elapsed
		}
		start := time.Now()
		if ev.alloc {
			p := a.Alloc(ev.size, 0, raw[ev.stream])
			out.elapsed += time.Since(start)
			if p == 0 {
				t.Fatalf("event %d: alloc %d: %s", i, ev.size, a.LastError())
			}
			live[ev.id] = block{p, ev.size, ev.stream}
			cur += ev.size
			peak = max(peak, cur)
		} else {
			b, ok := live[ev.id]
			if !ok || b.size != ev.size {
				t.Fatalf("event %d frees allocation %d of %d bytes, not live with that size", i, ev.id, ev.size)
			}
			// A free on the allocation's stream, as PyTorch frees.
			if err := a.Free(b.p, b.size, 0, raw[b.s]); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			out.elapsed += time.Since(start)
			delete(live, ev.id)
			cur -= b.size
		}
		out.calls++
	}
	out.elapsed -= first
	st := stats(t, a, 0)
	if st.Live != cur || st.PeakLive != peak || st.BadFrees != 0 || st.Errors != 0 || st.OOMs != 0 {
		t.Fatalf("stats %+v; the trace says live %d, peak %d", st, cur, peak)
	}
	if st.PeakReserved < st.PeakLive || st.Reserved < st.Live {
		t.Fatalf("reserved %d (peak %d) does not cover live %d (peak %d)", st.Reserved, st.PeakReserved, st.Live, st.PeakLive)
	}
	out.st = st
	for _, b := range live {
		if err := a.Free(b.p, b.size, 0, raw[b.s]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Release(-1); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, a, 0); st.Live != 0 || st.Reserved != 0 {
		t.Fatalf("after freeing everything and Release: %+v", st)
	}
	return out
}

// recordedTraces are the traces replayed, and the largest peak reserved
// over peak live each configuration may reach on them. The pool over
// cuMemAlloc gives the same figures on every run, so its peak reserved
// and device calls, by default and with split_giant, are pinned exactly
// (poolExact, giantExact): a change to where the pool grows, releases or
// places a block shows here, trace by trace, and must restate them.
// Over Virtual they vary from run to run: whether a decommitted granule's work has completed
// when the next commit comes depends on the simulator's timing, and a
// commit that finds the addresses still mapped starts a new growable range
// (mr.ErrGrowBlocked). On the training traces most runs reach 1.002-1.03
// and a few 1.03-1.13, on three-stream anywhere from 1.02 to 1.58
// (BENCHMARKS.md, "The pool over Virtual through the C ABI"); so the
// bounds of vmm catch a regression beyond that spread, not the spread.
// The pool's bounds of three-stream and cuda-graph were 1.16 and 1.127
// (1.1596, 1.1262) while a growth kept other streams' idle working chunks
// (mr/pool_grow.go, releaseBeforeGrowth). The pool over Virtual's chunks
// (in_place=false) makes the calls of the pool over cuMemAlloc; with
// wait_frees it reserves exactly what that pool does, without, what the
// simulator's timing gives: a chunk given back stays mapped until the
// stream has run its queue, beside the one the growth maps (1.10-1.68 in
// the runs measured), so its bound too catches only what lies beyond.
// split_giant (mr.PoolOptions.SplitGiantAtMark) moves the pool's figures
// both ways, which is why it is not the default: lower on ResNet-50, the
// same on CuPy with fewer device calls (46+35 against 93+78), slightly
// higher on GPT-2 (1.0260) with fewer calls, higher on three-stream, oom,
// cuda-graph (1.1766), compile and the three shared traces (two-stream
// pipeline 1.2311 against 1.1374; BENCHMARKS.md, "Chunk churn under
// CuPy", and "Gates for split_giant" for the variants that tried to keep
// its calls without those rises). slack=0.02 (mr.PoolOptions.ReservedSlack)
// gives the default's figures on every trace but compile, where it keeps
// idle chunks through six growths and reserves less (1.0542 against
// 1.0563); it is bounded by the default's bounds and pinned exactly
// (slackExact). It does not touch the churn of GPT-2, whose growths at
// the mark (0.4 to 1.5 GiB) are larger than 2% of its peak
// (BENCHMARKS.md, "A slack over peak live for the pool's growth").
// split_giant with slack=0.03, which made no device call in GPT-2's
// steady steps and ran faster than the default pool on the H100 there and
// on CuPy, is pinned exactly too (giantSlackExact; its peaks are bounded
// by them alone): 1.0296 on both GPT-2 recordings, lower than the default
// on compile, llama-generate and the ResNet-50 recording, higher on the
// rest, resnet50-amp most (1.0970 against 1.0451).
var recordedTraces = []struct {
	file                                string
	pool, vmm, chunks, chunkWait, giant float64
	// What the pool over cuMemAlloc gives exactly, by default, with
	// split_giant, with slack=0.02 and with split_giant,slack=0.03: peak
	// reserved in MiB, device allocations and frees.
	poolExact, giantExact, slackExact, giantSlackExact recordedExact
}{
	{"testdata/torch-train-gpt2-h100.csv.gz", 1.025, 1.15, 1.8, 1.025, 1.027, recordedExact{13274, 297, 46}, recordedExact{13302, 251, 24}, recordedExact{13274, 297, 46}, recordedExact{13348, 253, 24}},
	{"testdata/torch-train-resnet50-h100.csv.gz", 1.052, 1.15, 1.8, 1.052, 1.04, recordedExact{3200, 139, 42}, recordedExact{3164, 129, 27}, recordedExact{3200, 139, 42}, recordedExact{3190, 138, 41}},
	{"testdata/cupy-cycle-h100.csv.gz", 1.10, 1.15, 1.8, 1.10, 1.10, recordedExact{462, 93, 78}, recordedExact{462, 46, 35}, recordedExact{462, 93, 78}, recordedExact{462, 46, 35}},
	{"../testdata/traces/gpt2-train-h100.pickle.gz", 1.027, 1.15, 1.8, 1.027, 1.027, recordedExact{13300, 308, 59}, recordedExact{13302, 254, 27}, recordedExact{13300, 308, 59}, recordedExact{13348, 253, 24}},
	{"../testdata/traces/resnet50-amp-h100.pickle.gz", 1.046, 1.15, 1.8, 1.046, 1.042, recordedExact{3182, 129, 35}, recordedExact{3170, 124, 34}, recordedExact{3182, 129, 35}, recordedExact{3340, 129, 53}},
	{"../testdata/traces/llama-generate-h100.csv.gz", 1.095, 1.06, 1.8, 1.095, 1.095, recordedExact{432, 49, 7}, recordedExact{432, 49, 7}, recordedExact{432, 49, 7}, recordedExact{418, 48, 7}},
	{"../testdata/traces/three-stream-h100.pickle.gz", 1.089, 1.8, 1.8, 1.089, 1.098, recordedExact{986, 527, 488}, recordedExact{994, 462, 427}, recordedExact{986, 527, 488}, recordedExact{994, 462, 427}},
	{"../testdata/traces/oom-h100.pickle.gz", 1.031, 1.15, 1.8, 1.031, 1.04, recordedExact{9338, 434, 150}, recordedExact{9422, 349, 100}, recordedExact{9338, 434, 150}, recordedExact{9452, 352, 100}},
	{"../testdata/traces/cuda-graph-h100.pickle.gz", 1.082, 1.1, 1.8, 1.082, 1.177, recordedExact{386, 111, 74}, recordedExact{420, 54, 16}, recordedExact{386, 111, 74}, recordedExact{420, 54, 16}},
	{"../testdata/traces/compile-h100.pickle.gz", 1.057, 1.01, 1.8, 1.057, 1.08, recordedExact{4000, 157, 75}, recordedExact{4088, 115, 40}, recordedExact{3992, 151, 69}, recordedExact{3896, 108, 35}},
	// The shared traces of replay/testdata (RMM logs of PyTorch-like
	// workloads: two-stream pipeline, serving of varied lengths, GPT
	// training). On the serving trace the chunks of Virtual given back
	// without waiting pile up while the stream runs its queue: 2.1 to 16.4
	// times peak live in twelve runs, so that configuration is not bounded
	// there.
	{"../replay/testdata/torch-pipeline-2stream-b.csv.gz", 1.138, 1.03, 1.8, 1.138, 1.232, recordedExact{1020, 116, 78}, recordedExact{1104, 74, 28}, recordedExact{1020, 116, 78}, recordedExact{1104, 78, 32}},
	{"../replay/testdata/torch-serve-varlen-b.csv.gz", 1.033, 1.03, math.Inf(1), 1.033, 1.04, recordedExact{290, 251, 234}, recordedExact{292, 221, 204}, recordedExact{290, 251, 234}, recordedExact{292, 222, 205}},
	{"../replay/testdata/torch-train-gpt-b.csv.gz", 1.111, 1.06, 1.8, 1.111, 1.165, recordedExact{1692, 129, 53}, recordedExact{1774, 87, 14}, recordedExact{1692, 129, 53}, recordedExact{1774, 87, 14}},
}

// recordedExact is a replay's peak reserved bytes in MiB and its device
// allocations and frees.
type recordedExact struct {
	reservedMiB, allocs, frees uint64
}

// TestRecordedTraces replays every recorded trace through the pool over
// cuMemAlloc and over Virtual. Set STREAMALLOC_TRACES_TABLE=1 to print the
// table of BENCHMARKS.md (go test -run TestRecordedTraces -v).
func TestRecordedTraces(t *testing.T) {
	files, _ := filepath.Glob("../testdata/traces/*.gz")
	more, _ := filepath.Glob("testdata/*.gz")
	shared, _ := filepath.Glob("../replay/testdata/*.gz")
	if n := len(files) + len(more) + len(shared); n != len(recordedTraces) {
		t.Fatalf("%d traces in testdata, %d in the table", n, len(recordedTraces))
	}
	if testing.Short() || raceEnabled {
		// 91 replays of 6 million calls in all: several seconds on two
		// cores, the price of measuring every recorded workload, and
		// a minute under the race detector, which the concurrent tests
		// of the allocator serve (one goroutine replays here).
		t.Skip("replays 6 million calls")
	}
	table := os.Getenv("STREAMALLOC_TRACES_TABLE") != ""
	for _, tc := range recordedTraces {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			evs, nstreams := readRecorded(t, tc.file)
			var pool Stats
			for _, c := range []struct {
				conf  string
				bound float64
			}{{"pool", tc.pool}, {"pool,upstream=vmm", tc.vmm}, {"pool,upstream=vmm,in_place=false", tc.chunks}, {"pool,upstream=vmm,in_place=false,wait_frees", tc.chunkWait}, {"pool,split_giant", tc.giant}, {"pool,slack=0.02", tc.pool}, {"pool,split_giant,slack=0.03", math.Inf(1)}} {
				r := replayRecorded(t, evs, nstreams, c.conf)
				ratio := float64(r.st.PeakReserved) / float64(r.st.PeakLive)
				line := fmt.Sprintf("| %s | %s | %d | %d | %.1f | %.1f | %.4f | %d / %d | %.0f ns |",
					filepath.Base(tc.file), c.conf, nstreams, r.calls, float64(r.st.PeakLive)/(1<<20),
					float64(r.st.PeakReserved)/(1<<20), ratio, r.st.DeviceAllocs, r.st.DeviceFrees,
					float64(r.elapsed.Nanoseconds())/float64(r.calls-1))
				if table {
					fmt.Println(line)
				}
				t.Log(line)
				switch c.conf {
				case "pool":
					pool = r.st
				case "pool,upstream=vmm,in_place=false,wait_frees":
					// The same chunks as over cuMemAlloc, each given back
					// before the next is mapped: the same figures.
					if r.st.PeakReserved != pool.PeakReserved || r.st.DeviceAllocs != pool.DeviceAllocs || r.st.DeviceFrees != pool.DeviceFrees {
						t.Errorf("%s: peak reserved %d, %d device allocations and %d frees; over cuMemAlloc %d, %d and %d",
							c.conf, r.st.PeakReserved, r.st.DeviceAllocs, r.st.DeviceFrees, pool.PeakReserved, pool.DeviceAllocs, pool.DeviceFrees)
					}
				}
				if ratio > c.bound {
					t.Errorf("%s: peak reserved / peak live %.4f, want at most %.3f", c.conf, ratio, c.bound)
				}
				var exact recordedExact
				switch c.conf {
				case "pool":
					exact = tc.poolExact
				case "pool,split_giant":
					exact = tc.giantExact
				case "pool,slack=0.02":
					exact = tc.slackExact
				case "pool,split_giant,slack=0.03":
					exact = tc.giantSlackExact
				default:
					continue
				}
				got := recordedExact{r.st.PeakReserved >> 20, r.st.DeviceAllocs, r.st.DeviceFrees}
				if r.st.PeakReserved%(1<<20) != 0 || got != exact {
					t.Errorf("%s: peak reserved %d bytes, %d device allocations, %d frees; want %d MiB, %d, %d",
						c.conf, r.st.PeakReserved, got.allocs, got.frees, exact.reservedMiB, exact.allocs, exact.frees)
				}
			}
		})
	}
}
