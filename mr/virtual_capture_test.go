package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolOverVirtualCapture: a Pool over a Virtual serves a capturing
// stream from the capture's private memory (capture.go), never by growing
// the stream's growable chunk in place: mapping is not stream work, and
// Virtual refuses a capturing stream's Allocate, AllocateGrowable, Commit
// and Decommit (ErrStreamCapturing) without disturbing the capture. While
// the capture runs, the only new mapped memory is the graph pool's chunk,
// a Release of the pool leaves the capturing stream's free granules
// mapped (a decommit is enqueued on the chunk's home stream), and another
// stream grows its own chunk in place as usual. The graph's launches fill
// the captured block; after the capture's Release and the pool's, the
// Virtual maps nothing.
func TestPoolOverVirtualCapture(t *testing.T) {
	// A small device: the pool's growable ranges are as large as its
	// memory, and the simulator indexes them by granule.
	dev, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	ok(t, err)
	s, o := newTestStream(t, dev), newTestStream(t, dev)
	k, err := kernels.Load(dev)
	ok(t, err)
	v := newVirtual(t, dev, mr.VirtualOptions{})
	pool, err := mr.NewPool(v, mr.PoolOptions{})
	ok(t, err)
	g := v.GrowGranularity()
	big := 3*g + g/2
	const words = 1 << 14             // of the captured block that the graph fills
	pre, err := pool.Allocate(big, s) // s's growable chunk
	ok(t, err)
	spare, err := pool.Allocate(2*g, s)
	ok(t, err)
	ok(t, pool.Deallocate(spare, 2*g, s)) // free granules in s's chunk
	ok(t, s.Synchronize())
	before := v.Stats()

	c, err := mr.BeginCapture(s, gpu.CaptureRelaxed, mr.CaptureOptions{})
	ok(t, err)
	gp, err := v.AllocateGrowable(g, 4*g, o)
	ok(t, err)
	for _, r := range []struct {
		what string
		call func() error
	}{
		{"Allocate", func() error { _, err := v.Allocate(g, s); return err }},
		{"AllocateGrowable", func() error { _, err := v.AllocateGrowable(g, 4*g, s); return err }},
		{"Commit", func() error { return v.Commit(gp, g, g, s) }},
		{"Decommit", func() error { return v.Decommit(gp, 0, g, s) }},
		{"Deallocate", func() error { return v.Deallocate(gp, 4*g, s) }},
	} {
		if err := r.call(); !errors.Is(err, mr.ErrStreamCapturing) {
			t.Errorf("Virtual.%s on a capturing stream: %v, want ErrStreamCapturing", r.what, err)
		}
	}
	ok(t, v.Deallocate(gp, 4*g, o))
	ok(t, o.Synchronize())
	ok(t, v.Release())
	a, err := pool.Allocate(big, s)
	ok(t, err)
	small, err := pool.Allocate(4096, s)
	ok(t, err)
	ok(t, k.Fill(s, a, words, 7))
	ok(t, pool.Deallocate(small, 4096, s))
	ok(t, pool.Deallocate(pre, big, s)) // before the capture: kept for Release
	during := v.Stats()
	graphMem := uint64(c.Pool().Usage().Reserved)
	if graphMem == 0 || during.Mapped != before.Mapped+graphMem || during.Growable != before.Growable {
		t.Errorf("in the capture the Virtual maps %d bytes in %d growable ranges, before %d in %d, the graph pool %d: want only the graph pool's more",
			during.Mapped, during.Growable, before.Mapped, before.Growable, graphMem)
	}
	ok(t, pool.Release())
	if m := v.Stats().Mapped; m != during.Mapped {
		t.Errorf("a pool Release during the capture changed the mapped bytes from %d to %d: it decommitted on the capturing stream", during.Mapped, m)
	}
	if captureStatus(t, s) != gpu.CaptureActive {
		t.Fatal("the capture is no longer active")
	}
	b, err := pool.Allocate(big, o) // o grows its own chunk in place
	ok(t, err)
	if st := v.Stats(); st.Growable != during.Growable+1 {
		t.Errorf("another stream's growth during the capture: %d growable ranges, want %d", st.Growable, during.Growable+1)
	}

	graph, err := c.End()
	ok(t, err)
	x, err := graph.Instantiate(0)
	ok(t, err)
	ok(t, k.Fill(s, a, words, 0))
	for range 2 {
		ok(t, x.Launch(s))
	}
	cnt, err := dev.Malloc(4)
	ok(t, err)
	defer dev.Free(cnt)
	ok(t, dev.MemsetD8Async(cnt, 0, 4, s))
	ok(t, k.Check(s, a, words, 7, cnt))
	var n [4]byte
	ok(t, dev.CopyDtoHAsync(n[:], cnt, s))
	ok(t, s.Synchronize())
	if n != [4]byte{} {
		t.Errorf("the graph's block after its launches: %v mismatches (little-endian), want none", n)
	}
	ok(t, pool.Deallocate(a, big, s))
	ok(t, x.Destroy())
	ok(t, c.Release(s))
	ok(t, pool.Deallocate(b, big, o))
	ok(t, s.Synchronize())
	ok(t, o.Synchronize())
	// With the capture over, the same Release decommits s's free granules.
	mapped := v.Stats().Mapped
	ok(t, pool.Release())
	ok(t, v.ReleaseContext(t.Context()))
	if m := v.Stats().Mapped; m >= mapped {
		t.Errorf("a pool Release after the capture: %d bytes mapped, %d before; want fewer", m, mapped)
	}
	ok(t, pool.Close())
	ok(t, v.ReleaseContext(t.Context()))
	if st := v.Stats(); st.Mapped != 0 || st.Live != 0 {
		t.Errorf("after the capture's Release and the pool's Close: %d bytes mapped, %d live", st.Mapped, st.Live)
	}
}
