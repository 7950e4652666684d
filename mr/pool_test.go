package mr_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

func newPool(tb testing.TB, upstream mr.Resource, opts mr.PoolOptions) *mr.Pool {
	tb.Helper()
	p, err := mr.NewPool(upstream, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestPoolConformance(t *testing.T) {
	dev := testdev.Device(t)
	for _, tc := range []struct {
		name string
		up   func(gpu.Device) mr.Resource
		opts mr.PoolOptions
	}{
		{"direct", func(d gpu.Device) mr.Resource { return mr.NewDirect(d) }, mr.PoolOptions{}},
		{"direct/small-chunks-max", func(d gpu.Device) mr.Resource { return mr.NewDirect(d) }, mr.PoolOptions{ChunkSize: 4 << 20, MaxSize: 256 << 20}},
		{"direct/initial-threshold", func(d gpu.Device) mr.Resource { return mr.NewDirect(d) }, mr.PoolOptions{InitialSize: 64 << 20, ReleaseThreshold: 16 << 20}},
		{"direct/split-big", func(d gpu.Device) mr.Resource { return mr.NewDirect(d) }, mr.PoolOptions{SplitBig: true, ChunkSize: 4 << 20}},
		{"direct/split-giant", func(d gpu.Device) mr.Resource { return mr.NewDirect(d) }, mr.PoolOptions{SplitBig: true, SplitGiantAtMark: true, ChunkSize: 4 << 20}},
		{"async", func(d gpu.Device) mr.Resource {
			a, err := mr.NewAsync(d, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			return a
		}, mr.PoolOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
				return newPool(tb, tc.up(dev), tc.opts)
			}, dev, mrtest.Options{DetectsDoubleFree: true, Foreign: testdev.Foreign(t)})
		})
	}
}

// poolSimDevice is a fresh simulated device, for tests that use its hooks.
func poolSimDevice(t testing.TB) *sim.Device {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev.(*sim.Device)
}

func poolStream(t testing.TB, dev gpu.Device) gpu.Stream {
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

func poolAlloc(t testing.TB, r mr.Resource, n int, s gpu.Stream) gpu.DevicePtr {
	t.Helper()
	p, err := r.Allocate(n, s)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", n, err)
	}
	return p
}

func poolFree(t testing.TB, r mr.Resource, p gpu.DevicePtr, n int, s gpu.Stream) {
	t.Helper()
	if err := r.Deallocate(p, n, s); err != nil {
		t.Fatalf("Deallocate(%#x, %d): %v", uint64(p), n, err)
	}
}

// Memory written and freed on S1 and handed to S2 is written by S2 only
// after S1's write: the pool made S2 wait. Without the wait, the two
// kernels would write the same simulated bytes unordered, a data race
// under -race, and HappensBefore would be false.
func TestPoolCrossStreamReuseIsOrdered(t *testing.T) {
	dev := poolSimDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := poolStream(t, dev), poolStream(t, dev)
	for _, tc := range []struct {
		name   string
		freeOn gpu.Stream // where S1's block is freed
	}{
		{"freed-on-owner", s1},
		{"freed-on-taker", s2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One chunk is all the pool may hold, so S2 must take S1's
			// (which S1 just worked from, so it would grow otherwise).
			p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{MaxSize: mr.DefaultPoolChunkSize})
			const n = 1 << 20
			a := poolAlloc(t, p, n, s1)
			release := dev.Hold(s1) // S1's write runs late, after S2's
			defer release()
			if err := k.Fill(s1, a, n/4, 1); err != nil {
				t.Fatal(err)
			}
			wrote := dev.LastOp(s1)
			if tc.freeOn != s1 {
				// The caller orders the free after S1's use.
				e, _ := dev.NewEvent(false)
				e.Record(s1)
				tc.freeOn.WaitEvent(e)
				e.Destroy()
			}
			poolFree(t, p, a, n, tc.freeOn)
			b := poolAlloc(t, p, n, s2)
			if b != a {
				t.Fatalf("S2 got %#x, not the block S1 freed (%#x): the test does not exercise reuse", uint64(b), uint64(a))
			}
			if err := k.Fill(s2, b, n/4, 2); err != nil {
				t.Fatal(err)
			}
			if !dev.HappensBefore(wrote, dev.LastOp(s2)) {
				t.Errorf("S2's write of reused memory is not ordered after S1's write")
			}
			release()
			poolFree(t, p, b, n, s2)
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A block allocated on S1 and freed on S2 is reused by S1 only after an
// event wait: S1's next write is ordered after S2's last use.
func TestPoolForeignFreeAbsorbedWithWait(t *testing.T) {
	dev := poolSimDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := poolStream(t, dev), poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	const n = 8 << 20 // a big block: a chunk of its own
	a := poolAlloc(t, p, n, s1)
	e, _ := dev.NewEvent(false)
	defer e.Destroy()
	e.Record(s1)
	s2.WaitEvent(e)
	release := dev.Hold(s2)
	defer release()
	if err := k.Fill(s2, a, n/4, 1); err != nil {
		t.Fatal(err)
	}
	used := dev.LastOp(s2)
	poolFree(t, p, a, n, s2)
	b := poolAlloc(t, p, n, s1)
	if b != a {
		t.Fatalf("S1 got %#x, not its block freed on S2 (%#x)", uint64(b), uint64(a))
	}
	if err := k.Fill(s1, b, n/4, 2); err != nil {
		t.Fatal(err)
	}
	if !dev.HappensBefore(used, dev.LastOp(s1)) {
		t.Errorf("S1 reused memory that S2 freed without waiting for S2")
	}
	release()
	poolFree(t, p, b, n, s1)
	if u := p.Usage(); u.Used != 0 {
		t.Errorf("Used = %d after all frees", u.Used)
	}
}

// Release gives back a chunk whose blocks were freed on other streams
// only after those frees: the upstream (the driver's pool, which hands the
// memory to its next user in stream order) sees the free ordered after
// every use. A missing wait is a data race between S2's write and the
// next owner's.
func TestPoolReleaseOrdersUpstreamFree(t *testing.T) {
	// The device holds exactly the pool's one chunk, so that the driver's
	// pool can only serve S3 by reusing it (with an inserted wait on the
	// pool's free), not by growing.
	const n = 4 << 20
	gd, err := sim.New(sim.Config{Capacity: n}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	dev := gd.(*sim.Device)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	up, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	s1, s2, s3 := poolStream(t, dev), poolStream(t, dev), poolStream(t, dev)
	p := newPool(t, up, mr.PoolOptions{})
	a := poolAlloc(t, p, n, s1)
	e, _ := dev.NewEvent(false)
	defer e.Destroy()
	e.Record(s1)
	s2.WaitEvent(e)
	release := dev.Hold(s2)
	defer release()
	if err := k.Fill(s2, a, n/4, 1); err != nil {
		t.Fatal(err)
	}
	used := dev.LastOp(s2)
	poolFree(t, p, a, n, s2)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Reserved != 0 {
		t.Fatalf("Reserved = %d after Release", u.Reserved)
	}
	// The driver's pool hands the memory to S3 in stream order after the
	// pool's free, which must itself follow S2's write.
	b := poolAlloc(t, up, n, s3)
	if err := k.Fill(s3, b, n/4, 2); err != nil {
		t.Fatal(err)
	}
	if b != a {
		t.Fatalf("the driver's pool gave S3 %#x, not the chunk (%#x): the test does not exercise reuse", uint64(b), uint64(a))
	}
	if !dev.HappensBefore(used, dev.LastOp(s3)) {
		t.Errorf("the upstream reused the chunk before S2's last write")
	}
	release()
	poolFree(t, up, b, n, s3)
}

func TestPoolBadInputChangesNothing(t *testing.T) {
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	const n = 10000
	a := poolAlloc(t, p, n, s)
	b := poolAlloc(t, p, 300, s)
	poolFree(t, p, b, 300, s)
	before := p.Usage()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"negative size", p.Deallocate(a, -5, s), mr.ErrInvalidSize},
		{"wrong size", p.Deallocate(a, n+256, s), mr.ErrSizeMismatch},
		{"rounded size", p.Deallocate(a, mr.Alignment*40, s), mr.ErrSizeMismatch},
		{"inside a block", p.Deallocate(a+512, 256, s), mr.ErrUnknownPointer},
		{"below every chunk", p.Deallocate(256, 256, s), mr.ErrUnknownPointer},
		{"double free", p.Deallocate(b, 300, s), mr.ErrDoubleFree},
		{"null with a size", p.Deallocate(0, 8, s), mr.ErrSizeMismatch},
		{"nil stream", p.Deallocate(a, n, nil), gpu.ErrInvalidHandle},
		{"absurd size", func() error { _, err := p.Allocate(int(^uint(0)>>1), s); return err }(), mr.ErrOutOfMemory},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if after := p.Usage(); after != before {
		t.Errorf("bad calls changed usage: %+v -> %+v", before, after)
	}
	// A double free on another stream than the owner's is caught too.
	s2 := poolStream(t, dev)
	if err := p.Deallocate(b, 300, s2); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("double free on another stream: %v", err)
	}
	poolFree(t, p, a, n, s)
	if err := p.Deallocate(a, n, s2); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("double free of a block freed on its own stream, freed again on another: %v", err)
	}
}

func TestPoolOutOfMemory(t *testing.T) {
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	const max = 64 << 20
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{MaxSize: max, ChunkSize: 8 << 20})
	var held []gpu.DevicePtr
	for range 3 {
		held = append(held, poolAlloc(t, p, 16<<20, s))
	}
	before := p.Usage()
	_, err := p.Allocate(32<<20, s)
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("Allocate beyond MaxSize: %v", err)
	}
	if oom.Resource != "pool" || oom.Requested != 32<<20 || oom.Limit != max || oom.Used != 48<<20 || oom.Stream != s.ID() {
		t.Errorf("OutOfMemoryError = %+v", *oom)
	}
	if after := p.Usage(); after.Used != before.Used || after.Reserved > max {
		t.Errorf("usage %+v -> %+v", before, after)
	}
	// Freeing one block makes room: the idle chunk is reused or released.
	poolFree(t, p, held[0], 16<<20, s)
	c := poolAlloc(t, p, 16<<20, s)
	if u := p.Usage(); u.Reserved > max {
		t.Errorf("reserved %d above MaxSize %d", u.Reserved, max)
	}
	// Idle chunks of the wrong size are released before failing: free
	// everything, then ask for one block as large as MaxSize.
	poolFree(t, p, c, 16<<20, s)
	for _, h := range held[1:] {
		poolFree(t, p, h, 16<<20, s)
	}
	big := poolAlloc(t, p, max, s)
	poolFree(t, p, big, max, s)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("after Release: %+v", u)
	}
}

// The upstream's out of memory, not only MaxSize, is reported with the
// upstream error, after the pool released what it could.
func TestPoolUpstreamOutOfMemory(t *testing.T) {
	dev, err := sim.New(sim.Config{Capacity: 256 << 20}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	a := poolAlloc(t, p, 100<<20, s)
	b := poolAlloc(t, p, 100<<20, s)
	poolFree(t, p, a, 100<<20, s) // idle, but too small for the next request
	_, err = p.Allocate(200<<20, s)
	var oom *mr.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(oom.Err, gpu.ErrOutOfMemory) || oom.Requested != 200<<20 {
		t.Fatalf("Allocate(200 MiB) with 100 MiB idle and 100 MiB live of 256: %v", err)
	}
	if u := p.Usage(); u.Reserved != 100<<20 {
		t.Errorf("the idle chunk was not released before failing: reserved %d", u.Reserved)
	}
	// With b freed too, it fits after releasing both.
	poolFree(t, p, b, 100<<20, s)
	c := poolAlloc(t, p, 200<<20, s)
	poolFree(t, p, c, 200<<20, s)
}

func TestPoolGrowthAndThreshold(t *testing.T) {
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{InitialSize: 30 << 20, ReleaseThreshold: 40 << 20})
	a := poolAlloc(t, p, 1000, s)
	if u := p.Usage(); u.Reserved < 30<<20 {
		t.Errorf("InitialSize 30 MiB: reserved %d after the first request", u.Reserved)
	}
	// A mid-sized request fits in the initial chunk: no growth.
	b := poolAlloc(t, p, 2<<20, s)
	r0 := p.Usage().Reserved
	if r0 != 32<<20 { // 30 MiB initial + one 2 MiB small chunk
		t.Errorf("reserved %d, want 32 MiB", r0)
	}
	// Big blocks beyond the threshold are given back as they go idle.
	c := poolAlloc(t, p, 20<<20, s)
	d := poolAlloc(t, p, 20<<20, s)
	poolFree(t, p, c, 20<<20, s)
	poolFree(t, p, d, 20<<20, s)
	if u := p.Usage(); u.Reserved > 40<<20 {
		t.Errorf("ReleaseThreshold 40 MiB: %d reserved after frees left chunks idle", u.Reserved)
	}
	poolFree(t, p, a, 1000, s)
	poolFree(t, p, b, 2<<20, s)
	u := p.Usage()
	if u.PeakReserved < 72<<20 || u.PeakUsed != 1000+2<<20+40<<20 || u.Used != 0 {
		t.Errorf("usage %+v", u)
	}
	p.ResetPeaks()
	if u := p.Usage(); u.PeakReserved != u.Reserved || u.PeakUsed != 0 {
		t.Errorf("after ResetPeaks: %+v", u)
	}
	// A pair after the reset sets the new peak, though it leaves no
	// change of used bytes for the stream to add to the pool-wide total.
	e := poolAlloc(t, p, 4096, s)
	poolFree(t, p, e, 4096, s)
	if u := p.Usage(); u.PeakUsed != 4096 || u.Used != 0 {
		t.Errorf("pair after ResetPeaks: %+v, want PeakUsed 4096", u)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Reserved != 0 {
		t.Errorf("after Release: %+v", u)
	}
}

// TestPoolGrowthReleasesIdleWorkingChunks: before a growth that would
// raise the high-water mark, a pool of at most 64 streams gives back
// another stream's idle working chunk (the chunk it last allocated from,
// which steals leave alone), so that the peak holds what the streams use
// at once; a pool of more streams keeps it, as its walks skip streams
// whose only idle chunks are working ones, and so does a pool with
// MaxSize, which steals it when memory is short.
func TestPoolGrowthReleasesIdleWorkingChunks(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name     string
		others   int  // streams that used the pool before
		maxSize  int  // PoolOptions.MaxSize
		released bool // b's chunk is given back before a's growth
	}{
		{"2 streams", 0, 0, true},
		{"64 streams", 62, 0, true},
		{"65 streams", 63, 0, false},
		// Under MaxSize such a chunk is stolen when memory is short.
		{"MaxSize", 0, 1 << 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := testdev.Device(t)
			p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{MaxSize: tc.maxSize})
			for range tc.others {
				s := poolStream(t, dev)
				poolFree(t, p, poolAlloc(t, p, 4096, s), 4096, s)
			}
			a, b := poolStream(t, dev), poolStream(t, dev)
			poolFree(t, p, poolAlloc(t, p, 64*MiB, b), 64*MiB, b)
			before := p.Usage().Reserved
			x := poolAlloc(t, p, 64*MiB, a)
			held := false
			for _, c := range p.Layout().Chunks {
				held = held || c.Stream == b.ID() && c.Size == 64*MiB
			}
			u := p.Usage()
			if held == tc.released {
				t.Errorf("b's idle 64 MiB chunk held after a's growth: %v, want %v", held, !tc.released)
			}
			if tc.released && (u.Reserved != before || u.PeakReserved != before) {
				t.Errorf("reserved %d, peak %d after a's growth, want %d both (b's chunk given back first)", u.Reserved, u.PeakReserved, before)
			}
			if !tc.released && u.Reserved != before+64*MiB {
				t.Errorf("reserved %d after a's growth, want %d", u.Reserved, before+64*MiB)
			}
			poolFree(t, p, x, 64*MiB, a)
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
				t.Errorf("after Release: %+v", u)
			}
		})
	}
}

// Steps that repeat with two shapes whose big tensors are not within 1/8
// of each other (12 MiB and 9 MiB, alternating): the default pool gives
// back the chunks of one shape and grows chunks of the other at every
// step, to stay under its high-water mark; with SplitBig the 9 MiB steps
// are cut from the 12 MiB chunks, so the pool grows only in the first
// step, never gives a chunk back, and reserves the same peak.
func TestPoolSplitBig(t *testing.T) {
	const k, steps = 6, 8
	// run returns the growths of each step, the pool's counters and
	// usage at the end.
	run := func(t *testing.T, opts mr.PoolOptions) ([]uint64, mr.PoolStats, mr.Usage) {
		dev := testdev.Device(t)
		s := poolStream(t, dev)
		p := newPool(t, mr.NewDirect(dev), opts)
		var growths []uint64
		for step := range steps {
			size := 12 << 20
			if step%2 == 1 {
				size = 9 << 20
			}
			before := p.Stats().Growths
			var ptrs []gpu.DevicePtr
			for range k {
				ptrs = append(ptrs, poolAlloc(t, p, size, s))
			}
			for _, ptr := range ptrs {
				poolFree(t, p, ptr, size, s)
			}
			growths = append(growths, p.Stats().Growths-before)
		}
		return growths, p.Stats(), p.Usage()
	}
	t.Run("default", func(t *testing.T) {
		growths, st, u := run(t, mr.PoolOptions{})
		for step, g := range growths {
			if g < k-1 {
				t.Errorf("step %d grew %d chunks, want at least %d (growths %v)", step, g, k-1, growths)
			}
		}
		if st.Releases < k*(steps-2) || st.BigSplits != 0 {
			t.Errorf("stats %+v, want at least %d releases and no splits", st, k*(steps-2))
		}
		if u.PeakReserved != k*12<<20 {
			t.Errorf("peak reserved %d, want %d", u.PeakReserved, k*12<<20)
		}
	})
	t.Run("SplitBig", func(t *testing.T) {
		growths, st, u := run(t, mr.PoolOptions{SplitBig: true})
		if growths[0] != k || st.Growths != k || st.Releases != 0 || st.BigSplits != k*steps/2 {
			t.Errorf("growths %v, stats %+v; want %d growths in the first step only, no releases, %d splits",
				growths, st, k, k*steps/2)
		}
		if u.PeakReserved != k*12<<20 || u.Reserved != k*12<<20 {
			t.Errorf("usage %+v, want %d reserved at the peak and now", u, k*12<<20)
		}
	})
}

// With SplitBig a giant chunk (here 64 MiB of a 96 MiB high-water mark,
// at least 1/16 of it) is not cut for a transient request of less than
// half its size: the pool gives the idle giant chunk back and grows one of
// the transient's size, so the next giant request, arriving while the
// transient lives, raises the mark by one chunk of 8 MiB (to 104 MiB), not
// by a second giant one (to 160 MiB, had the transient been cut from the
// first). A request of at least half a giant chunk does split it.
func TestPoolSplitBigKeepsGiantChunks(t *testing.T) {
	const mib = 1 << 20
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{SplitBig: true})
	step := func(sizes ...int) []gpu.DevicePtr {
		var ptrs []gpu.DevicePtr
		for _, n := range sizes {
			ptrs = append(ptrs, poolAlloc(t, p, n, s))
		}
		return ptrs
	}
	free := func(ptrs []gpu.DevicePtr, sizes ...int) {
		for i, ptr := range ptrs {
			poolFree(t, p, ptr, sizes[i], s)
		}
	}
	warm := []int{8 * mib, 8 * mib, 8 * mib, 8 * mib, 64 * mib}
	free(step(warm...), warm...)
	if u := p.Usage(); u.PeakReserved != 96*mib {
		t.Fatalf("after the first step: %+v, want 96 MiB reserved", u)
	}
	second := []int{8 * mib, 8 * mib, 8 * mib, 8 * mib, 8 * mib, 64 * mib}
	free(step(second...), second...)
	st, u := p.Stats(), p.Usage()
	if u.PeakReserved != 104*mib || st.Growths != 7 || st.Releases != 1 || st.BigSplits != 0 {
		t.Errorf("after the second step: stats %+v, usage %+v; want 7 growths, 1 release, no split, 104 MiB at the peak", st, u)
	}
	half := step(40 * mib)
	if st2 := p.Stats(); st2.Growths != st.Growths || st2.BigSplits != 1 {
		t.Errorf("a request of 40 MiB: stats %+v, want it cut from a free 64 MiB chunk", st2)
	}
	free(half, 40*mib)
}

// A stream that is destroyed with idle memory in the pool: another stream
// can still take it when it needs it (after a device synchronization,
// since no event can be recorded on the destroyed stream), and Release
// frees it upstream.
func TestPoolDestroyedStream(t *testing.T) {
	dev := testdev.Device(t)
	s1, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s2 := poolStream(t, dev)
	// Room for S1's two chunks only: S2 has to take S1's.
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{MaxSize: 10 << 20})
	a := poolAlloc(t, p, 8<<20, s1)
	x := poolAlloc(t, p, 4096, s1)
	poolFree(t, p, a, 8<<20, s1)
	poolFree(t, p, x, 4096, s1)
	if err := s1.Destroy(); err != nil {
		t.Fatal(err)
	}
	b := poolAlloc(t, p, 8<<20, s2)
	if b != a {
		t.Errorf("S2 did not take the idle chunk of the destroyed stream")
	}
	poolFree(t, p, b, 8<<20, s2)
	if err := p.Release(); err != nil {
		t.Fatalf("Release with a chunk homed at a destroyed stream: %v", err)
	}
	if u := p.Usage(); u.Reserved != 0 {
		t.Errorf("after Release: %+v", u)
	}
}

// A program that destroys every stream before it releases the pool: the
// pool frees its chunks on a stream of its own, and nothing is left on
// the device.
func TestPoolReleaseAfterAllStreamsDestroyed(t *testing.T) {
	dev := testdev.Device(t)
	free0, _, err := dev.MemGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	for _, size := range []int{8 << 20, 4096} {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		a := poolAlloc(t, p, size, s)
		poolFree(t, p, a, size, s)
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if p.Usage().Reserved == 0 {
		t.Fatal("the pool holds nothing; the test would prove nothing")
	}
	if err := p.Release(); err != nil {
		t.Fatalf("Release after every stream was destroyed: %v", err)
	}
	if u := p.Usage(); u.Reserved != 0 {
		t.Errorf("after Release: %+v", u)
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if free, _, err := dev.MemGetInfo(); err != nil || free != free0 {
		t.Errorf("device free memory %d after Release, %d before the pool (%v)", free, free0, err)
	}
}

func TestPoolClose(t *testing.T) {
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	a := poolAlloc(t, p, 4096, s)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allocate(4096, s); !errors.Is(err, mr.ErrClosed) {
		t.Errorf("Allocate after Close: %v", err)
	}
	poolFree(t, p, a, 4096, s)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("after Close, free and Release: %+v", u)
	}
}

func TestNewPoolOptions(t *testing.T) {
	dev := testdev.Device(t)
	up := mr.NewDirect(dev)
	for _, tc := range []struct {
		opts mr.PoolOptions
		want error
	}{
		{mr.PoolOptions{MaxSize: -1}, mr.ErrInvalidSize},
		{mr.PoolOptions{InitialSize: 2 << 20, MaxSize: 1 << 20}, mr.ErrInvalidSize},
		{mr.PoolOptions{ChunkSize: 3 << 20}, nil},
		// Sizes the pool could not round up to 2 MiB in an int.
		{mr.PoolOptions{ChunkSize: math.MaxInt}, mr.ErrInvalidSize},
		{mr.PoolOptions{InitialSize: math.MaxInt - 1<<20}, mr.ErrInvalidSize},
		{mr.PoolOptions{InitialSize: math.MaxInt &^ (2<<20 - 1), MaxSize: math.MaxInt, ReleaseThreshold: math.MaxInt}, nil},
	} {
		_, err := mr.NewPool(up, tc.opts)
		if !errors.Is(err, tc.want) {
			t.Errorf("NewPool(%+v) = %v, want %v", tc.opts, err, tc.want)
		}
	}
	if _, err := mr.NewPool(nil, mr.PoolOptions{}); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("NewPool(nil) = %v", err)
	}
	p := newPool(t, up, mr.PoolOptions{ChunkSize: 3 << 20})
	if got := p.Options().ChunkSize; got != 4<<20 {
		t.Errorf("ChunkSize 3 MiB rounded to %d, want 4 MiB", got)
	}
}

// The hot path allocates nothing, on a stream the pool knows and with
// memory in its lists.
func TestPoolPairAllocatesNothing(t *testing.T) {
	dev := testdev.Device(t)
	s := poolStream(t, dev)
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{})
	for _, n := range []int{256, 4096, 1 << 20, 6 << 20} {
		poolFree(t, p, poolAlloc(t, p, n, s), n, s)
		allocs := testing.AllocsPerRun(1000, func() {
			q, err := p.Allocate(n, s)
			if err != nil {
				panic(err)
			}
			if err := p.Deallocate(q, n, s); err != nil {
				panic(err)
			}
		})
		if allocs != 0 {
			t.Errorf("pair of %d bytes: %v allocations", n, allocs)
		}
	}
}

// Goroutines sharing streams and freeing each other's blocks: the pool
// stays consistent (the -race run checks its locking) and gives back
// everything.
func TestPoolSharedStreamsStress(t *testing.T) {
	dev := testdev.Device(t)
	ss := []gpu.Stream{poolStream(t, dev), poolStream(t, dev), poolStream(t, dev)}
	p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{ChunkSize: 4 << 20})
	iters := 2000
	if testing.Short() {
		iters = 500
	}
	type blk struct {
		p gpu.DevicePtr
		n int
	}
	ch := make(chan blk, 64)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 6 {
		wg.Go(func() {
			for i := range iters {
				s := ss[(g+i)%len(ss)]
				n := 1 + (g*7919+i*104729)%(6<<20)
				if i%3 == 0 {
					n %= 4096
					n++
				}
				q, err := p.Allocate(n, s)
				if err != nil {
					errs <- fmt.Errorf("Allocate(%d): %w", n, err)
					return
				}
				select {
				case ch <- blk{q, n}:
				default:
					if err := p.Deallocate(q, n, s); err != nil {
						errs <- err
						return
					}
				}
				select {
				case b := <-ch:
					if err := p.Deallocate(b.p, b.n, ss[i%len(ss)]); err != nil {
						errs <- err
						return
					}
				default:
				}
				if i%500 == 0 {
					if err := p.Release(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(ch)
	for b := range ch {
		poolFree(t, p, b.p, b.n, ss[0])
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
		t.Errorf("after everything was freed and released: %+v", u)
	}
}
