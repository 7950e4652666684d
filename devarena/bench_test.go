package devarena

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// BenchmarkAllocate compares, in one run, two ways to make the same
// allocations on 1, 4 and 16 streams at once:
//
//   - device: each stream's kernel makes perRound allocations of
//     benchBytes bytes, one per thread, from the stream's own arena (a Set),
//     after a Reset; the round ends with a stream synchronize.
//   - host: each stream's goroutine makes perRound MallocAsync calls of
//     benchBytes bytes on its stream, then the perRound FreeAsync calls, and
//     synchronizes.
//
// allocs/s counts allocations of all streams together (for the host, each
// is an alloc+free pair; for the device, the Reset is the free of a round).
// The host side runs with the default pool's release threshold at its
// maximum, so that the driver keeps its memory between rounds and the
// figure is its steady state, not the cost of mapping memory again.
func BenchmarkAllocate(b *testing.B) {
	dev := testDevice(b)
	k, err := LoadKernels(dev)
	if err != nil {
		b.Fatal(err)
	}
	const benchBytes = 256
	perRound := 1 << 14
	if testing.Short() {
		perRound = 1 << 10
	}
	for _, streams := range []int{1, 4, 16} {
		ss := make([]gpu.Stream, streams)
		for i := range ss {
			if ss[i], err = dev.NewStream(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("device/streams=%d", streams), func(b *testing.B) {
			g := newGuarded(dev)
			set, err := NewSet(g, Config{Size: perRound * benchBytes, Align: benchBytes})
			if err != nil {
				b.Fatal(err)
			}
			arenas := make([]*Arena, streams)
			for i, s := range ss {
				if arenas[i], err = set.For(s); err != nil {
					b.Fatal(err)
				}
			}
			rounds := 0
			b.ReportAllocs()
			for b.Loop() {
				eachStream(b, ss, func(i int, s gpu.Stream) error {
					a := arenas[i]
					if err := a.Reset(); err != nil {
						return err
					}
					if err := k.Bump(s, a, perRound, benchBytes); err != nil {
						return err
					}
					return s.Synchronize()
				})
				rounds++
			}
			b.ReportMetric(float64(rounds*streams*perRound)/b.Elapsed().Seconds(), "allocs/s")
			for _, a := range arenas {
				if st, err := a.Stats(); err != nil || st.Overflow || st.HighWater != perRound*benchBytes {
					b.Fatalf("last round: %+v, %v; want high water %d", st, err, perRound*benchBytes)
				}
			}
			if err := set.Close(); err != nil {
				b.Fatal(err)
			}
		})
		b.Run(fmt.Sprintf("host/streams=%d", streams), func(b *testing.B) {
			keepPoolMemory(b, dev)
			ptrs := make([][]gpu.DevicePtr, streams)
			for i := range ptrs {
				ptrs[i] = make([]gpu.DevicePtr, perRound)
			}
			rounds := 0
			b.ReportAllocs()
			for b.Loop() {
				eachStream(b, ss, func(i int, s gpu.Stream) error {
					ps := ptrs[i]
					for j := range ps {
						p, err := dev.MallocAsync(benchBytes, s)
						if err != nil {
							return err
						}
						ps[j] = p
					}
					for _, p := range ps {
						if err := dev.FreeAsync(p, s); err != nil {
							return err
						}
					}
					return s.Synchronize()
				})
				rounds++
			}
			b.ReportMetric(float64(rounds*streams*perRound)/b.Elapsed().Seconds(), "allocs/s")
		})
		for _, s := range ss {
			if err := s.Destroy(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// eachStream runs f for every stream on its own goroutine and waits.
func eachStream(b *testing.B, ss []gpu.Stream, f func(i int, s gpu.Stream) error) {
	var wg sync.WaitGroup
	errs := make([]error, len(ss))
	for i, s := range ss {
		wg.Go(func() { errs[i] = f(i, s) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("stream %d: %v", i, err)
		}
	}
}

// keepPoolMemory raises the default pool's release threshold to its
// maximum for the rest of the benchmark, and restores it after.
func keepPoolMemory(b *testing.B, dev gpu.Device) {
	pool, err := dev.DefaultMemPool()
	if err != nil {
		b.Fatal(err)
	}
	old, err := pool.Attribute(gpu.PoolReleaseThreshold)
	if err != nil {
		b.Fatal(err)
	}
	if err := pool.SetAttribute(gpu.PoolReleaseThreshold, math.MaxUint64); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := pool.SetAttribute(gpu.PoolReleaseThreshold, old); err != nil {
			b.Error(err)
		}
		if err := pool.TrimTo(0); err != nil {
			b.Error(err)
		}
	})
}
