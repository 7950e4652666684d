package mr

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// In sharded mode (which concurrent operations switch a Stats adaptor
// to) current values and totals stay exact whenever no operation runs,
// and peaks are at least every current value a snapshot saw and at most
// the true peak plus one quantum per stream.
func TestStatsSharded(t *testing.T) {
	up := newPFUpstream(1 << 40)
	a := NewStats(up, StatsOptions{PerStream: true})
	a.sharded.Store(true)
	s1, s2 := newPFStream(up.d), newPFStream(up.d)
	type live struct {
		p gpu.DevicePtr
		n int
	}
	var held []live
	var cur, total, peak uint64
	for i, step := range []struct {
		alloc int // bytes to allocate, or 0 to free the oldest
		s     gpu.Stream
	}{
		{1000, s1}, {500, s2}, {0, s2}, {64, s2}, {3 << 20, s1}, {0, s1}, {0, s2}, {4096, s1},
	} {
		if step.alloc > 0 {
			p, err := a.Allocate(step.alloc, step.s)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, live{p, step.alloc})
			cur += uint64(step.alloc)
			total += uint64(step.alloc)
			peak = max(peak, cur)
		} else {
			if err := a.Deallocate(held[0].p, held[0].n, step.s); err != nil {
				t.Fatal(err)
			}
			cur -= uint64(held[0].n)
			held = held[1:]
		}
		snap := a.Snapshot()
		if snap.Bytes.Current != cur || snap.Allocations.Current != uint64(len(held)) || snap.Bytes.Total != total {
			t.Fatalf("step %d: %+v, want current %d in %d allocations, total %d", i, snap, cur, len(held), total)
		}
		if snap.Bytes.Peak < cur || snap.Bytes.Peak > peak+2*statQuantum {
			t.Fatalf("step %d: peak %d, want between %d and %d", i, snap.Bytes.Peak, cur, peak+2*statQuantum)
		}
	}
	a.ResetPeaks()
	if snap := a.Snapshot(); snap.Bytes.Peak != cur {
		t.Errorf("after ResetPeaks: peak %d, want %d", snap.Bytes.Peak, cur)
	}
}

// Operations that run at the same moment switch the adaptor to sharded
// mode (a compare-and-swap of the adaptor-wide bytes fails); one
// goroutine alone never does.
func TestStatsShardsUnderContention(t *testing.T) {
	up := newPFUpstream(1 << 40)
	a := NewStats(up, StatsOptions{})
	s := newPFStream(up.d)
	for range 1000 {
		p, err := a.Allocate(256, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Deallocate(p, 256, s); err != nil {
			t.Fatal(err)
		}
	}
	if a.sharded.Load() {
		t.Fatal("sharded after operations of one goroutine")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two threads running at once")
	}
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !a.sharded.Load() && time.Now().Before(deadline) {
				for range 100 {
					a.change(1, 1)
					a.change(-1, -1)
				}
			}
		})
	}
	wg.Wait()
	if !a.sharded.Load() {
		t.Fatal("8 goroutines changing the counters for 10 s never collided")
	}
	if snap := a.Snapshot(); snap.Bytes.Current != 0 || snap.Allocations.Current != 0 {
		t.Errorf("after the switch: %+v", snap)
	}
}
