package replay

import (
	"context"
	"io"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/trace/tracegen"
)

// genTrace produces an RMM log of n events on the fly: 64 blocks live at
// a time on 4 streams, each allocation freed 64 allocations later. It
// never holds more than one line, so the only memory a replay of it
// needs is the replay's own.
type genTrace struct {
	n, i int
	line []byte
	rest []byte
}

func (g *genTrace) Read(p []byte) (int, error) {
	if len(g.rest) == 0 {
		if g.i > g.n {
			return 0, io.EOF
		}
		g.line = g.line[:0]
		if g.i == 0 {
			g.line = append(g.line, trace.Header+"\n"...)
		} else {
			k := (g.i - 1) / 2
			op, blk := "allocate", k
			if (g.i-1)%2 == 1 {
				op, blk = "free", k-64
				if blk < 0 {
					op, blk = "allocate", k+1<<40
				}
			}
			g.line = append(g.line, "1,10:00:00.000001,"...)
			g.line = append(g.line, op...)
			g.line = append(g.line, ",0x"...)
			g.line = strconv.AppendUint(g.line, uint64(blk)<<12, 16)
			g.line = append(g.line, ',')
			g.line = strconv.AppendInt(g.line, int64(256+blk%4096), 10)
			g.line = append(g.line, ",0x"...)
			g.line = strconv.AppendInt(g.line, int64(blk%4), 16)
			g.line = append(g.line, '\n')
		}
		g.i++
		g.rest = g.line
	}
	n := copy(p, g.rest)
	g.rest = g.rest[n:]
	return n, nil
}

// bumpResource hands out addresses and keeps only counters.
type bumpResource struct {
	dev  gpu.Device
	next gpu.DevicePtr
	used uint64
	peak uint64
}

func (b *bumpResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	b.next += gpu.DevicePtr(round(size))
	b.used += round(size)
	b.peak = max(b.peak, b.used)
	return b.next, nil
}
func (b *bumpResource) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	b.used -= round(size)
	return nil
}
func (b *bumpResource) Device() gpu.Device { return b.dev }
func (b *bumpResource) Usage() mr.Usage {
	return mr.Usage{Used: b.used, Reserved: b.used, PeakUsed: b.peak, PeakReserved: b.peak}
}

// A replay's memory does not grow with the length of the trace: a million
// events (about 50 MB of log) replay in a few MB of heap.
func TestLongTraceMemory(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 200_000
	}
	dev := &fakeDevice{}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var worst uint64
	r, err := Run(context.Background(), trace.NewCSVReader(&genTrace{n: n}, "generated"), dev,
		&bumpResource{dev: dev}, Options{SeriesPoints: 2000, ProgressEvery: n / 10, Progress: func(Progress) {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			worst = max(worst, ms.HeapAlloc)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Events != int64(n) || r.UnknownFrees != 0 || r.Streams != 4 || len(r.Series) > 2000 {
		t.Errorf("got %d events, %d unknown frees, %d streams, %d points", r.Events, r.UnknownFrees, r.Streams, len(r.Series))
	}
	if grew := int64(worst) - int64(base); grew > 8<<20 {
		t.Errorf("heap grew by %d bytes during a replay of %d events", grew, n)
	}
	t.Logf("%d events: heap grew at most %d KiB", n, (int64(worst)-int64(base))>>10)
}

// TestGeneratedTraceMemory replays a generated RMM log of a million
// events (tracegen.Churn: 20,000 blocks live at the peak on 1,000 streams,
// a free in a hundred on another stream) on the simulator, through the
// stack `streamalloc replay` builds (a pool over async, its upstream
// timed), and bounds the heap: at most 64 MiB above what it was before
// the replay at any progress report, and flat once the ramp is over (the
// last report no more than 8 MiB above the first report after the ramp),
// so a longer log would need no more. Under the race detector, which
// multiplies the cost of every memory access, the log is 200,000 events.
func TestGeneratedTraceMemory(t *testing.T) {
	n := 1_000_000
	if raceEnabled || testing.Short() {
		n = 200_000
	}
	const live, streams = 20_000, 1_000
	src, err := tracegen.Churn(tracegen.Config{Events: n, Live: live, Streams: streams, MaxSize: 64 << 10, CrossEvery: 100, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	var timer *UpstreamTimer
	res, closeRes, err := registry.New("pool", dev, registry.Options{Upstream: registry.UpstreamAsync, WrapUpstream: func(up mr.Resource) mr.Resource {
		timer = NewUpstreamTimer("async", up)
		return timer
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var heap []uint64 // HeapAlloc above base after a GC, at each report
	r, err := Run(context.Background(), trace.NewCSVReader(src, "churn"), dev, res, Options{
		Resource: "pool", Upstream: timer, ProgressEvery: n / 10,
		Progress: func(p Progress) {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap = append(heap, ms.HeapAlloc-min(ms.HeapAlloc, base))
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := closeRes(); err != nil {
		t.Fatal(err)
	}
	if r.Events != int64(n) || r.Streams != streams || r.UnknownFrees != 0 || r.Failures != 0 || r.FreedAtEnd != 0 {
		t.Errorf("%d events, %d streams, %d unknown frees, %d failures, %d freed at the end", r.Events, r.Streams, r.UnknownFrees, r.Failures, r.FreedAtEnd)
	}
	// Reports come every n/10 events; the ramp ends at event 20,000.
	worst := slices.Max(heap)
	afterRamp, last := heap[1], heap[len(heap)-2] // the last is the final report, after the drain
	if worst > 64<<20 || last > afterRamp+8<<20 {
		t.Errorf("heap above the start at each report (KiB): %v; want at most 64 MiB, and the last during the churn within 8 MiB of the first after the ramp", kib(heap))
	}
	t.Logf("%d events, %d live, %d streams: heap above the start (KiB) %v; %.0f ns/event (own %.0f)", n, live, streams, kib(heap), r.NsPerEvent, r.OwnNsPerEvent)
}

func kib(v []uint64) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = x >> 10
	}
	return out
}
