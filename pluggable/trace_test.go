package pluggable

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

// torchTraces are the memory histories that PyTorch training wrote through
// the C ABI on an H100 (the log= option; the first steps of GPT-2 and
// ResNet-50 in BENCHMARKS.md). steady and end delimit whole training
// steps after the warm-up: the first allocation of the first such step
// and the last allocation of the last whole step in the trace (GPT-2
// from its 7th step, when every sequence length of its cycle has been
// seen; ResNet-50 from its 5th, when the optimizer's state exists). The
// replay checks that live bytes are the same at both ends (the steps end
// where they began), which a boundary off by one allocation would break.
var torchTraces = []struct {
	file     string
	steady   int // first allocation of the steady steps, counting from 1
	end      int // last allocation of the last whole step
	steps    int // steps between them
	allocs   int // allocations in the trace
	peakLive uint64
}{
	{"testdata/torch-train-gpt2-h100.csv.gz", 9025, 14742, 4, 15376, 13594206920},
	{"testdata/torch-train-resnet50-h100.csv.gz", 3587, 9786, 8, 10353, 3192592924},
}

// torchReplay is what replaying one trace through one configuration gave.
type torchReplay struct {
	st            Stats
	steadyGrowths uint64 // growths during the steady steps
	live          uint64 // live bytes at the end of the trace
}

// replayTorch replays the trace through a fresh allocator of conf on the
// simulator, as the host calls it, checking the accounting on the way.
func replayTorch(t *testing.T, file string, conf string, steady, end int) torchReplay {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := trace.NewCSVReader(z, file)
	a, _ := newSim(t, conf)
	type block struct {
		p    uintptr
		size uint64
	}
	live := map[uint64]block{}
	var cur, peak, atSteady uint64
	var n int
	var before Stats
	var out torchReplay
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Op {
		case trace.Alloc:
			n++
			if n == steady {
				before, atSteady = stats(t, a, 0), cur
			}
			p := a.Alloc(uint64(ev.Size), 0, 0)
			if p == 0 {
				t.Fatalf("alloc %d: %s", ev.Size, a.LastError())
			}
			live[ev.Ptr] = block{p, uint64(ev.Size)}
			cur += uint64(ev.Size)
			peak = max(peak, cur)
		case trace.Free:
			b, ok := live[ev.Ptr]
			if !ok {
				t.Fatalf("trace frees %#x, never allocated", ev.Ptr)
			}
			if err := a.Free(b.p, b.size, 0, 0); err != nil {
				t.Fatal(err)
			}
			delete(live, ev.Ptr)
			cur -= b.size
		}
		if n == end+1 && ev.Op == trace.Alloc {
			// The first allocation after the steady steps: count
			// what they did before it.
			if cur-uint64(ev.Size) != atSteady {
				t.Fatalf("live bytes %d after the steady steps, %d before: the boundaries are not step boundaries",
					cur-uint64(ev.Size), atSteady)
			}
			out.steadyGrowths = stats(t, a, 0).DeviceAllocs - before.DeviceAllocs
		}
	}
	st := stats(t, a, 0)
	if st.Live != cur || st.PeakLive != peak || st.BadFrees != 0 || st.Errors != 0 || st.OOMs != 0 {
		t.Fatalf("stats %+v; the trace says live %d, peak %d", st, cur, peak)
	}
	out.st, out.live = st, cur
	for _, b := range live {
		if err := a.Free(b.p, b.size, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if st := stats(t, a, 0); st.Live != 0 || st.LiveAllocs != 0 {
		t.Fatalf("after freeing everything: %+v", st)
	}
	return out
}

// TestTorchTraces replays each trace through the allocator with the pool
// in its two placements: the figures follow the trace exactly, no call
// fails, and everything freed leaves nothing live. It pins what
// BENCHMARKS.md reports of them: the default pool reserves close to the
// peak of live bytes but gives chunks back and grows new ones dozens of
// times a step (each a cuMemFree that synchronizes the device, and a
// cuMemAlloc); with split_big the steady steps grow about once a step or
// less, at a price in peak reserved memory on GPT-2.
func TestTorchTraces(t *testing.T) {
	files, _ := filepath.Glob("testdata/torch-*.csv.gz")
	if len(files) != len(torchTraces) {
		t.Fatalf("%d traces in testdata, %d described", len(files), len(torchTraces))
	}
	for _, tc := range torchTraces {
		for _, c := range []struct {
			conf string
			// maxRatio bounds peak reserved over peak live bytes;
			// steadyGrowths is the range of growths a steady step.
			maxRatio               float64
			minPerStep, maxPerStep float64
		}{
			{"pool", map[bool]float64{true: 1.02, false: 1.065}[filepath.Base(tc.file) == "torch-train-gpt2-h100.csv.gz"], 50, 120},
			{"pool,split_big", map[bool]float64{true: 1.03, false: 1.055}[filepath.Base(tc.file) == "torch-train-gpt2-h100.csv.gz"], 0, 2},
		} {
			t.Run(filepath.Base(tc.file)+"/"+c.conf, func(t *testing.T) {
				r := replayTorch(t, tc.file, c.conf, tc.steady, tc.end)
				if r.st.Allocs != uint64(tc.allocs) || r.st.PeakLive != tc.peakLive {
					t.Fatalf("%d allocations, peak live %d; the trace has %d and %d", r.st.Allocs, r.st.PeakLive, tc.allocs, tc.peakLive)
				}
				ratio := float64(r.st.PeakReserved) / float64(r.st.PeakLive)
				perStep := float64(r.steadyGrowths) / float64(tc.steps)
				t.Logf("peak reserved / peak live %.4f; %d device allocations and %d frees for %d allocations; %.1f growths a steady step",
					ratio, r.st.DeviceAllocs, r.st.DeviceFrees, r.st.Allocs, perStep)
				if ratio > c.maxRatio {
					t.Errorf("peak reserved / peak live %.4f, want at most %.3f", ratio, c.maxRatio)
				}
				if perStep < c.minPerStep || perStep > c.maxPerStep {
					t.Errorf("%.1f growths a steady step, want %.0f to %.0f", perStep, c.minPerStep, c.maxPerStep)
				}
			})
		}
	}
}
