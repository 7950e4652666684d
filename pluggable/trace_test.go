package pluggable

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// The memory histories that PyTorch training wrote through the C ABI on an
// H100 (the log= option; the first steps of GPT-2 and ResNet-50 in
// BENCHMARKS.md), replayed through the allocator as the host calls it.

// torchEvent is one call of a history: an allocation, with an id of its
// own, or the free of the allocation with that id.
type torchEvent struct {
	alloc bool
	id    int
	size  uint64
}

// readTorch reads a history into events.
func readTorch(t testing.TB, file string) []torchEvent {
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
	live := map[uint64]int{} // address -> id
	var evs []torchEvent
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Op {
		case trace.Alloc:
			live[ev.Ptr] = len(evs)
			evs = append(evs, torchEvent{alloc: true, id: len(evs), size: uint64(ev.Size)})
		case trace.Free:
			id, ok := live[ev.Ptr]
			if !ok {
				t.Fatalf("%s frees %#x, never allocated", file, ev.Ptr)
			}
			delete(live, ev.Ptr)
			evs = append(evs, torchEvent{id: id, size: uint64(ev.Size)})
		}
	}
}

// repeatSteps returns the history up to the end of the steps from
// allocation first to allocation last (counting allocations from 1), with
// those steps played copies times: a longer run of the same training,
// which the recorded history is too short to show. The steps must end
// where they began: an allocation that outlives them (carried out) must
// match, by size, one made before them that they free (carried in); copy
// k+1 frees the allocations that copy k carried out.
func repeatSteps(t testing.TB, evs []torchEvent, first, last, copies int) []torchEvent {
	t.Helper()
	var start, end, n int
	for i, e := range evs {
		if e.alloc {
			n++
			if n == first {
				start = i
			}
			if n == last+1 {
				end = i
				break
			}
		}
	}
	if end == 0 {
		end = len(evs)
	}
	seg := evs[start:end]
	inSeg, freedInSeg := map[int]bool{}, map[int]bool{}
	for _, e := range seg {
		if e.alloc {
			inSeg[e.id] = true
		} else {
			freedInSeg[e.id] = true
		}
	}
	out := append([]torchEvent(nil), evs[:start]...)
	next := len(evs)
	var carried map[uint64][]int // size -> ids carried out of the last copy
	for k := range copies {
		ids := map[int]int{}
		out2 := map[uint64][]int{}
		for _, e := range seg {
			switch {
			case e.alloc:
				ids[e.id] = e.id
				if k > 0 {
					ids[e.id] = next
					next++
				}
				out = append(out, torchEvent{alloc: true, id: ids[e.id], size: e.size})
				if !freedInSeg[e.id] {
					out2[e.size] = append(out2[e.size], ids[e.id])
				}
			case inSeg[e.id]:
				out = append(out, torchEvent{id: ids[e.id], size: e.size})
			case k == 0:
				out = append(out, e)
			default:
				c := carried[e.size]
				if len(c) == 0 {
					t.Fatalf("the steps free %d bytes made before them, and carry out no allocation of that size", e.size)
				}
				out = append(out, torchEvent{id: c[0], size: e.size})
				carried[e.size] = c[1:]
			}
		}
		for size, c := range carried {
			if len(c) != 0 {
				t.Fatalf("the steps carry out %d allocations of %d bytes that the next copy does not free", len(c), size)
			}
		}
		carried = out2
	}
	return out
}

// torchReplay is what replaying one history through one configuration
// gave.
type torchReplay struct {
	st            Stats
	steadyGrowths uint64 // growths from allocation steady to allocation end
	steadyFrees   uint64 // chunks given back to the upstream in the same steps
	steadyPool    mr.PoolStats
}

// replayTorch replays evs through a fresh allocator of conf on the
// simulator, as the host calls it: the figures follow the history exactly,
// no call fails, live bytes are the same before allocation steady and
// after the steps that end with allocation end (a boundary off by one
// allocation would break that), and freeing what is left leaves nothing
// live.
func replayTorch(t *testing.T, evs []torchEvent, conf string, steady, end int) torchReplay {
	t.Helper()
	a, _ := newSim(t, conf)
	type block struct {
		p    uintptr
		size uint64
	}
	live := map[int]block{}
	var cur, peak, atSteady uint64
	var n int
	var before Stats
	var beforePool mr.PoolStats
	var out torchReplay
	done := false
	finish := func() {
		if cur != atSteady {
			t.Fatalf("live bytes %d after the steady steps, %d before: the boundaries are not step boundaries", cur, atSteady)
		}
		st := stats(t, a, 0)
		out.steadyGrowths = st.DeviceAllocs - before.DeviceAllocs
		out.steadyFrees = st.DeviceFrees - before.DeviceFrees
		if p := a.devs[0].Load().pool; p != nil {
			ps := p.Stats()
			out.steadyPool = mr.PoolStats{Growths: ps.Growths - beforePool.Growths, Releases: ps.Releases - beforePool.Releases,
				Steals: ps.Steals - beforePool.Steals, BigSplits: ps.BigSplits - beforePool.BigSplits,
				GiantSplits: ps.GiantSplits - beforePool.GiantSplits}
		}
		done = true
	}
	for _, ev := range evs {
		if ev.alloc {
			n++
			if n == steady {
				before, atSteady = stats(t, a, 0), cur
				if p := a.devs[0].Load().pool; p != nil {
					beforePool = p.Stats()
				}
			}
			if n == end+1 {
				finish()
			}
			p := a.Alloc(ev.size, 0, 0)
			if p == 0 {
				t.Fatalf("alloc %d: %s", ev.size, a.LastError())
			}
			live[ev.id] = block{p, ev.size}
			cur += ev.size
			peak = max(peak, cur)
			continue
		}
		b, ok := live[ev.id]
		if !ok || b.size != ev.size {
			t.Fatalf("history frees allocation %d of %d bytes, not live with that size", ev.id, ev.size)
		}
		if err := a.Free(b.p, b.size, 0, 0); err != nil {
			t.Fatal(err)
		}
		delete(live, ev.id)
		cur -= b.size
	}
	if !done {
		if n != end {
			t.Fatalf("%d allocations, the steady steps end at %d", n, end)
		}
		finish()
	}
	st := stats(t, a, 0)
	if st.Live != cur || st.PeakLive != peak || st.Allocs != uint64(n) || st.BadFrees != 0 || st.Errors != 0 || st.OOMs != 0 {
		t.Fatalf("stats %+v; the history says live %d, peak %d, %d allocations", st, cur, peak, n)
	}
	out.st = st
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

// TestTorchTraces replays each history as recorded (GPT-2's first ten
// steps, ResNet-50's first twelve) and lengthened by repeating its steady
// steps (GPT-2 from its 5th step, one cycle of its six sequence lengths
// per copy; ResNet-50 from its 5th, once the optimizer's state exists), in
// the pool's two placements. It pins what BENCHMARKS.md reports: with
// split_big=false the pool reserves close to the peak of live bytes but
// gives chunks back and grows new ones dozens of times a step in steady
// state (each a cuMemFree that synchronizes the device, and a cuMemAlloc);
// with split_big (the default) it grows a few times a step at most, for a
// little more (GPT-2) or less (ResNet-50) reserved memory. The H100
// measured the same ratios over 24 steps as the longer runs here: 1.026
// and 1.051. Over Virtual (upstream=vmm) the pool maps only what its
// blocks need, near the peak of live bytes on the recorded steps; its
// figures vary from run to run (which decommits have completed when a
// commit comes depends on timing): GPT-2 1.002-1.003 in most runs and
// 1.12-1.13 in some, ResNet-50 1.02-1.07. The bounds are what it may
// reach, not what it usually does (BENCHMARKS.md). ResNet-50's steps move
// memory within the peak, which the pool over Virtual pays for with 5-7
// commits a steady step; with mapped_slack it keeps a margin for it
// (VMMMappedSlack): 1.009-1.010 and no commit in the repeated steady
// steps (1.75-2 a step in the recorded ones, still settling), in every
// run. The pool over Virtual's chunks with wait_frees keeps the default
// pool's bounds.
func TestTorchTraces(t *testing.T) {
	files, _ := filepath.Glob("testdata/torch-*.csv.gz")
	if len(files) != 2 {
		t.Fatalf("%d histories in testdata, 2 described", len(files))
	}
	gpt2 := readTorch(t, "testdata/torch-train-gpt2-h100.csv.gz")
	resnet := readTorch(t, "testdata/torch-train-resnet50-h100.csv.gz")
	type want struct {
		maxRatio               float64 // peak reserved over peak live bytes
		minPerStep, maxPerStep float64 // growths a steady step
	}
	for _, tc := range []struct {
		name               string
		evs                []torchEvent
		steady, end, steps int // the steady steps: first and last allocation, and how many
		peakLive           uint64
		pool, split, vmm   want
		slack              want // pool,upstream=vmm,mapped_slack
	}{
		{"gpt2", gpt2, 9025, 14742, 4, 13594206920, want{1.02, 50, 100}, want{1.03, 0, 3}, want{1.15, 0, 2}, want{1.15, 0, 2}},
		{"gpt2-34-steps", repeatSteps(t, gpt2, 6166, 14742, 5), 14743, 49050, 24, 13594206920, want{1.02, 50, 100}, want{1.03, 0, 3}, want{1.15, 0, 2}, want{1.15, 0, 2}},
		{"resnet50", resnet, 3587, 9786, 8, 3192592924, want{1.065, 40, 80}, want{1.055, 0, 2}, want{1.09, 0, 10}, want{1.02, 0, 3}},
		{"resnet50-36-steps", repeatSteps(t, resnet, 3587, 9786, 4), 9787, 28386, 24, 3192592924, want{1.065, 40, 80}, want{1.055, 0, 1}, want{1.09, 0, 10}, want{1.02, 0, 0.25}},
	} {
		for _, c := range []struct {
			conf string
			want want
		}{{"pool,split_big=false", tc.pool}, {"pool", tc.split}, {"pool,upstream=vmm", tc.vmm}, {"pool,upstream=vmm,mapped_slack", tc.slack},
			// Virtual's chunks, each given back before the next is
			// mapped: the default pool's figures.
			{"pool,upstream=vmm,in_place=false,wait_frees", tc.split}} {
			t.Run(tc.name+"/"+c.conf, func(t *testing.T) {
				if raceEnabled && strings.HasPrefix(c.conf, "pool,upstream=vmm") {
					// Seconds under the race detector; TestPoolOverVirtual
					// and the tests of package mr run it there.
					t.Skip("a measurement")
				}
				r := replayTorch(t, tc.evs, c.conf, tc.steady, tc.end)
				if r.st.PeakLive != tc.peakLive {
					t.Fatalf("peak live %d; the history has %d", r.st.PeakLive, tc.peakLive)
				}
				ratio := float64(r.st.PeakReserved) / float64(r.st.PeakLive)
				perStep := float64(r.steadyGrowths) / float64(tc.steps)
				t.Logf("peak reserved / peak live %.4f; %d device allocations and %d frees for %d allocations; %.2f growths a steady step",
					ratio, r.st.DeviceAllocs, r.st.DeviceFrees, r.st.Allocs, perStep)
				if ratio > c.want.maxRatio {
					t.Errorf("peak reserved / peak live %.4f, want at most %.3f", ratio, c.want.maxRatio)
				}
				if perStep < c.want.minPerStep || perStep > c.want.maxPerStep {
					t.Errorf("%.2f growths a steady step, want %.0f to %.0f", perStep, c.want.minPerStep, c.want.maxPerStep)
				}
			})
		}
	}
}

// TestSteadyFreesComeFromGrowth pins where the default pool's device frees
// come from in a steady training loop, which PyTorch feels as stalls: each
// is a cuMemFree, which waits for the device. GPT-2's steps cycle through
// six sequence lengths, and each step holds up to three tensors of a size
// proportional to its length (the logits and their gradients, 392 to 1,570
// MiB). A chunk over cuMemAlloc cannot be extended or merged, so a step
// whose largest tensors outgrow the chunks the previous step left idle
// grows new ones, and the pool keeps its reserved bytes under their
// high-water mark by giving idle chunks back first, largest first (the
// release before growth of Pool.grow): about two frees and two growths a
// step, the 23+26 device calls in 12 steps that the H100 counted. Nothing
// else frees: the default has no release threshold (so no trim), no
// allocation runs out of memory, and SplitBig only splits blocks. Keeping
// the idle chunks instead raises peak reserved (BENCHMARKS.md, "Where the
// device frees of a steady step come from").
func TestSteadyFreesComeFromGrowth(t *testing.T) {
	gpt2 := readTorch(t, "testdata/torch-train-gpt2-h100.csv.gz")
	const steps = 24
	r := replayTorch(t, repeatSteps(t, gpt2, 6166, 14742, 5), "pool", 14743, 49050)
	if r.st.OOMs != 0 {
		t.Fatalf("%d allocations out of memory", r.st.OOMs)
	}
	ps := r.steadyPool
	t.Logf("steady steps: %d device allocations, %d frees; pool: %d growths, %d releases, %d steals, %d big splits",
		r.steadyGrowths, r.steadyFrees, ps.Growths, ps.Releases, ps.Steals, ps.BigSplits)
	if r.steadyFrees != ps.Releases || r.steadyGrowths != ps.Growths {
		t.Errorf("device calls %d+%d, the pool's growths and releases %d+%d: every device call of a steady step is one of the pool's",
			r.steadyGrowths, r.steadyFrees, ps.Growths, ps.Releases)
	}
	if perStep := float64(r.steadyFrees) / steps; perStep < 1.5 || perStep > 3 {
		t.Errorf("%.2f device frees a steady step, want 1.5 to 3 (2.0 when measured)", perStep)
	}
	if ps.Steals != 0 {
		t.Errorf("%d steals on one stream", ps.Steals)
	}
	ratio := float64(r.st.PeakReserved) / float64(r.st.PeakLive)
	if ratio > 1.03 {
		t.Errorf("peak reserved / peak live %.4f, want at most 1.03", ratio)
	}
}
