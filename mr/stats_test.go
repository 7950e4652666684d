package mr_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func TestStatsCounts(t *testing.T) {
	up := newRecording()
	st := mr.NewStats(up, mr.StatsOptions{PerStream: true})
	s1, s2 := up.stream(), up.stream()

	type step struct {
		op       string // "alloc", "free", "fail", "reset"
		size     int
		s        gpu.Stream
		freeOn   gpu.Stream
		want     mr.StatsSnapshot
		wantS1   mr.StatsSnapshot
		ptrIndex int
	}
	var ptrs []gpu.DevicePtr
	var sizes []int
	steps := []step{
		{op: "alloc", size: 100, s: s1,
			want:   mr.StatsSnapshot{Bytes: mr.Counter{100, 100, 100}, Allocations: mr.Counter{1, 1, 1}},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{100, 100, 100}, Allocations: mr.Counter{1, 1, 1}}},
		{op: "alloc", size: 300, s: s2,
			want:   mr.StatsSnapshot{Bytes: mr.Counter{400, 400, 400}, Allocations: mr.Counter{2, 2, 2}},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{100, 100, 100}, Allocations: mr.Counter{1, 1, 1}}},
		// Allocated on s1, freed on s2: s1's counters go down.
		{op: "free", ptrIndex: 0, freeOn: s2,
			want:   mr.StatsSnapshot{Bytes: mr.Counter{300, 400, 400}, Allocations: mr.Counter{1, 2, 2}},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{0, 100, 100}, Allocations: mr.Counter{0, 1, 1}}},
		{op: "fail", size: 50, s: s1,
			want:   mr.StatsSnapshot{Bytes: mr.Counter{300, 400, 400}, Allocations: mr.Counter{1, 2, 2}, Failures: 1, OutOfMemory: 1},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{0, 100, 100}, Allocations: mr.Counter{0, 1, 1}, Failures: 1, OutOfMemory: 1}},
		{op: "reset",
			want:   mr.StatsSnapshot{Bytes: mr.Counter{300, 300, 400}, Allocations: mr.Counter{1, 1, 2}, Failures: 1, OutOfMemory: 1},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{0, 0, 100}, Allocations: mr.Counter{0, 0, 1}, Failures: 1, OutOfMemory: 1}},
		{op: "alloc", size: 50, s: s1,
			want:   mr.StatsSnapshot{Bytes: mr.Counter{350, 350, 450}, Allocations: mr.Counter{2, 2, 3}, Failures: 1, OutOfMemory: 1},
			wantS1: mr.StatsSnapshot{Bytes: mr.Counter{50, 50, 150}, Allocations: mr.Counter{1, 1, 2}, Failures: 1, OutOfMemory: 1}},
	}
	for i, stp := range steps {
		switch stp.op {
		case "alloc":
			p, err := st.Allocate(stp.size, stp.s)
			if err != nil {
				t.Fatal(err)
			}
			ptrs, sizes = append(ptrs, p), append(sizes, stp.size)
		case "free":
			if err := st.Deallocate(ptrs[stp.ptrIndex], sizes[stp.ptrIndex], stp.freeOn); err != nil {
				t.Fatal(err)
			}
		case "fail":
			up.failAllocs(&mr.OutOfMemoryError{Resource: "recording", Requested: stp.size})
			if _, err := st.Allocate(stp.size, stp.s); !errors.Is(err, mr.ErrOutOfMemory) {
				t.Fatalf("step %d: %v", i, err)
			}
		case "reset":
			st.ResetPeaks()
		}
		if got := st.Snapshot(); got != stp.want {
			t.Errorf("step %d (%s): snapshot\n got %+v\nwant %+v", i, stp.op, got, stp.want)
		}
		if got := st.StreamSnapshots()[s1.ID()]; got != stp.wantS1 {
			t.Errorf("step %d (%s): s1\n got %+v\nwant %+v", i, stp.op, got, stp.wantS1)
		}
	}
	u := st.Usage()
	if u.Used != 350 || u.PeakUsed != 350 {
		t.Errorf("Usage = %+v", u)
	}
}

func TestStatsConcurrentPeaks(t *testing.T) {
	up := newRecording()
	st := mr.NewStats(up, mr.StatsOptions{PerStream: true})
	const goroutines, rounds = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := up.stream()
			for i := range rounds {
				size := 256 * (1 + (g+i)%4)
				p, err := st.Allocate(size, s)
				if err != nil {
					t.Error(err)
					return
				}
				snap := st.Snapshot()
				if snap.Bytes.Peak < snap.Bytes.Current || snap.Allocations.Peak < snap.Allocations.Current {
					t.Errorf("peak below current: %+v", snap)
				}
				if err := st.Deallocate(p, size, s); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	snap := st.Snapshot()
	if snap.Bytes.Current != 0 || snap.Allocations.Current != 0 || snap.Allocations.Total != goroutines*rounds {
		t.Fatalf("after the run: %+v", snap)
	}
	// Each goroutine holds at most one allocation of at most 1 KiB.
	if snap.Allocations.Peak > goroutines || snap.Bytes.Peak > goroutines*1024 {
		t.Fatalf("peaks over what was ever live at once: %+v", snap)
	}
	var total uint64
	for _, ss := range st.StreamSnapshots() {
		total += ss.Allocations.Total
		if ss.Bytes.Current != 0 {
			t.Fatalf("stream left with %d bytes", ss.Bytes.Current)
		}
	}
	if total != goroutines*rounds {
		t.Fatalf("per-stream totals sum to %d", total)
	}
}

// benchPairs allocates and frees through r, the cost a program pays per
// pair.
func benchPairs(b *testing.B, r mr.Resource, s gpu.Stream) {
	b.ReportAllocs()
	for b.Loop() {
		p, err := r.Allocate(1024, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Deallocate(p, 1024, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatsOverhead compares an allocate/free pair on a bare upstream
// that does nothing with the same pair through the Stats adaptor: the
// difference is the adaptor's cost.
func BenchmarkStatsOverhead(b *testing.B) {
	up := newNull()
	s := newFakeStream(up.dev.(*fakeDevice))
	b.Run("bare", func(b *testing.B) { benchPairs(b, up, s) })
	b.Run("stats", func(b *testing.B) { benchPairs(b, mr.NewStats(up, mr.StatsOptions{}), s) })
	b.Run("stats-per-stream", func(b *testing.B) {
		benchPairs(b, mr.NewStats(up, mr.StatsOptions{PerStream: true}), s)
	})
	b.Run("stats-parallel", func(b *testing.B) {
		st := mr.NewStats(up, mr.StatsOptions{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			s := newFakeStream(up.dev.(*fakeDevice))
			for pb.Next() {
				p, _ := st.Allocate(1024, s)
				st.Deallocate(p, 1024, s)
			}
		})
	})
}

// BenchmarkAdaptors measures each adaptor's pair over the do-nothing
// upstream.
func BenchmarkAdaptors(b *testing.B) {
	up := newNull()
	s := newFakeStream(up.dev.(*fakeDevice))
	for _, ac := range adaptorCases() {
		r := ac.wrap(b, up)
		if ac.name == "logging" {
			// Not the test cases' growing buffer: measure the adaptor.
			r = mr.NewLogging(up, io.Discard, mr.LoggingOptions{})
		}
		b.Run(ac.name, func(b *testing.B) { benchPairs(b, r, s) })
	}
	// Logging as a program logs: to a file, through a buffer.
	b.Run("logging-file", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "log.csv"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 1<<16)
		l := mr.NewLogging(up, w, mr.LoggingOptions{})
		benchPairs(b, l, s)
		if err := l.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkStatsOverAsync is the same comparison over the async resource
// on the simulator, the cost a program sees relative to a real upstream.
func BenchmarkStatsOverAsync(b *testing.B) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		b.Fatal(err)
	}
	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	b.Run("bare", func(b *testing.B) { benchPairs(b, a, s) })
	b.Run("stats", func(b *testing.B) { benchPairs(b, mr.NewStats(a, mr.StatsOptions{}), s) })
	a.Reap(true)
}

func ExampleStats() {
	up := newRecording() // any mr.Resource: a pool, the async resource...
	s := up.stream()
	st := mr.NewStats(up, mr.StatsOptions{})
	p, _ := st.Allocate(1<<20, s)
	q, _ := st.Allocate(1<<10, s)
	st.Deallocate(p, 1<<20, s)
	snap := st.Snapshot()
	fmt.Println("current:", snap.Bytes.Current, "peak:", snap.Bytes.Peak, "total:", snap.Bytes.Total)
	st.Deallocate(q, 1<<10, s)
	// Output:
	// current: 1024 peak: 1049600 total: 1049600
}

// BenchmarkStatsStreams runs bench.Streams (goroutines each on a stream
// of its own, 4 KiB pairs) on a pool, bare and under Stats, on the
// device of internal/testdev: the adaptor's cost per pair is the
// difference of the two, and with 16 goroutines it shows whether the
// adaptor shares anything between streams.
func BenchmarkStatsStreams(b *testing.B) {
	for _, g := range []int{1, 16} {
		for _, wrap := range []string{"bare", "stats"} {
			b.Run(fmt.Sprintf("goroutines=%d/%s", g, wrap), func(b *testing.B) {
				dev := testdev.Device(b)
				var streams []gpu.Stream
				for range g {
					s, err := dev.NewStream()
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { s.Synchronize(); s.Destroy() })
					streams = append(streams, s)
				}
				var r mr.Resource = bench.NewResource(b, "pool", dev, bench.StreamsSize)
				if wrap == "stats" {
					r = mr.NewStats(r, mr.StatsOptions{})
				}
				bench.Streams(b, r, streams, bench.StreamsSize)
			})
		}
	}
}
