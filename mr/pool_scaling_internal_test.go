package mr

// A benchmark of the parts of the pool pair's fast path under 1 to 16
// goroutines, each on a stream of its own, that tells a part that shares
// a cache line some goroutine writes (its time inside each goroutine grows
// with the goroutines) from one that only pays the host's cost of locked
// instructions. It reports "ns/op-in", the mean time of one operation
// inside the goroutines, which their start and their wait for each other
// do not enter, and "ops/s", all goroutines together.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

// scalingOps is how many operations each goroutine makes per op.
const scalingOps = 1 << 14

// BenchmarkPoolScaling runs, per goroutine on its own stream:
//
//	lookup: the stream table's lookup of its stream (two per pair)
//	slot:   fastAllocate and fastFree on its stream's state, found once
//	        (the mutex every 255 pairs, when the slot's counter is full)
//	pair:   Allocate and Deallocate of 4 KiB, the whole fast path
func BenchmarkPoolScaling(b *testing.B) {
	for _, part := range []string{"lookup", "slot", "pair"} {
		for _, g := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("part=%s/goroutines=%d", part, g), func(b *testing.B) { benchScalingPart(b, part, g) })
		}
	}
}

func benchScalingPart(b *testing.B, part string, g int) {
	dev := testdev.Device(b)
	up, err := NewAsync(dev, AsyncOptions{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewPool(up, PoolOptions{})
	if err != nil {
		b.Fatal(err)
	}
	streams := make([]gpu.Stream, g)
	for i := range streams {
		if streams[i], err = dev.NewStream(); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		if err := p.Close(); err != nil {
			b.Error(err)
		}
		if err := up.Close(); err != nil {
			b.Error(err)
		}
		for _, s := range streams {
			if err := s.Destroy(); err != nil {
				b.Error(err)
			}
		}
	})
	const size = 4 << 10
	pair := func(s gpu.Stream) error {
		q, err := p.Allocate(size, s)
		if err != nil {
			return err
		}
		return p.Deallocate(q, size, s)
	}
	work := func(s gpu.Stream) error {
		switch part {
		case "lookup":
			id := s.ID()
			for range scalingOps {
				if p.streams.lookup(id) == nil {
					return fmt.Errorf("stream %d not found", id)
				}
			}
		case "slot":
			st := p.streams.lookup(s.ID())
			for range scalingOps {
				q := st.fastAllocate(size)
				if q == 0 {
					if err := pair(s); err != nil { // settles and re-arms the slot
						return err
					}
					continue
				}
				if !st.fastFree(q, size) {
					if err := p.Deallocate(q, size, s); err != nil {
						return err
					}
				}
			}
		default:
			for range scalingOps {
				if err := pair(s); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, s := range streams {
		if err := pair(s); err != nil { // arms each slot
			b.Fatal(err)
		}
	}
	type result struct {
		busy time.Duration
		err  error
		_    [48]byte
	}
	res := make([]result, g)
	var busy time.Duration
	b.ReportAllocs()
	for b.Loop() {
		var wg sync.WaitGroup
		for i, s := range streams {
			wg.Go(func() {
				t0 := time.Now()
				res[i].err = work(s)
				res[i].busy = time.Since(t0)
			})
		}
		wg.Wait()
		for i := range res {
			if res[i].err != nil {
				b.Fatalf("goroutine %d: %v", i, res[i].err)
			}
			busy += res[i].busy
		}
	}
	ops := float64(b.N) * float64(g*scalingOps)
	b.ReportMetric(float64(busy.Nanoseconds())/ops, "ns/op-in")
	b.ReportMetric(ops/b.Elapsed().Seconds(), "ops/s")
}
