package torchsnap_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/trace/torchsnap"
)

// historyWorkload runs a seeded mix of allocations and frees on three
// streams (a quarter of the frees on another stream than the allocation's)
// through stats > history > pool > direct, leaves some blocks live, and
// returns the snapshot and the statistics.
func historyWorkload(t *testing.T, capacity int) (snap []byte, ms mr.MemorySnapshot, stats mr.StatsSnapshot, pool mr.Usage) {
	t.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	var streams []gpu.Stream
	for range 3 {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		streams = append(streams, s)
	}
	p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := mr.NewHistory(p, mr.HistoryOptions{Capacity: capacity})
	st := mr.NewStats(h, mr.StatsOptions{})
	type blk struct {
		p    gpu.DevicePtr
		size int
		s    gpu.Stream
	}
	var live []blk
	rng := rand.New(rand.NewPCG(17, 4))
	for range 3000 {
		if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 60) {
			i := rng.IntN(len(live))
			b := live[i]
			s := b.s
			if rng.IntN(4) == 0 {
				s = streams[rng.IntN(3)]
			}
			if err := st.Deallocate(b.p, b.size, s); err != nil {
				t.Fatal(err)
			}
			live = append(live[:i], live[i+1:]...)
			continue
		}
		size := 1 + rng.IntN(1<<(8+rng.IntN(16)))
		s := streams[rng.IntN(3)]
		ptr, err := st.Allocate(size, s)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, blk{ptr, size, s})
	}
	var buf bytes.Buffer
	if err := h.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	stats, pool, ms = st.Snapshot(), p.Usage(), h.Snapshot()
	for _, b := range live {
		if err := st.Deallocate(b.p, b.size, b.s); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), ms, stats, pool
}

// replayPool replays r against a fresh pool over direct.
func replayPool(t *testing.T, r trace.Reader) *replay.Result {
	t.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(context.Background(), r, dev, p, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestHistoryRoundTrip: a snapshot written by mr.History is read back by
// the snapshot reader and replays to the same peaks: the peak of live
// bytes the Stats adaptor saw, and the peak the pool reserved.
func TestHistoryRoundTrip(t *testing.T) {
	snap, _, stats, pool := historyWorkload(t, 0)
	// Through trace.Open's detection by content, as the command reads it.
	r, format, err := trace.NewReader(bytes.NewReader(snap), "history.pickle", nil)
	if err != nil {
		t.Fatal(err)
	}
	if format != trace.FormatSnapshot {
		t.Fatalf("detected as %v", format)
	}
	res := replayPool(t, r)
	if res.PeakLiveBytes != stats.Bytes.Peak {
		t.Errorf("replayed peak live %d, the program's %d", res.PeakLiveBytes, stats.Bytes.Peak)
	}
	if res.PeakReservedBytes != pool.PeakReserved {
		t.Errorf("replayed peak reserved %d, the program's pool %d", res.PeakReservedBytes, pool.PeakReserved)
	}
	if res.Allocations != int64(stats.Allocations.Total) || res.UnknownFrees != 0 || res.Failures != 0 ||
		res.FreedAtEnd != int64(stats.Allocations.Current) || res.Streams != 3 {
		t.Errorf("replay %+v; stats %v", res, stats)
	}
}

// TestHistoryRoundTripRing: with a ring smaller than the run, the reader
// places the blocks the lost events allocated as the snapshot's segments
// hold them: the replay ends with the blocks that were live, and the
// blocks freed on another stream and not yet reusable (pending, which the
// reader counts as in use, as memory_viz does) whose free left the ring.
func TestHistoryRoundTripRing(t *testing.T) {
	snap, ms, stats, _ := historyWorkload(t, 500)
	r, err := torchsnap.NewReader(bytes.NewReader(snap), "ring.pickle", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Preexisting == 0 {
		t.Fatal("no block placed from before the ring's window")
	}
	inRing := map[uint64]bool{}
	for _, e := range ms.Events {
		inRing[uint64(e.Addr)] = true
	}
	want := map[uint64]int64{}
	var wantLive int
	for _, seg := range ms.Segments {
		for _, b := range seg.Blocks {
			switch {
			case b.State == mr.BlockLive:
				want[uint64(b.Address)] = int64(b.Requested)
				wantLive++
			case b.State == mr.BlockPending && !inRing[uint64(b.Address)]:
				want[uint64(b.Address)] = int64(b.Size)
			}
		}
	}
	if wantLive != int(stats.Allocations.Current) {
		t.Fatalf("%d live blocks in the segments, %d live allocations", wantLive, stats.Allocations.Current)
	}
	live := map[uint64]int64{}
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Op {
		case trace.Alloc:
			live[e.Ptr] = e.Size
		case trace.Free:
			delete(live, e.Ptr)
		}
	}
	if len(live) != len(want) {
		t.Errorf("read back %d blocks live, want %d (%d live, the rest pending)", len(live), len(want), wantLive)
	}
	for p, n := range want {
		if live[p] != n {
			t.Errorf("block %#x: read back %d bytes, want %d", p, live[p], n)
		}
	}
}
