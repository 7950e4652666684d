package mr

import (
	"context"
	"runtime/pprof"
	"strconv"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestTrackingAllocCountsBounded: a Tracking with more stack records than
// its shards' count arrays cover (distinct label sets make distinct
// records) keeps those arrays at allocCountsMax entries and still reports
// every record's alloc bytes and objects exactly, after the frees too.
func TestTrackingAllocCountsBounded(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracking(NewDirect(dev), TrackingOptions{})
	const records = allocCountsMax + 300
	var ptrs []gpu.DevicePtr
	for i := range records {
		pprof.Do(context.Background(), pprof.Labels("req", strconv.Itoa(i)), func(context.Context) {
			for range 2 {
				p, err := tr.Allocate(512+i, s)
				if err != nil {
					t.Fatal(err)
				}
				ptrs = append(ptrs, p)
			}
		})
	}
	for i, p := range ptrs {
		if err := tr.Deallocate(p, 512+i/2, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.stacks.n.Load(); n < records {
		t.Fatalf("%d stack records, want at least %d (are goroutine labels read?)", n, records)
	}
	for i := range tr.allocs {
		if n := len(tr.allocs[i].n); n > allocCountsMax {
			t.Errorf("shard %d counts %d records, want at most %d", i, n, allocCountsMax)
		}
	}
	seen := make(map[string]bool)
	for _, smp := range tr.Profile().Sample {
		v := smp.Label["req"]
		if len(v) != 1 {
			continue
		}
		i, err := strconv.Atoi(v[0])
		if err != nil {
			t.Fatal(err)
		}
		seen[v[0]] = true
		if ao, ab, io, ib := smp.Value[0], smp.Value[1], smp.Value[2], smp.Value[3]; ao != 2 || ab != int64(2*(512+i)) || io != 0 || ib != 0 {
			t.Errorf("req=%d: alloc %d objects %d bytes, in use %d objects %d bytes; want 2, %d, 0, 0", i, ao, ab, io, ib, 2*(512+i))
		}
	}
	if len(seen) != records {
		t.Errorf("profile has %d label sets, want %d", len(seen), records)
	}
}
