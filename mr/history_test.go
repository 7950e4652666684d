package mr_test

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// historyAlloc allocates through h from one call site, so that tests can
// look for it in the recorded stacks.
//
//go:noinline
func historyAlloc(t *testing.T, h mr.Resource, size int, s gpu.Stream) gpu.DevicePtr {
	t.Helper()
	p, err := h.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stackHas(pcs []uintptr, fn string) bool {
	var frames []string
	for _, f := range (mr.Allocation{Stack: pcs}).Frames() {
		frames = append(frames, f.Function)
	}
	return strings.Contains(strings.Join(frames, " "), fn)
}

// TestHistoryEvents: allocations, frees (requested and completed) and
// refusals are recorded in order with their stacks and times; the ring
// keeps the last Capacity events.
func TestHistoryEvents(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 64 << 20})[0]
	s := newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{MaxSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_700_000_000, 0)
	h := mr.NewHistory(pool, mr.HistoryOptions{Capacity: 4, Now: func() time.Time {
		clock = clock.Add(time.Millisecond)
		return clock
	}})
	p := historyAlloc(t, h, 1000, s)
	if err := h.Deallocate(p, 1000, s); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Allocate(40<<20, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("over MaxSize: %v", err)
	}
	// Bad frees record nothing.
	if err := h.Deallocate(p, 1000, s); !errors.Is(err, mr.ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	evs := h.Events()
	want := []mr.HistoryAction{mr.HistoryAlloc, mr.HistoryFreeRequested, mr.HistoryFreeCompleted, mr.HistoryOOM}
	if len(evs) != len(want) {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	for i, e := range evs {
		if e.Action != want[i] || e.Stream != s.ID() || !e.Time.Equal(time.Unix(1_700_000_000, 0).Add(time.Duration(i+1)*time.Millisecond)) {
			t.Errorf("event %d: %v on stream %d at %v", i, e.Action, e.Stream, e.Time)
		}
		if !stackHas(e.Stack, "mr_test.historyAlloc") && e.Action != mr.HistoryOOM {
			t.Errorf("event %d: stack lacks the allocating function", i)
		}
	}
	if evs[0].Addr != p || evs[0].Size != 1000 || evs[2].Addr != p || evs[3].Size != 40<<20 || evs[3].Addr != 0 ||
		evs[3].DeviceFree == 0 {
		t.Errorf("events %+v", evs)
	}

	// A fifth and sixth event push the first two out.
	q := historyAlloc(t, h, 2000, s)
	if err := h.Deallocate(q, 2000, s); err != nil {
		t.Fatal(err)
	}
	evs = h.Events()
	if st := h.Stats(); st != (mr.HistoryStats{Recorded: 7, Kept: 4, Capacity: 4}) {
		t.Errorf("stats %+v", st)
	}
	if len(evs) != 4 || evs[0].Action != mr.HistoryOOM || evs[1].Action != mr.HistoryAlloc || evs[1].Addr != q ||
		evs[3].Action != mr.HistoryFreeCompleted {
		t.Errorf("ring after overflow: %+v", evs)
	}
	h.Clear()
	if len(h.Events()) != 0 || h.Stats().Recorded != 7 {
		t.Errorf("after Clear: %d events, %+v", len(h.Events()), h.Stats())
	}
	if got := fmt.Sprint(h); got != "history: 7 events recorded, 0 kept (ring of 4)" {
		t.Errorf("%%v = %q", got)
	}
}

// TestHistorySnapshot: the segments are the pool's chunks with their
// blocks' states, live blocks with the stacks that allocated them; over a
// resource without chunks, one segment per live allocation.
func TestHistorySnapshot(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	a, b := newStream(t, dev), newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := mr.NewHistory(pool, mr.HistoryOptions{})
	p1 := historyAlloc(t, h, 1<<20, a)
	p2 := historyAlloc(t, h, 2<<20, a)
	if err := h.Deallocate(p2, 2<<20, b); err != nil { // pending in a's chunk
		t.Fatal(err)
	}
	ms := h.Snapshot()
	if ms.Device != 0 || len(ms.Segments) != 1 || len(ms.Events) != 4 {
		t.Fatalf("snapshot: %d segments, %d events", len(ms.Segments), len(ms.Events))
	}
	seg := ms.Segments[0]
	if seg.Size != 8<<20 || seg.Stream != a.ID() || seg.Small || len(seg.Blocks) != 3 {
		t.Fatalf("segment %+v", seg)
	}
	live, pending, free := seg.Blocks[0], seg.Blocks[1], seg.Blocks[2]
	if live.Address != p1 || live.State != mr.BlockLive || live.Requested != 1<<20 || !stackHas(live.Stack, "mr_test.historyAlloc") {
		t.Errorf("live block %+v", live)
	}
	if pending.Address != p2 || pending.State != mr.BlockPending || pending.Size != 2<<20 {
		t.Errorf("pending block %+v", pending)
	}
	if free.State != mr.BlockFree || free.Size != 5<<20 {
		t.Errorf("free block %+v", free)
	}
	if err := h.Deallocate(p1, 1<<20, a); err != nil {
		t.Fatal(err)
	}

	// No pool: each live allocation is a segment.
	d := mr.NewHistory(mr.NewDirect(dev), mr.HistoryOptions{})
	q := historyAlloc(t, d, 1000, b)
	ms = d.Snapshot()
	if len(ms.Segments) != 1 || ms.Segments[0].Address != q || ms.Segments[0].Size != 1024 || ms.Segments[0].Stream != b.ID() ||
		ms.Segments[0].Blocks[0].Requested != 1000 || ms.Segments[0].Blocks[0].State != mr.BlockLive {
		t.Errorf("segments over direct: %+v", ms.Segments)
	}
	if err := d.Deallocate(q, 1000, b); err != nil {
		t.Fatal(err)
	}
}

// TestHistorySnapshotPython: Python's pickle module loads the snapshot
// into the structure memory_viz reads (checked by the same arithmetic
// memory_viz's segsum asserts), with Go frames.
func TestHistorySnapshotPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dev := simDevices(t, sim.Config{})[0]
	s := newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := mr.NewHistory(pool, mr.HistoryOptions{})
	p := historyAlloc(t, h, 3000, s)
	q := historyAlloc(t, h, 1<<20, s)
	if err := h.Deallocate(q, 1<<20, s); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := h.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	script := `import pickle, sys
d = pickle.load(sys.stdin.buffer)
assert set(d) == {"segments", "device_traces", "allocator_settings"}, d.keys()
for seg in d["segments"]:
    total = sum(b["size"] for b in seg["blocks"])
    assert total == seg["total_size"], (total, seg["total_size"])
    assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    off = seg["address"]
    for b in seg["blocks"]:
        assert b["address"] == off
        off += b["size"]
tr = d["device_traces"][0]
print(len(d["segments"]), [e["action"] for e in tr], tr[0]["size"], tr[0]["frames"][0]["name"],
      tr[0]["frames"][0]["filename"].endswith("history_test.go"), type(tr[0]["time_us"]).__name__)
`
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	want := "2 ['alloc', 'alloc', 'free_requested', 'free_completed'] 3000 " + // a small chunk and a large one
		"github.com/streamalloc/streamalloc/mr_test.historyAlloc True int"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("python read\n%s\nwant\n%s", got, want)
	}
	if err := h.Deallocate(p, 3000, s); err != nil {
		t.Fatal(err)
	}
}
