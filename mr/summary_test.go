package mr_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

var update = flag.Bool("update", false, "rewrite the golden files of the summary tests")

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1<<20 - 1, "1.0 MiB"}, // rounds up into the next unit, not "1024.0 KiB"
		{10 << 20, "10.0 MiB"},
		{80 << 30, "80.0 GiB"},
		{3 << 40, "3.0 TiB"},
		{1 << 62, "4.0 EiB"},
		{^uint64(0), "16.0 EiB"},
	} {
		if got := mr.FormatBytes(c.n); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// normalizeStreams replaces "stream N" by "stream A", "stream B"... in the
// order of the given IDs, so that a golden file does not depend on how
// many streams the process made before the test. Where the ID is in a
// table's label, the padding after the label grows by what the ID lost,
// so the columns stay where the summary put them.
func normalizeStreams(text string, ids ...uint64) string {
	re := regexp.MustCompile(`stream (\d+)((?: [a-z]+)*)( {2,})?`)
	return re.ReplaceAllStringFunc(text, func(m string) string {
		g := re.FindStringSubmatch(m)
		n, _ := strconv.ParseUint(g[1], 10, 64)
		name := "?" + g[1]
		for i, id := range ids {
			if id == n {
				name = string(rune('A' + i))
			}
		}
		pad := g[3]
		if pad != "" {
			pad += strings.Repeat(" ", max(len(g[1])-len(name), 0))
		}
		return "stream " + name + g[2] + pad
	})
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", t.Name(), path, got, want)
	}
}

// summaryChain builds retry > stats (per stream) > limit > tracking > pool
// > direct on a 1 GiB simulated device, and drives it to a known state:
// live blocks on two streams, a cross-stream free left pending, a refusal
// by the budget.
func summaryChain(t *testing.T) (top mr.Resource, a, b gpu.Stream) {
	t.Helper()
	dev := simDevices(t, sim.Config{Capacity: 1 << 30})[0]
	a, b = newStream(t, dev), newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := mr.NewTracking(pool, mr.TrackingOptions{})
	lim := mr.NewLimit(tr, mr.NewBudget(24<<20))
	st := mr.NewStats(lim, mr.StatsOptions{PerStream: true})
	// No retry: a retry would release the pool's idle memory, and the
	// test wants to see it.
	top = mr.NewRetry(st, mr.RetryOptions{Attempts: -1})

	alloc := func(n int, s gpu.Stream) gpu.DevicePtr {
		p, err := top.Allocate(n, s)
		if err != nil {
			t.Fatalf("allocate %d: %v", n, err)
		}
		return p
	}
	var ps []gpu.DevicePtr
	for _, n := range []int{1 << 20, 3 << 20, 100 << 10} {
		ps = append(ps, alloc(n, a))
	}
	pb := alloc(5<<20, b)
	// Freed on its home: cached. Freed on the other stream: pending.
	if err := top.Deallocate(ps[2], 100<<10, a); err != nil {
		t.Fatal(err)
	}
	if err := top.Deallocate(ps[1], 3<<20, b); err != nil {
		t.Fatal(err)
	}
	// Over the budget: refused by the limit, counted as out of memory.
	if _, err := top.Allocate(20<<20, b); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("over the budget: %v", err)
	}
	t.Cleanup(func() {
		top.Deallocate(ps[0], 1<<20, a)
		top.Deallocate(pb, 5<<20, b)
	})
	return top, a, b
}

// TestSummaryGolden pins the layout of the summary.
func TestSummaryGolden(t *testing.T) {
	top, a, b := summaryChain(t)
	got := normalizeStreams(mr.Summary(top), a.ID(), b.ID())
	golden(t, "summary.golden", got)

	var sb strings.Builder
	if err := mr.WriteSummary(&sb, top); err != nil {
		t.Fatal(err)
	}
	if normalizeStreams(sb.String(), a.ID(), b.ID()) != got {
		t.Error("WriteSummary and Summary differ")
	}
}

func TestStatsOf(t *testing.T) {
	top, a, b := summaryChain(t)
	cs := mr.StatsOf(top)
	var names []string
	for _, l := range cs.Levels {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, " > "); got != "retry > stats > limit > tracking > pool > direct" {
		t.Fatalf("levels %s", got)
	}
	if cs.Device.Total != 1<<30 || cs.Device.Name != sim.DefaultName || !cs.Device.Simulated {
		t.Errorf("device %+v", cs.Device)
	}
	retry, stats, limit, tracking, pool, direct := cs.Levels[0], cs.Levels[1], cs.Levels[2], cs.Levels[3], cs.Levels[4], cs.Levels[5]
	if retry.Retry == nil || retry.Retry.OutOfMemory != 1 || retry.Retry.Failed != 1 {
		t.Errorf("retry %+v", retry.Retry)
	}
	// The limit charges whole 256-byte units: 1 MiB + 5 MiB live.
	if limit.Budget == nil || *limit.Budget != (mr.BudgetStats{Limit: 24 << 20, Used: 6 << 20, Peak: 9<<20 + 100<<10, Charged: 6 << 20}) {
		t.Errorf("budget %+v", limit.Budget)
	}
	if s := stats.Stats; s == nil || s.Bytes.Current != 6<<20 || s.Allocations.Current != 2 ||
		s.Allocations.Total != 4 || s.Failures != 1 || s.OutOfMemory != 1 {
		t.Errorf("stats %+v", stats.Stats)
	}
	if len(stats.Streams) != 2 || stats.Streams[0].Stream != a.ID() || stats.Streams[1].Stream != b.ID() ||
		stats.Streams[0].Bytes.Current != 1<<20 || stats.Streams[1].Bytes.Current != 5<<20 ||
		stats.Streams[1].OutOfMemory != 1 {
		t.Errorf("per stream %+v", stats.Streams)
	}
	if tracking.Tracked == nil || tracking.Tracked.Live != 2 || tracking.Tracked.LiveBytes != 6<<20 {
		t.Errorf("tracked %+v", tracking.Tracked)
	}
	lay := pool.Layout
	if lay == nil || pool.Pool == nil || pool.Usage == nil {
		t.Fatalf("pool level %+v", pool)
	}
	// Stream a: a small chunk (2 MiB: the cached 100 KiB block and the
	// rest free) and an 8 MiB chunk (1 MiB live, 3 MiB pending, 4 MiB
	// free); stream b: a chunk of its own for a big request (5 MiB live
	// in 6 MiB).
	if len(lay.Chunks) != 3 || lay.Reserved() != 16<<20 || pool.Usage.Reserved != 16<<20 {
		t.Errorf("chunks %d, %d bytes, usage %v", len(lay.Chunks), lay.Reserved(), pool.Usage)
	}
	if lay.Bytes[mr.BlockLive] != 6<<20 || lay.Bytes[mr.BlockPending] != 3<<20 ||
		lay.Bytes[mr.BlockCached] != 100<<10 || lay.Blocks[mr.BlockLive] != 2 {
		t.Errorf("layout bytes %v blocks %v", lay.Bytes, lay.Blocks)
	}
	if lay.LargestFree != 4<<20 {
		t.Errorf("largest free %s", mr.FormatBytes(lay.LargestFree))
	}
	for _, c := range lay.Chunks {
		var sum int
		at := c.Base
		for _, bl := range c.Blocks {
			if bl.Ptr != at {
				t.Errorf("chunk %#x: block at %#x, want %#x", c.Base, bl.Ptr, at)
			}
			at += gpu.DevicePtr(bl.Size)
			sum += bl.Size
			if bl.State == mr.BlockPending && bl.Stream != b.ID() {
				t.Errorf("pending block freed by stream %d, want %d", bl.Stream, b.ID())
			}
		}
		if sum != c.Size {
			t.Errorf("chunk %#x: blocks sum to %d of %d", c.Base, sum, c.Size)
		}
	}
	if direct.Usage == nil || direct.Usage.Reserved != 16<<20 {
		t.Errorf("direct %+v", direct.Usage)
	}
	if got := mr.StatsOf(nil); len(got.Levels) != 0 {
		t.Errorf("StatsOf(nil) = %+v", got)
	}
	if got := mr.Summary(nil); got != "streamalloc memory summary: no resource\n" {
		t.Errorf("Summary(nil) = %q", got)
	}
}

// TestStringers: %v of the statistics and of every resource is one line
// with sizes in IEC units, not a struct's fields.
func TestStringers(t *testing.T) {
	top, _, _ := summaryChain(t)
	cs := mr.StatsOf(top)
	for _, l := range cs.Levels {
		got := fmt.Sprintf("%v", l.Resource)
		if !strings.HasPrefix(got, l.Name) || strings.Contains(got, "\n") || strings.Contains(got, "{") {
			t.Errorf("%%v of %s = %q", l.Name, got)
		}
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{mr.Usage{Reserved: 24 << 20, PeakReserved: 32 << 20, Used: 12 << 20, PeakUsed: 20 << 20},
			"reserved 24.0 MiB (peak 32.0 MiB), used 12.0 MiB (peak 20.0 MiB)"},
		{mr.StatsSnapshot{Bytes: mr.Counter{Current: 12 << 20, Peak: 20 << 20, Total: 64 << 20},
			Allocations: mr.Counter{Current: 2, Peak: 5, Total: 9}, Failures: 1, OutOfMemory: 1},
			"12.0 MiB in 2 allocations (peak 20.0 MiB in 5; 64.0 MiB in 9 in all), 1 refused (1 out of memory)"},
		{mr.StatsSnapshot{Bytes: mr.Counter{Current: 512, Peak: 512, Total: 512},
			Allocations: mr.Counter{Current: 1, Peak: 1, Total: 1}},
			"512 B in 1 allocation (peak 512 B in 1; 512 B in 1 in all)"},
		{mr.PoolStats{Allocations: 9, QuickHits: 4, Frees: 7, CrossStreamFrees: 1, Growths: 3, Releases: 1, Waits: 2, Chunks: 3},
			"9 allocations (4 from the quick cache), 7 frees (1 cross-stream), 3 growths, 1 release, 0 steals, 2 event waits, 3 chunks"},
		{mr.RetryCounts{OutOfMemory: 2, Recovered: 1, Failed: 1, Retries: 3, Reaped: 4 << 20},
			"out of memory 2 times: 1 recovered, 1 failed; 3 retries, 4.0 MiB reaped"},
		{mr.BlockPending, "pending"},
		{mr.BlockState(9), "BlockState(9)"},
	} {
		if got := fmt.Sprintf("%v", c.v); got != c.want {
			t.Errorf("%%v of %T = %q, want %q", c.v, got, c.want)
		}
	}
	if got := cs.String(); got != "retry > stats > limit > tracking > pool > direct: reserved 16.0 MiB (peak 16.0 MiB), used 6.0 MiB (peak 9.1 MiB)" {
		t.Errorf("ChainStats.String() = %q", got)
	}
}

// TestOutOfMemoryErrorMessage: the refusal of a pool at its MaxSize in
// human units, with the largest free block and the reason.
func TestOutOfMemoryErrorMessage(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 1 << 30})[0]
	s := newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{MaxSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.Allocate(3<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Deallocate(p, 3<<20, s)
	_, err = pool.Allocate(12<<20, s)
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("over MaxSize: %v", err)
	}
	if oom.LargestFree != 5<<20 || oom.Reason != "MaxSize reached" {
		t.Errorf("largest free %d, reason %q", oom.LargestFree, oom.Reason)
	}
	want := fmt.Sprintf("pool: out of memory: 12.0 MiB (12582912 bytes) requested on stream %d; "+
		"reserved 8.0 MiB, used 3.0 MiB, limit 16.0 MiB, largest free block 5.0 MiB: MaxSize reached", s.ID())
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message\n%s\nwant it to start with\n%s", err, want)
	}

	// The device refuses: the reason says so, and the driver's error
	// follows.
	_, err = mr.NewDirect(dev).Allocate(2<<30, s)
	if !errors.As(err, &oom) || oom.Reason != "the device is out of memory" ||
		!strings.Contains(err.Error(), "2.0 GiB (2147483648 bytes) requested") {
		t.Errorf("device out of memory: %v", err)
	}
}

// TestStatsOfAsync: the pending frees of an Async, per stream.
func TestStatsOfAsync(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 1 << 30})[0]
	a, b := newStream(t, dev), newStream(t, dev)
	as, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	p, err := as.Allocate(1<<20, a)
	if err != nil {
		t.Fatal(err)
	}
	q, err := as.Allocate(2<<20, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := as.Deallocate(p, 1<<20, b); err != nil {
		t.Fatal(err)
	}
	defer as.Deallocate(q, 2<<20, a)
	cs := mr.StatsOf(as)
	if len(cs.Levels) != 1 || cs.Levels[0].Name != "async" || cs.Levels[0].Pending == nil {
		t.Fatalf("levels %+v", cs.Levels)
	}
	pe := cs.Levels[0].Pending
	if pe.LiveBytes != 2<<20 || pe.PendingBytes != 1<<20 || pe.LiveAllocations != 1 || pe.PendingFrees != 1 ||
		len(pe.Streams) != 1 || pe.Streams[0] != (mr.StreamPending{Stream: b.ID(), Bytes: 1 << 20, Frees: 1}) {
		t.Errorf("pending %+v", pe)
	}
	sum := mr.Summary(as)
	for _, want := range []string{
		"live 2.0 MiB in 1 allocation; pending frees 1.0 MiB in 1 free\n",
		fmt.Sprintf("stream %d: pending 1.0 MiB in 1 free\n", b.ID()),
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	if got := fmt.Sprint(as); !strings.HasPrefix(got, "async: reserved ") ||
		!strings.HasSuffix(got, "; live 2.0 MiB in 1 allocation, pending 1.0 MiB in 1 free") {
		t.Errorf("%%v of async = %q", got)
	}
}

// The host pools read as any resource: usage, a HostPool's counters, and
// the adaptors stacked over them.
func TestHostSummary(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	hp := mr.NewHostPool(dev)
	b, err := mr.AllocateHost[byte](hp, 5000, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(hp, b, s); err != nil {
		t.Fatal(err)
	}
	if b, err = mr.AllocateHost[byte](hp, 6000, s); err != nil {
		t.Fatal(err)
	}
	cs := mr.StatsOf(hp)
	if len(cs.Levels) != 1 || cs.Levels[0].Name != "host pool" || cs.Levels[0].Host == nil || cs.Levels[0].Resource != hp {
		t.Fatalf("StatsOf(HostPool) = %+v", cs)
	}
	if h := *cs.Levels[0].Host; h.Hits != 1 || h.Misses != 1 {
		t.Errorf("host counters %+v, want 1 hit and 1 miss", h)
	}
	if u := cs.Usage(); u.Used != 6000 || u.Reserved != 8<<10 {
		t.Errorf("usage %+v, want 6000 used of 8 KiB", u)
	}
	text := mr.Summary(hp)
	for _, want := range []string{"chain: host pool", "1 request from the cache", "1 page-locked allocation", "8.0 KiB"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	if err := mr.FreeHost(hp, b, s); err != nil {
		t.Fatal(err)
	}
	dp, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	db, err := mr.AllocateHost[byte](dp, 3000, s)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.FreeHost(dp, db, s)
	cs = mr.StatsOf(dp)
	if len(cs.Levels) != 1 || cs.Levels[0].Name != "driver host pool" || cs.Levels[0].Host != nil {
		t.Fatalf("StatsOf(DriverHostPool) = %+v", cs)
	}
	if u := cs.Usage(); u.Used != 3000 || u.Reserved != 4<<10 {
		t.Errorf("driver host pool usage %+v, want 3000 used of 4 KiB", u)
	}

	// A stack over the host pool: every level reads, the pool's counters
	// at the bottom.
	hp2 := mr.NewHostPool(dev)
	top := mr.NewStats(mr.NewLimit(hp2, mr.NewBudget(1<<20)), mr.StatsOptions{})
	v, err := mr.AllocateHost[float32](top, 1000, s)
	if err != nil {
		t.Fatal(err)
	}
	cs = mr.StatsOf(top)
	if got := cs.String(); !strings.HasPrefix(got, "stats > limit > host pool: ") {
		t.Errorf("StatsOf(stats over limit over host pool) = %q", got)
	}
	l := cs.Levels
	if len(l) != 3 || l[0].Stats == nil || l[0].Stats.Bytes.Current != 4000 || l[1].Budget == nil || l[1].Budget.Charged != 4096 || // rounded to Alignment
		l[2].Host == nil || l[2].Host.Misses != 1 || l[2].Usage == nil || l[2].Usage.Reserved != 4<<10 {
		t.Errorf("levels %+v", l)
	}
	if err := mr.FreeHost(top, v, s); err != nil {
		t.Fatal(err)
	}
	if u := mr.StatsOf(top).Usage(); u.Used != 0 || u.Reserved != 4<<10 {
		t.Errorf("after the free: usage %+v, want 0 used of 4 KiB cached", u)
	}
}
