package mr_test

import (
	"bufio"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/cpuclock"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// benchDepth is how many frames below the benchmark's own function
// BenchmarkAdaptorsOverPool makes its pairs: deeper than the 16 frames
// Tracking records there, so that Tracking walks and records a full
// 16-frame stack, as it does under a program's own call chain.
const benchDepth = 16

// BenchmarkAdaptorsOverPool measures each adaptor's allocate/free pair of
// 1 KiB over a pool, one goroutine, on the device of internal/testdev:
// the adaptor's cost per pair is its figure minus the pool's (the first
// case). Every case makes its pairs benchDepth frames below the
// benchmark. Logging writes to a file through a buffer, as a program
// logs; Tracking records 16 frames, and the benchmark fails unless the
// stack it recorded for a pair is 16 frames long.
func BenchmarkAdaptorsOverPool(b *testing.B) {
	cases := []struct {
		name string
		wrap func(b *testing.B, up mr.Resource) mr.Resource
	}{
		{"pool", func(b *testing.B, up mr.Resource) mr.Resource { return up }},
		{"stats", func(b *testing.B, up mr.Resource) mr.Resource { return mr.NewStats(up, mr.StatsOptions{}) }},
		{"limit", func(b *testing.B, up mr.Resource) mr.Resource { return mr.NewLimit(up, mr.NewBudget(1<<40)) }},
		{"retry", func(b *testing.B, up mr.Resource) mr.Resource { return mr.NewRetry(up, mr.RetryOptions{}) }},
		{"aligned", func(b *testing.B, up mr.Resource) mr.Resource {
			a, err := mr.NewAligned(up, 4096)
			if err != nil {
				b.Fatal(err)
			}
			return a
		}},
		{"logging-file", func(b *testing.B, up mr.Resource) mr.Resource {
			f, err := os.Create(filepath.Join(b.TempDir(), "log.csv"))
			if err != nil {
				b.Fatal(err)
			}
			w := bufio.NewWriterSize(f, 1<<16)
			l := mr.NewLogging(up, w, mr.LoggingOptions{})
			b.Cleanup(func() {
				if err := l.Flush(); err != nil {
					b.Error(err)
				}
				if err := w.Flush(); err != nil {
					b.Error(err)
				}
				f.Close()
			})
			return l
		}},
		{"tracking-16", func(b *testing.B, up mr.Resource) mr.Resource {
			return mr.NewTracking(up, mr.TrackingOptions{Depth: 16})
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dev := testdev.Device(b)
			s, err := dev.NewStream()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Synchronize(); s.Destroy() })
			r := c.wrap(b, bench.NewResource(b, "pool", dev, 1<<20))
			atDepth(benchDepth, func() { benchPairs(b, r, s) })
			if t, ok := r.(*mr.Tracking); ok {
				checkTrackedDepth(b, t, s, 16)
			}
		})
	}
}

// checkTrackedDepth allocates through t at the benchmark's depth and
// fails b unless t recorded want frames for it.
func checkTrackedDepth(b *testing.B, t *mr.Tracking, s gpu.Stream, want int) {
	var p gpu.DevicePtr
	var err error
	atDepth(benchDepth, func() { p, err = t.Allocate(1024, s) })
	if err != nil {
		b.Fatal(err)
	}
	live := t.Live()
	if len(live) != 1 || len(live[0].Stack) != want {
		b.Fatalf("tracking recorded %d live allocations, the first with %d frames; want 1 with %d",
			len(live), len(live[0].Stack), want)
	}
	if err := t.Deallocate(p, 1024, s); err != nil {
		b.Fatal(err)
	}
}

// atDepth calls f n frames deeper than its caller.
//
//go:noinline
func atDepth(n int, f func()) {
	if n <= 0 {
		f()
		return
	}
	atDepth(n-1, f)
}

// BenchmarkTrackingDeep is the pair over a pool, bare and through
// Tracking (16 frames recorded), made 16 frames below the benchmark, so
// that Tracking records a full 16-frame stack.
func BenchmarkTrackingDeep(b *testing.B) {
	for _, name := range []string{"pool", "tracking"} {
		b.Run(name, func(b *testing.B) {
			dev := testdev.Device(b)
			s, err := dev.NewStream()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Synchronize(); s.Destroy() })
			r := bench.NewResource(b, "pool", dev, 1<<20)
			if name == "tracking" {
				r = mr.NewTracking(r, mr.TrackingOptions{Depth: 16})
			}
			atDepth(16, func() { benchPairs(b, r, s) })
		})
	}
}

// BenchmarkHostCosts measures, on the host it runs on, the operations
// the adaptors' pairs are made of, so that an adaptor's cost over the
// pool can be read against them in the same run: an uncontended atomic
// add and compare-and-swap (the locked instructions of Limit's charge and
// refund, Stats' counters, Aligned's slots), a mutex's lock and unlock
// (the log writer's, twice a pair), a reading of the runtime's monotonic
// clock (time.Since) and of Logging's clock (internal/cpuclock). Then the
// locked work of a pair through an adaptor, alone: Limit's (a
// compare-and-swap under the peak and an add), a design's that would keep
// a credit per stream (two adds), Aligned's slots' (two
// compare-and-swaps); and logging-floor, what a pair's two lines in RMM's
// format cost before any formatting: two readings of Logging's clock, the
// writer's lock taken twice, and the two lines' 98 bytes copied into a
// 64 KiB buffer written to a file through a bufio.Writer, as
// AdaptorsOverPool/logging-file writes them.
func BenchmarkHostCosts(b *testing.B) {
	var word atomic.Uint64
	var mu sync.Mutex
	b.Run("atomic-add", func(b *testing.B) {
		for b.Loop() {
			word.Add(1)
		}
	})
	b.Run("compare-and-swap", func(b *testing.B) {
		for b.Loop() {
			v := word.Load()
			word.CompareAndSwap(v, v+1)
		}
	})
	b.Run("mutex", func(b *testing.B) {
		for b.Loop() {
			mu.Lock()
			mu.Unlock() //nolint:staticcheck // an empty critical section is what is measured
		}
	})
	start := time.Now()
	b.Run("time-since", func(b *testing.B) {
		var s time.Duration
		for b.Loop() {
			s += time.Since(start)
		}
		hostSink = s
	})
	cpuclock.Now()
	time.Sleep(2 * time.Millisecond) // past the clock's measurement of its rate
	cpuclock.Now()
	b.Run("cpuclock", func(b *testing.B) {
		if !cpuclock.Counter() {
			b.Log("the CPU's counter is not used here: cpuclock reads the monotonic clock")
		}
		var s time.Duration
		for b.Loop() {
			s += cpuclock.Now()
		}
		hostSink = s
	})
	b.Run("limit-locked-pair", func(b *testing.B) {
		for b.Loop() {
			v := word.Load()
			word.CompareAndSwap(v, v+1024)
			word.Add(^uint64(1024 - 1))
		}
	})
	b.Run("two-adds", func(b *testing.B) {
		for b.Loop() {
			word.Add(1024)
			word.Add(^uint64(1024 - 1))
		}
	})
	b.Run("two-compare-and-swaps", func(b *testing.B) {
		for b.Loop() {
			v := word.Load()
			word.CompareAndSwap(v, v+1)
			v = word.Load()
			word.CompareAndSwap(v, v+1)
		}
	})
	b.Run("logging-floor", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "log.csv"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 1<<16)
		const alloc = "0,21:56:55.123456,allocate,0x7f0000000000,1024,0x1\n"
		const free = "0,21:56:55.123512,free,0x7f0000000000,1024,0x1\n"
		buf := make([]byte, 0, 64<<10)
		line := func(text string) {
			mu.Lock()
			if len(buf)+len(text) > cap(buf) {
				if _, err := w.Write(buf); err != nil {
					b.Fatal(err)
				}
				buf = buf[:0]
			}
			buf = append(buf, text...)
			mu.Unlock()
		}
		var s time.Duration
		for b.Loop() {
			s += cpuclock.Now()
			line(alloc)
			s += cpuclock.Now()
			line(free)
		}
		hostSink = s
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	})
}

var hostSink time.Duration
