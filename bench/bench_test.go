package bench

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

func simDevice(t testing.TB) *sim.Device {
	t.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev.(*sim.Device)
}

// withBenchtime sets the benchtime for the rest of the test.
func withBenchtime(t *testing.T, v string) {
	t.Helper()
	restore, err := SetBenchtime(v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
}

// counting wraps a resource and records what a workload asked of it.
type counting struct {
	mr.Resource
	mu               sync.Mutex
	live             map[gpu.DevicePtr]int
	maxLive          int
	allocs, frees    int
	minSize, maxSize int
	perStream        map[uint64]int
	refuseAbove      int // refuse with ErrOutOfMemory when this many are live (0: never)
	onAlloc          func(n int, s gpu.Stream)
}

func newCounting(r mr.Resource) *counting {
	return &counting{Resource: r, live: map[gpu.DevicePtr]int{}, perStream: map[uint64]int{}, minSize: math.MaxInt}
}

func (c *counting) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	c.mu.Lock()
	refuse := c.refuseAbove > 0 && len(c.live) >= c.refuseAbove
	hook := c.onAlloc
	c.mu.Unlock()
	if hook != nil {
		hook(n, s)
	}
	if refuse {
		return 0, &mr.OutOfMemoryError{Requested: n}
	}
	p, err := c.Resource.Allocate(n, s)
	if err != nil {
		return p, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[p] = n
	c.allocs++
	c.maxLive = max(c.maxLive, len(c.live))
	c.minSize, c.maxSize = min(c.minSize, n), max(c.maxSize, n)
	c.perStream[s.ID()]++
	return p, nil
}

func (c *counting) Deallocate(p gpu.DevicePtr, n int, s gpu.Stream) error {
	// Forget p first: once the resource has it back, another goroutine
	// may be given it.
	c.mu.Lock()
	if c.live[p] != n {
		c.mu.Unlock()
		return errors.New("counting: free of a block not live with that size")
	}
	delete(c.live, p)
	c.frees++
	c.mu.Unlock()
	if err := c.Resource.Deallocate(p, n, s); err != nil {
		c.mu.Lock()
		c.live[p] = n
		c.frees--
		c.mu.Unlock()
		return err
	}
	return nil
}

// newPool builds the suite's pool, closed when the test ends: make the
// test's streams first, so that it is closed before they are destroyed.
func newPool(t *testing.T, dev gpu.Device) mr.Resource {
	t.Helper()
	r, closeFn, err := registry.New("pool", dev, ResourceOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeFn(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func newTestStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

func TestSuiteNames(t *testing.T) {
	cs := Suite()
	re := regexp.MustCompile(`^(Pair/resource=\w+/size=\d+(B|KiB|MiB)|Streams/resource=\w+/goroutines=\d+|(Random|Notebook|Pipeline)/resource=\w+)$`)
	seen := map[string]bool{}
	per := map[Workload][]string{}
	for _, c := range cs {
		n := c.FullName()
		if !re.MatchString(n) {
			t.Errorf("case name %q has not the go test shape", n)
		}
		if seen[n] {
			t.Errorf("case %q twice", n)
		}
		seen[n] = true
		if _, ok := registry.Lookup(c.Resource); !ok {
			t.Errorf("%s: unknown resource", n)
		}
		if c.FullName() != string(c.Workload)+"/"+c.Sub() {
			t.Errorf("%s: Sub %q", n, c.Sub())
		}
		per[c.Workload] = append(per[c.Workload], c.Resource)
	}
	nr := len(Resources)
	want := map[Workload]int{
		WorkloadPair: len(PairSizes) * nr, WorkloadStreams: len(StreamGoroutines) * nr,
		WorkloadRandom: nr, WorkloadNotebook: len(NotebookResources), WorkloadPipeline: len(PipelineResources),
	}
	for w, n := range want {
		if len(per[w]) != n {
			t.Errorf("%s: %d cases, want %d", w, len(per[w]), n)
		}
	}
	if !slices.Equal(per[WorkloadNotebook], NotebookResources) {
		t.Errorf("notebook resources %v", per[WorkloadNotebook])
	}
	if !slices.Equal(per[WorkloadPipeline], PipelineResources) {
		t.Errorf("pipeline resources %v", per[WorkloadPipeline])
	}
	for _, v := range registry.Resources() {
		if v.Variant && slices.Contains(per[WorkloadPair], v.Name) {
			t.Errorf("variant %s runs in every workload", v.Name)
		}
	}
	for _, tc := range []struct {
		c          Case
		name, full string
		maxBlock   int
	}{
		{Case{Workload: WorkloadPair, Resource: "pool", Size: 4 << 10}, "Pair/size=4KiB", "Pair/resource=pool/size=4KiB", 4 << 10},
		{Case{Workload: WorkloadPair, Resource: "async", Size: 300}, "Pair/size=300B", "Pair/resource=async/size=300B", 300},
		{Case{Workload: WorkloadStreams, Resource: "arena", Size: 4 << 10, Streams: 16}, "Streams/goroutines=16", "Streams/resource=arena/goroutines=16", 4 << 10},
		{Case{Workload: WorkloadRandom, Resource: "binning"}, "Random", "Random/resource=binning", 4 << 20},
		{Case{Workload: WorkloadRandom, Resource: "binning", Random: RandomOptions{MaxSize: 1 << 20}}, "Random", "Random/resource=binning", 1 << 20},
		{Case{Workload: WorkloadNotebook, Resource: "direct"}, "Notebook", "Notebook/resource=direct", NotebookBytes},
		{Case{Workload: WorkloadPipeline, Resource: "async_noreturnwait"}, "Pipeline", "Pipeline/resource=async_noreturnwait", PipelineBytes},
	} {
		if tc.c.Name() != tc.name || tc.c.FullName() != tc.full || tc.c.MaxBlock() != tc.maxBlock {
			t.Errorf("%+v: %q %q %d, want %q %q %d", tc.c, tc.c.Name(), tc.c.FullName(), tc.c.MaxBlock(), tc.name, tc.full, tc.maxBlock)
		}
	}
}

// One case of each workload on two resources runs exactly the iterations
// asked, and leaves the device holding no memory once its resource is
// closed.
func TestRunCases(t *testing.T) {
	withBenchtime(t, "5x")
	dev := simDevice(t)
	for _, c := range Suite() {
		if c.Resource != "pool" && c.Resource != "direct" {
			continue
		}
		if c.Workload == WorkloadPair && c.Size != 4<<10 || c.Workload == WorkloadStreams && c.Streams != 4 {
			continue
		}
		t.Run(c.FullName(), func(t *testing.T) {
			res, err := Run(c, dev)
			if err != nil {
				t.Fatal(err)
			}
			if res.N != 5 {
				t.Errorf("N = %d, want 5", res.N)
			}
			if c.Workload == WorkloadStreams {
				if ps := res.Extra["pairs/s"]; ps <= 0 {
					t.Errorf("pairs/s = %v", ps)
				}
			}
			if err := dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			free, total, err := dev.MemGetInfo()
			if err != nil {
				t.Fatal(err)
			}
			if free != total {
				t.Errorf("device holds %d bytes after the case", total-free)
			}
		})
	}
}

// A failed case returns the reason: the injected error, through every
// wrapping, naming the case.
func TestRunReportsFailure(t *testing.T) {
	withBenchtime(t, "5x")
	dev := simDevice(t)
	_, err := Run(Case{Workload: WorkloadPair, Resource: "nope", Size: 256}, dev)
	if err == nil || !regexp.MustCompile(`^Pair/resource=nope/size=256B: bench: unknown resource "nope"`).MatchString(err.Error()) {
		t.Errorf("unknown resource: %v", err)
	}
	_, err = Run(Case{Workload: "Sleep", Resource: "direct"}, dev)
	if err == nil || !regexp.MustCompile(`unknown workload "Sleep"`).MatchString(err.Error()) {
		t.Errorf("unknown workload: %v", err)
	}
	injected := errors.New("injected")
	dev.FailNext(sim.OpMalloc, 2, injected) // the warm-up pair, then the first timed one
	_, err = Run(Case{Workload: WorkloadPair, Resource: "direct", Size: 256}, dev)
	if !errors.Is(err, injected) || !regexp.MustCompile(`^Pair/resource=direct/size=256B: pair: allocate 256 bytes: `).MatchString(err.Error()) {
		t.Errorf("failed allocation: %v", err)
	}
	dev.FailNext(sim.OpMalloc, 0, nil)
	// The device works afterwards.
	if _, err := Run(Case{Workload: WorkloadPair, Resource: "direct", Size: 256}, dev); err != nil {
		t.Errorf("after the failure: %v", err)
	}
}

func TestSetBenchtime(t *testing.T) {
	for _, bad := range []string{"", "fast", "0x", "-1s", "3"} {
		if _, err := SetBenchtime(bad); err == nil {
			t.Errorf("SetBenchtime(%q) accepted", bad)
		}
	}
	withBenchtime(t, "7x")
	if _, err := SetBenchtime("nope"); err == nil {
		t.Fatal("bad value accepted")
	}
	// The bad value changed nothing.
	res, err := Run(Case{Workload: WorkloadPair, Resource: "pool", Size: 256}, simDevice(t))
	if err != nil || res.N != 7 {
		t.Errorf("N = %d, err %v; want 7", res.N, err)
	}
	restore, err := SetBenchtime("3x")
	if err != nil {
		t.Fatal(err)
	}
	restore()
	res, _ = Run(Case{Workload: WorkloadPair, Resource: "pool", Size: 256}, simDevice(t))
	if res.N != 7 {
		t.Errorf("after restore N = %d, want 7", res.N)
	}
}

// Random keeps within its bounds, makes one allocation or free per op,
// and frees everything; an out-of-memory answer makes it free instead.
func TestRandom(t *testing.T) {
	withBenchtime(t, "300x")
	dev := simDevice(t)
	for _, refuse := range []int{0, 3} {
		s := newTestStream(t, dev)
		c := newCounting(newPool(t, dev))
		c.refuseAbove = refuse
		opts := RandomOptions{MaxLive: 8, MinSize: 1 << 10, MaxSize: 8 << 10, Seed: 5, Warmup: -1}
		res, err := benchmark(func(b *testing.B) { Random(b, c, s, opts) })
		if err != nil {
			t.Fatal(err)
		}
		limit := 8
		if refuse > 0 {
			limit = refuse
		}
		if c.maxLive != limit || c.minSize < 1<<10 || c.maxSize > 8<<10 {
			t.Errorf("refuse %d: max live %d, sizes %d..%d", refuse, c.maxLive, c.minSize, c.maxSize)
		}
		if len(c.live) != 0 || c.allocs != c.frees {
			t.Errorf("refuse %d: %d live at the end, %d allocs, %d frees", refuse, len(c.live), c.allocs, c.frees)
		}
		// Each op allocates or frees once; the frees after the loop are
		// the blocks still live then, at most MaxLive.
		if ops := c.allocs + c.frees; ops < res.N || ops > res.N+limit {
			t.Errorf("refuse %d: %d allocations and frees for %d ops", refuse, ops, res.N)
		}
	}
	// The warm-up's operations run before the timed ones, one each.
	for _, warm := range []int{0, 100} {
		s := newTestStream(t, dev)
		c := newCounting(newPool(t, dev))
		opts := RandomOptions{MaxLive: 8, MinSize: 1 << 10, MaxSize: 8 << 10, Seed: 5, Warmup: warm}
		res, err := benchmark(func(b *testing.B) { Random(b, c, s, opts) })
		if err != nil {
			t.Fatal(err)
		}
		want := warm
		if warm == 0 {
			want = randomWarmupPerLive * opts.MaxLive // the default
		}
		if ops := c.allocs + c.frees; ops < res.N+want || ops > res.N+want+opts.MaxLive {
			t.Errorf("warm-up %d: %d allocations and frees for %d ops", warm, ops, res.N)
		}
	}
	// Nothing live and no memory: a clear failure, not a loop.
	s := newTestStream(t, dev)
	always := &refusing{newPool(t, dev)}
	_, err := benchmark(func(b *testing.B) { Random(b, always, s, RandomOptions{}) })
	if !errors.Is(err, mr.ErrOutOfMemory) {
		t.Errorf("always out of memory: %v", err)
	}
}

type refusing struct{ mr.Resource }

func (r *refusing) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	return 0, &mr.OutOfMemoryError{Requested: n}
}

// Streams runs one goroutine per stream, each on its own stream, taking
// batches of pairs from one queue; its pairs/s is the pairs of the
// batches done when the last op ended over the time it took, at least
// PairsPerRound per stream per op and at most one round more.
func TestStreams(t *testing.T) {
	withBenchtime(t, "4x")
	dev := simDevice(t)
	streams := []gpu.Stream{newTestStream(t, dev), newTestStream(t, dev), newTestStream(t, dev)}
	c := newCounting(newPool(t, dev))
	res, err := benchmark(func(b *testing.B) { Streams(b, c, streams, 4<<10) })
	if err != nil {
		t.Fatal(err)
	}
	round := PairsPerRound * len(streams)
	total := 0
	for _, s := range streams {
		got := c.perStream[s.ID()] - 1 // the untimed pair
		if got%streamsBatch != 0 {
			t.Errorf("stream %d: %d timed allocations, not whole batches of %d", s.ID(), got, streamsBatch)
		}
		total += got
	}
	if total < res.N*round || total > (res.N+1)*round {
		t.Errorf("%d pairs in all for %d ops of %d", total, res.N, round)
	}
	pairs := res.Extra["pairs/s"] * res.T.Seconds()
	if pairs < float64(res.N*round)*(1-1e-6) || pairs > float64(total)*(1+1e-6) {
		t.Errorf("pairs/s × time = %v, want %d to %d", pairs, res.N*round, total)
	}
	if share := res.Extra["min-share"]; share < 0 || share > 1 {
		t.Errorf("min-share %v, want 0 to 1", share)
	}
	if c.allocs != c.frees || len(c.live) != 0 {
		t.Errorf("%d allocations, %d frees, %d live", c.allocs, c.frees, len(c.live))
	}
	if _, err := benchmark(func(b *testing.B) { Streams(b, c, nil, 4<<10) }); err == nil {
		t.Error("no streams accepted")
	}
}

// A goroutine whose pairs fail stops the benchmark with its stream's
// error, and the other goroutines stop too.
func TestStreamsFailure(t *testing.T) {
	withBenchtime(t, "50x")
	dev := simDevice(t)
	streams := []gpu.Stream{newTestStream(t, dev), newTestStream(t, dev), newTestStream(t, dev)}
	c := newCounting(newPool(t, dev))
	bad := streams[2].ID()
	f := &failingOn{Resource: c, stream: bad, after: 1} // its untimed pair works
	_, err := benchmark(func(b *testing.B) { Streams(b, f, streams, 4<<10) })
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), fmt.Sprintf("streams: stream %d: allocate 4096 bytes: ", bad)) {
		t.Errorf("err = %v", err)
	}
	if c.allocs != c.frees || len(c.live) != 0 {
		t.Errorf("%d allocations, %d frees, %d live", c.allocs, c.frees, len(c.live))
	}
}

var errInjected = errors.New("injected")

// failingOn refuses every allocation on stream after its first after ones.
type failingOn struct {
	mr.Resource
	stream uint64
	after  int
	n      atomic.Int64
}

func (f *failingOn) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	if s.ID() == f.stream && f.n.Add(1) > int64(f.after) {
		return 0, errInjected
	}
	return f.Resource.Allocate(n, s)
}

// Notebook's time includes the work still running on the stream when the
// loop ends: a 50 ms kernel enqueued by the one timed iteration shows in
// ns/op. The kernel runs on while the timer is stopped between b.Loop's
// last call and the final StartTimer, so a loaded machine may see a little
// less than 50 ms; without the final sync the time would be microseconds.
func TestNotebookTimesTheFinalSync(t *testing.T) {
	withBenchtime(t, "1x")
	dev := simDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStream(t, dev)
	c := newCounting(newPool(t, dev))
	calls := 0
	const spin = 50 * time.Millisecond
	c.onAlloc = func(n int, s gpu.Stream) {
		if calls++; calls == 2 { // the first timed iteration, after the warm-up
			if err := k.Spin(s, spin); err != nil {
				t.Error(err)
			}
		}
	}
	res, err := benchmark(func(b *testing.B) { Notebook(b, c, s, k) })
	if err != nil {
		t.Fatal(err)
	}
	if res.N != 1 || res.T < spin*4/5 {
		t.Errorf("N = %d, T = %v; want 1 iteration taking at least %v", res.N, res.T, spin*4/5)
	}
	if c.allocs != 2 || c.minSize != NotebookBytes || len(c.live) != 0 {
		t.Errorf("%d allocations of %d bytes, %d live", c.allocs, c.minSize, len(c.live))
	}
}

// The notebook's fill really writes the memory: checked on the last block
// the pool hands out again.
func TestNotebookFills(t *testing.T) {
	withBenchtime(t, "3x")
	dev := simDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestStream(t, dev)
	r := newPool(t, dev)
	if _, err := benchmark(func(b *testing.B) { Notebook(b, r, s, k) }); err != nil {
		t.Fatal(err)
	}
	// A pool on one stream hands the same block out each time; its words
	// are those of the last fill (seed 3).
	p, err := r.Allocate(NotebookBytes, s)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Deallocate(p, NotebookBytes, s)
	cnt, err := r.Allocate(256, s)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Deallocate(cnt, 256, s)
	if err := dev.MemsetD8Async(cnt, 0, 4, s); err != nil {
		t.Fatal(err)
	}
	if err := k.Check(s, p, NotebookBytes/4, 3, cnt); err != nil {
		t.Fatal(err)
	}
	var out [4]byte
	if err := dev.CopyDtoHAsync(out[:], cnt, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if out != [4]byte{} {
		t.Errorf("mismatched words: %v", out)
	}
}

// Pipeline allocates every buffer on the producer and frees it on the
// consumer, and the peak it reports shows the return wait at work: with
// it, the driver's pool hands each buffer back to the producer, so one
// 32 MiB growth serves the whole run.
func TestPipeline(t *testing.T) {
	withBenchtime(t, "40x")
	dev := simDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	producer, consumer := newTestStream(t, dev), newTestStream(t, dev)
	c := newCounting(newPool(t, dev))
	res, err := benchmark(func(b *testing.B) { Pipeline(b, c, producer, consumer, k) })
	if err != nil {
		t.Fatal(err)
	}
	if res.N != 40 || c.allocs != 41 || c.frees != 41 || len(c.live) != 0 || c.perStream[producer.ID()] != 41 {
		t.Errorf("N = %d: %d allocations (%d on the producer), %d frees, %d live; want 40, 41 (41), 41, 0",
			res.N, c.allocs, c.perStream[producer.ID()], c.frees, len(c.live))
	}
	if c.minSize != PipelineBytes || c.maxSize != PipelineBytes {
		t.Errorf("sizes %d..%d, want %d", c.minSize, c.maxSize, PipelineBytes)
	}
	for _, tc := range []struct {
		resource string
		maxPeak  float64 // MiB; 0: only reported
	}{
		{"async", 32},
		{"async_noreturnwait", 0},
		{"pool", 0},
	} {
		res, err := Run(Case{Workload: WorkloadPipeline, Resource: tc.resource}, dev)
		if err != nil {
			t.Fatal(err)
		}
		peak, ok := res.Extra["peak-MiB"]
		if !ok || peak < PipelineBytes>>20 || tc.maxPeak > 0 && peak > tc.maxPeak {
			t.Errorf("%s: peak-MiB = %v (reported %v), want %d..%v", tc.resource, peak, ok, PipelineBytes>>20, tc.maxPeak)
		}
	}
}
