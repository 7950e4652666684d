package mr

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// manyStreams allocates size bytes from r on each of n new streams,
// reading r's Usage after every call as a replay does, then frees each
// and releases r. It returns the streams, still alive.
func manyStreams(t *testing.T, dev gpu.Device, r Resource, n, size int) []gpu.Stream {
	t.Helper()
	ss := make([]gpu.Stream, n)
	ps := make([]gpu.DevicePtr, n)
	for i := range ss {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
		if ps[i], err = r.Allocate(size, s); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if u := r.(UsageReporter).Usage(); u.Used != uint64((i+1)*size) {
			t.Fatalf("after %d allocations: used %d", i+1, u.Used)
		}
	}
	for i, s := range ss {
		if err := r.Deallocate(ps[i], size, s); err != nil {
			t.Fatal(err)
		}
		if u := r.(UsageReporter).Usage(); u.Used != uint64((n-i-1)*size) {
			t.Fatalf("after %d frees: used %d", i+1, u.Used)
		}
	}
	if rel, ok := r.(Releaser); ok {
		if err := rel.Release(); err != nil {
			t.Fatal(err)
		}
	}
	return ss
}

// Many streams cost each resource O(1) per stream, amortized, and the
// Pool forgets a stream's state once it holds nothing: 10,000 or 20,000
// streams, one allocation each and Usage read after every call, take about
// a second each under -race (quadratic before: the stream table copied
// itself, Usage summed every stream, steal and release scanned every
// stream, the span index copied itself, the arena scavenged every arena,
// FixedSize searched every stream for a block to steal, and the
// simulator's cuMemFree visited every stream). Async, Binning and
// FixedSize have a tighter bound: on the simulator their cost was its
// happens-before model's, whose clocks grew with every stream seen (a
// release ordered after every stream that freed blocks, a driver-pool
// block coalescing the frees of every stream), and took 10 to 18 s here
// under -race; the bound fails that and leaves room for a busy machine.
func TestManyStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		bound time.Duration
		make  func(gpu.Device) Resource
	}{
		{"pool", 10_000, 20 * time.Second, func(dev gpu.Device) Resource { p, _ := NewPool(NewDirect(dev), PoolOptions{}); return p }},
		{"arena", 10_000, 20 * time.Second, func(dev gpu.Device) Resource {
			a, _ := NewArena(NewDirect(dev), ArenaOptions{SuperblockSize: 1 << 20})
			return a
		}},
		{"fixedsize", 10_000, 8 * time.Second, func(dev gpu.Device) Resource {
			f, _ := NewFixedSize(NewDirect(dev), FixedSizeOptions{BlockSize: 4096, BlocksPerChunk: 4})
			return f
		}},
		{"direct", 10_000, 20 * time.Second, func(dev gpu.Device) Resource { return NewDirect(dev) }},
		{"async", 20_000, 8 * time.Second, func(dev gpu.Device) Resource { a, _ := NewAsync(dev, AsyncOptions{OwnPool: true}); return a }},
		{"binning", 20_000, 8 * time.Second, func(dev gpu.Device) Resource { b, _ := NewBinning(NewDirect(dev), BinningOptions{}); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			r := tc.make(dev)
			start := time.Now()
			n := tc.n
			ss := manyStreams(t, dev, r, n, 4096)
			if d := time.Since(start); d > tc.bound {
				t.Errorf("%d streams took %v", n, d)
			}
			if u := r.(UsageReporter).Usage(); u.Used != 0 || u.Reserved != 0 {
				t.Errorf("after release: %+v", u)
			}
			if p, ok := r.(*Pool); ok {
				if k := p.streams.len(); k != 0 {
					t.Errorf("the pool keeps %d stream states after Release", k)
				}
				if st := p.Stats(); st.Allocations != uint64(n) || st.Frees != uint64(n) {
					t.Errorf("stats after forgetting the streams: %+v", st)
				}
			}
			for _, s := range ss {
				s.Destroy()
			}
		})
	}
}

// The state a Pool keeps for a stream that has used it is small: its
// struct, the rows of its two free-block indexes that it filed blocks in
// (not all 80 of them, 10 KiB each index), and its first, small batch of
// block descriptors.
func TestPoolStreamStateSize(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPool(NewDirect(dev), PoolOptions{})
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{4096, 1 << 20, 300 << 10} {
		q, err := p.Allocate(n, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Deallocate(q, n, s); err != nil {
			t.Fatal(err)
		}
	}
	st := p.streams.lookup(s.ID())
	size := int(unsafe.Sizeof(*st))
	rows := 0
	for _, x := range []*tlsf{&st.small, &st.large} {
		for _, lv := range x.lv {
			r := lv.row
			if r != nil {
				rows++
				size += int(unsafe.Sizeof(*r))
			}
		}
	}
	size += st.spareBatch * int(unsafe.Sizeof(poolBlock{}))
	if rows > 4 || size > 4<<10 {
		t.Errorf("a stream's state: %d bytes with %d index rows", size, rows)
	}
	t.Logf("a stream's state: %d bytes with %d index rows", size, rows)
}

// poolOverAsync is a Pool over Async on a simulated device of capacity
// bytes, the stack the many-streams tests below load.
func poolOverAsync(t *testing.T, capacity uint64) (gpu.Device, *Async, *Pool) {
	t.Helper()
	dev, err := sim.New(sim.Config{Capacity: capacity}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAsync(dev, AsyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(a, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dev, a, p
}

// allocFreeOnNewStreams makes n streams on dev and allocates and frees
// 4 KiB from p once on each, in that order; the streams stay alive.
func allocFreeOnNewStreams(t *testing.T, dev gpu.Device, p *Pool, n int) []gpu.Stream {
	t.Helper()
	ss := make([]gpu.Stream, n)
	for i := range ss {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
		q, err := p.Allocate(4096, s)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if err := p.Deallocate(q, 4096, s); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	return ss
}

// releaseEmpty releases p, which holds no live block, and checks that
// neither p nor its upstream a holds anything after.
func releaseEmpty(t *testing.T, p *Pool, a *Async) {
	t.Helper()
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	checkReleased(t, p, a)
}

// checkReleased checks that p reserves nothing and its upstream a has
// nothing in use.
func checkReleased(t *testing.T, p *Pool, a *Async) {
	t.Helper()
	if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
		t.Errorf("after release: %+v", u)
	}
	if u := a.Usage(); u.Used != 0 {
		t.Errorf("the upstream after release: %+v", u)
	}
}

// Streams that each allocate and free once cost a Pool O(1) amortized:
// every one keeps its working chunk, idle, and the slow path of each new
// stream used to visit and sort all of them (steal and releaseIdle, which
// never take another stream's working chunk unless memory is short), so
// 5,000, 10,000 and 20,000 streams took 6, 30 and 194 s over Async on the
// simulator. 100,000 streams (20,000 under -race) now take about a second,
// within a few KiB of host memory each, and the pool's accounting is exact
// at the end. The device is large enough for a 2 MiB chunk per stream:
// past its capacity, every refused growth costs the simulator's driver
// pool O(its segments), which is the simulator's cost, not the pool's.
func TestPoolChurnManyStreams(t *testing.T) {
	n, bound := 100_000, 10*time.Second
	if raceEnabled {
		n = 20_000
	}
	dev, a, p := poolOverAsync(t, 256<<30)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	ss := allocFreeOnNewStreams(t, dev, p, n)
	d := time.Since(start)
	if d > bound {
		t.Errorf("%d streams took %v, bound %v", n, d, bound)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	perStream := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(n)
	if perStream > 16<<10 {
		t.Errorf("%d streams hold %d bytes of Go heap each", n, perStream)
	}
	t.Logf("%d streams: %v, %d bytes of heap each", n, d, perStream)
	u := p.Usage()
	if u.Used != 0 || u.PeakUsed != 4096 {
		t.Errorf("usage after every free: %+v", u)
	}
	if st := p.Stats(); st.Allocations != uint64(n) || st.Frees != uint64(n) {
		t.Errorf("stats: %+v", st)
	}
	releaseEmpty(t, p, a)
	for _, s := range ss {
		s.Destroy()
	}
}

// Past the device's capacity, streams that each allocate and free once
// cost a Pool over Async O(1) amortized too, and so does synchronizing
// each of them after Release, as a replay does at its end. A 2 GiB device
// holds 1,024 of the pool's 2 MiB chunks, so every later stream's growth
// is refused and its chunk stolen from another stream; each refusal made
// the simulator's driver pool reserve a new device-sized heap, index it
// granule by granule, fail to map it and drop it, and each
// synchronization asked about every stream that had freed into the
// driver pool's coalesced blocks (20,000 streams: about a second, 18 s
// before on a 2-core machine). The pool's accounting and the driver
// pool's are exact at the end.
func TestPoolManyStreamsFullDevice(t *testing.T) {
	n, bound := 20_000, 8*time.Second
	if raceEnabled {
		n = 5_000
	}
	dev, a, p := poolOverAsync(t, 2<<30)
	start := time.Now()
	ss := allocFreeOnNewStreams(t, dev, p, n)
	if u := p.Usage(); u.Used != 0 || u.PeakUsed != 4096 || u.PeakReserved > 2<<30 {
		t.Errorf("usage after every free: %+v", u)
	}
	if st := p.Stats(); st.Allocations != uint64(n) || st.Frees != uint64(n) {
		t.Errorf("stats: %+v", st)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > bound {
		t.Errorf("%d streams took %v, bound %v", n, d, bound)
	}
	checkReleased(t, p, a)
	pool, err := dev.DefaultMemPool()
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []gpu.PoolAttr{gpu.PoolUsedMemCurrent, gpu.PoolReservedMemCurrent} {
		if v, err := pool.Attribute(at); err != nil || v != 0 {
			t.Errorf("driver pool attribute %v after every stream synchronized: %d, %v", at, v, err)
		}
	}
	for _, s := range ss {
		s.Destroy()
	}
}

// A pool of many streams at a full device refuses request after request,
// each refusal at a cost that does not grow with the streams: its error
// names the largest free block, which used to be found by visiting every
// stream's blocks (20,000 streams, each keeping a 4 KiB block live in its
// own 2 MiB chunk on a 1 GiB device: 19,488 refusals, 10.6 s before on
// a 2-core machine, 0.4 s now). Every
// refusal is an ErrOutOfMemory whose LargestFree is the Layout's, checked
// on a sample of them.
func TestPoolManyStreamsRefused(t *testing.T) {
	n, bound := 20_000, 8*time.Second
	if raceEnabled {
		n = 4_000
	}
	dev, _, p := poolOverAsync(t, 1<<30)
	start := time.Now()
	ss := make([]gpu.Stream, n)
	type held struct {
		ptr gpu.DevicePtr
		s   gpu.Stream
	}
	var live []held
	refused := 0
	for i := range ss {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
		q, err := p.Allocate(4096, s)
		if err == nil {
			live = append(live, held{q, s})
			continue
		}
		refused++
		var oom *OutOfMemoryError
		if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("stream %d: %v", i, err)
		}
		if refused%2000 == 1 {
			if want := p.Layout().LargestFree; oom.LargestFree != want {
				t.Errorf("refusal %d: largest free %d, the layout's %d", refused, oom.LargestFree, want)
			}
		}
	}
	if d := time.Since(start); d > bound {
		t.Errorf("%d streams took %v, bound %v", n, d, bound)
	}
	if want := n - (1<<30)/(2<<20); refused < want-64 || refused > want {
		t.Errorf("%d of %d requests refused, want about %d", refused, n, want)
	}
	for _, h := range live {
		if err := p.Deallocate(h.ptr, 4096, h.s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
		t.Errorf("after release: %+v", u)
	}
	for _, s := range ss {
		s.Destroy()
	}
}
