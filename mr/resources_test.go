package mr_test

// Table-driven tests that every resource of resources.go's family (direct,
// managed, async, fixedsize, binning, arena) must pass on the simulator:
// the contracts of resource.go, stream order across streams, concurrency,
// out of memory and release.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// resCase is one resource under test.
type resCase struct {
	name string
	// maxSize is the largest request the resource serves (0: any).
	maxSize int
	// blocking: Deallocate blocks until the stream's work is done.
	blocking bool
	make     func(t testing.TB, dev gpu.Device) mr.Resource
}

// resMust returns v, panicking (failing the test) on a setup error.
func resMust[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func resCases() []resCase {
	return []resCase{
		{name: "direct", blocking: true, make: func(t testing.TB, dev gpu.Device) mr.Resource { return mr.NewDirect(dev) }},
		{name: "managed", blocking: true, make: func(t testing.TB, dev gpu.Device) mr.Resource { return mr.NewManaged(dev) }},
		{name: "async", make: func(t testing.TB, dev gpu.Device) mr.Resource {
			return resMust(mr.NewAsync(dev, mr.AsyncOptions{}))
		}},
		{name: "async-own-pool", make: func(t testing.TB, dev gpu.Device) mr.Resource {
			r := resMust(mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 30}))
			t.Cleanup(func() { r.Close() })
			return r
		}},
		{name: "fixedsize", maxSize: 64 << 10, make: func(t testing.TB, dev gpu.Device) mr.Resource {
			return resMust(mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 64 << 10, BlocksPerChunk: 8}))
		}},
		{name: "binning", make: func(t testing.TB, dev gpu.Device) mr.Resource {
			up := resMust(mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true}))
			t.Cleanup(func() { up.Close() })
			return resMust(mr.NewBinning(up, mr.BinningOptions{MinSize: 256, MaxSize: 64 << 10, BlocksPerChunk: 8}))
		}},
		{name: "arena", make: func(t testing.TB, dev gpu.Device) mr.Resource {
			return resMust(mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 1 << 20}))
		}},
	}
}

// resDevice returns a fresh simulated device (a fresh backend, so tests do
// not share memory or pools).
func resDevice(t testing.TB, cfg sim.Config) *sim.Device {
	t.Helper()
	dev, err := sim.New(cfg).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev.(*sim.Device)
}

func resStream(t testing.TB, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

// resRead copies n bytes at p to the host, in order on s.
func resRead(t testing.TB, dev gpu.Device, s gpu.Stream, p gpu.DevicePtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := dev.CopyDtoHAsync(b, p, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return b
}

// resSizes caps sizes at c.maxSize.
func (c resCase) sizes(sizes ...int) []int {
	var out []int
	for _, n := range sizes {
		if c.maxSize == 0 || n <= c.maxSize {
			out = append(out, n)
		}
	}
	return out
}

func TestResourcesZeroSize(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			s := resStream(t, dev)
			p, err := r.Allocate(0, s)
			if p != 0 || err != nil {
				t.Fatalf("Allocate(0) = %#x, %v; want 0, nil", p, err)
			}
			if err := r.Deallocate(0, 0, s); err != nil {
				t.Fatalf("Deallocate(0, 0) = %v", err)
			}
			if u, ok := r.(mr.UsageReporter); ok {
				if got := u.Usage(); got != (mr.Usage{}) {
					t.Errorf("usage after zero-size pair = %+v, want zero", got)
				}
			}
		})
	}
}

// TestResourcesAlignment keeps allocations of awkward sizes live at once
// and checks alignment, that they do not overlap, and that each keeps its
// own bytes.
func TestResourcesAlignment(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			s := resStream(t, dev)
			sizes := c.sizes(1, 7, 255, 256, 257, 1000, 4096, 4097, 65535, 65536, 1<<20+3)
			ptrs := make([]gpu.DevicePtr, len(sizes))
			for i, n := range sizes {
				p, err := r.Allocate(n, s)
				if err != nil {
					t.Fatalf("Allocate(%d): %v", n, err)
				}
				if p == 0 || p%mr.Alignment != 0 {
					t.Fatalf("Allocate(%d) = %#x, not a %d-aligned non-null pointer", n, p, mr.Alignment)
				}
				ptrs[i] = p
				if err := dev.MemsetD8Async(p, byte(i+1), n, s); err != nil {
					t.Fatal(err)
				}
			}
			for i, n := range sizes {
				got := resRead(t, dev, s, ptrs[i], n)
				if want := bytes.Repeat([]byte{byte(i + 1)}, n); !bytes.Equal(got, want) {
					t.Fatalf("allocation %d (%d bytes at %#x) was overwritten", i, n, ptrs[i])
				}
			}
			for i, n := range sizes {
				if err := r.Deallocate(ptrs[i], n, s); err != nil {
					t.Fatalf("Deallocate(%#x, %d): %v", ptrs[i], n, err)
				}
			}
		})
	}
}

// TestResourcesBadInput checks every bad call returns its typed error and
// changes nothing.
func TestResourcesBadInput(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			b := sim.New(sim.Config{Devices: 2})
			dev, _ := b.Device(0)
			other, _ := b.Device(1)
			r := c.make(t, dev)
			s := resStream(t, dev)
			so := resStream(t, other)
			const n = 1000
			p, err := r.Allocate(n, s)
			if err != nil {
				t.Fatal(err)
			}
			freed, err := r.Allocate(n, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Deallocate(freed, n, s); err != nil {
				t.Fatal(err)
			}
			big := 5000
			if c.maxSize != 0 {
				big = c.maxSize + 1
			}
			usage := func() mr.Usage {
				if u, ok := r.(mr.UsageReporter); ok {
					return u.Usage()
				}
				return mr.Usage{}
			}
			before := usage()
			for _, bad := range []struct {
				name string
				call func() error
				want error
			}{
				{"allocate nil stream", func() error { _, err := r.Allocate(n, nil); return err }, gpu.ErrInvalidHandle},
				{"allocate other device's stream", func() error { _, err := r.Allocate(n, so); return err }, gpu.ErrWrongDevice},
				{"allocate negative", func() error { _, err := r.Allocate(-1, s); return err }, mr.ErrInvalidSize},
				{"free nil stream", func() error { return r.Deallocate(p, n, nil) }, gpu.ErrInvalidHandle},
				{"free other device's stream", func() error { return r.Deallocate(p, n, so) }, gpu.ErrWrongDevice},
				{"free negative size", func() error { return r.Deallocate(p, -1, s) }, mr.ErrInvalidSize},
				{"free interior pointer", func() error { return r.Deallocate(p+mr.Alignment, n, s) }, mr.ErrUnknownPointer},
				{"free foreign pointer", func() error { return r.Deallocate(0x7ead0000, n, s) }, mr.ErrUnknownPointer},
				{"double free", func() error { return r.Deallocate(freed, n, s) }, mr.ErrDoubleFree},
				{"free size+1", func() error { return r.Deallocate(p, n+1, s) }, mr.ErrSizeMismatch},
				{"free size-1", func() error { return r.Deallocate(p, n-1, s) }, mr.ErrSizeMismatch},
				{"free with other class size", func() error { return r.Deallocate(p, min(big, 5000), s) }, mr.ErrSizeMismatch},
				{"free null as non-zero", func() error { return r.Deallocate(0, n, s) }, mr.ErrSizeMismatch},
			} {
				err := bad.call()
				if !errors.Is(err, bad.want) {
					t.Errorf("%s: err = %v, want %v", bad.name, err, bad.want)
				}
				if got := usage(); got != before {
					t.Errorf("%s changed usage: %+v -> %+v", bad.name, before, got)
				}
			}
			if c.maxSize != 0 {
				var oe *mr.OutOfMemoryError
				if _, err := r.Allocate(c.maxSize+1, s); !errors.As(err, &oe) || oe.Limit != uint64(c.maxSize) {
					t.Errorf("allocate above max size: err = %v, want an *OutOfMemoryError with the limit", err)
				}
			}
			// Nothing changed: p is still live and frees cleanly, once.
			if err := r.Deallocate(p, n, s); err != nil {
				t.Fatalf("good free after bad ones: %v", err)
			}
			if err := r.Deallocate(p, n, s); !errors.Is(err, mr.ErrDoubleFree) {
				t.Errorf("second free: %v, want ErrDoubleFree", err)
			}
		})
	}
}

// TestResourcesCrossStream allocates on s1, writes there while s1 is held
// by a long kernel, frees on s2 and reuses on s2. The resource must order
// s2's reuse after s1's write: otherwise s2's write runs first (a data
// race under -race) and is then overwritten.
func TestResourcesCrossStream(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			s1, s2 := resStream(t, dev), resStream(t, dev)
			for _, n := range c.sizes(256, 3000, 64<<10, 1<<20) {
				p, err := r.Allocate(n, s1)
				if err != nil {
					t.Fatal(err)
				}
				release := dev.Hold(s1)
				if err := dev.MemsetD8Async(p, 0xAA, n, s1); err != nil {
					t.Fatal(err)
				}
				first := dev.LastOp(s1)
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(10 * time.Millisecond)
					release()
				}()
				if err := r.Deallocate(p, n, s2); err != nil {
					t.Fatal(err)
				}
				q, err := r.Allocate(n, s2)
				if err != nil {
					t.Fatal(err)
				}
				if err := dev.MemsetD8Async(q, 0xBB, n, s2); err != nil {
					t.Fatal(err)
				}
				second := dev.LastOp(s2)
				<-done
				if err := s1.Synchronize(); err != nil {
					t.Fatal(err)
				}
				if q < p+gpu.DevicePtr(n) && p < q+gpu.DevicePtr(n) && !dev.HappensBefore(first, second) {
					t.Errorf("size %d: reused %#x on s2 without ordering after s1's write", n, q)
				}
				if got := resRead(t, dev, s2, q, n); !bytes.Equal(got, bytes.Repeat([]byte{0xBB}, n)) {
					t.Errorf("size %d: reused memory corrupted by s1's write", n)
				}
				if err := r.Deallocate(q, n, s2); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestResourcesConcurrent runs goroutines, each on its own stream, doing
// random allocations and frees, some frees on a neighbour's stream, with
// every block's contents checked before its free.
func TestResourcesConcurrent(t *testing.T) {
	const workers = 8
	ops := 150
	if testing.Short() {
		ops = 50
	}
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			streams := make([]gpu.Stream, workers)
			for i := range streams {
				streams[i] = resStream(t, dev)
			}
			maxSize := 600 << 10 // above the arena's LargeSize
			if c.maxSize != 0 {
				maxSize = c.maxSize
			}
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- resWorker(dev, r, streams[w], streams[(w+1)%workers], uint64(w), ops, maxSize)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			for _, s := range streams {
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
			}
			if u, ok := r.(mr.UsageReporter); ok {
				if got := u.Usage().Used; got != 0 {
					t.Errorf("Used = %d after everything was freed", got)
				}
			}
		})
	}
}

type resLive struct {
	p    gpu.DevicePtr
	n    int
	fill byte
}

func resWorker(dev gpu.Device, r mr.Resource, s, neighbour gpu.Stream, seed uint64, ops, maxSize int) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	var live []resLive
	free := func(i int) error {
		b := live[i]
		got := make([]byte, b.n)
		if err := dev.CopyDtoHAsync(got, b.p, s); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		for j, v := range got {
			if v != b.fill {
				return fmt.Errorf("stream %d: block %#x+%d: byte %d is %#x, want %#x", s.ID(), b.p, b.n, j, v, b.fill)
			}
		}
		fs := s
		if rng.IntN(4) == 0 {
			fs = neighbour
		}
		if err := r.Deallocate(b.p, b.n, fs); err != nil {
			return err
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
		return nil
	}
	for range ops {
		if len(live) > 0 && (len(live) > 16 || rng.IntN(2) == 0) {
			if err := free(rng.IntN(len(live))); err != nil {
				return err
			}
			continue
		}
		// Mostly small blocks, now and then a large one.
		n := 1 + rng.IntN(min(maxSize, 16<<10))
		if rng.IntN(10) == 0 {
			n = 1 + rng.IntN(maxSize)
		}
		p, err := r.Allocate(n, s)
		if err != nil {
			return err
		}
		fill := byte(rng.Uint32())
		if err := dev.MemsetD8Async(p, fill, n, s); err != nil {
			return err
		}
		live = append(live, resLive{p, n, fill})
	}
	for len(live) > 0 {
		if err := free(0); err != nil {
			return err
		}
	}
	return nil
}

// TestResourcesOutOfMemory fills a small device until the resource
// refuses, checks the error, and checks the resource still works, then
// that everything can be freed and released.
func TestResourcesOutOfMemory(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{Capacity: 64 << 20})
			r := c.make(t, dev)
			s := resStream(t, dev)
			n := 4 << 20
			if c.maxSize != 0 {
				n = c.maxSize
			}
			// One request far beyond the device.
			if _, err := r.Allocate(1<<40, s); !errors.Is(err, mr.ErrOutOfMemory) {
				t.Fatalf("Allocate(1 TiB): %v, want ErrOutOfMemory", err)
			}
			var live []gpu.DevicePtr
			var oom error
			for range 10000 {
				p, err := r.Allocate(n, s)
				if err != nil {
					oom = err
					break
				}
				live = append(live, p)
			}
			var oe *mr.OutOfMemoryError
			if !errors.Is(oom, mr.ErrOutOfMemory) || !errors.As(oom, &oe) {
				t.Fatalf("filling the device: %v, want an *OutOfMemoryError", oom)
			}
			if oe.Requested != n || oe.Stream != s.ID() {
				t.Errorf("OutOfMemoryError = %+v, want Requested %d on stream %d", oe, n, s.ID())
			}
			if len(live) == 0 {
				t.Fatal("nothing could be allocated")
			}
			// Free one: the next request succeeds.
			if err := r.Deallocate(live[len(live)-1], n, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			p, err := r.Allocate(n, s)
			if err != nil {
				t.Fatalf("allocate after a free: %v", err)
			}
			live[len(live)-1] = p
			for _, p := range live {
				if err := r.Deallocate(p, n, s); err != nil {
					t.Fatal(err)
				}
			}
			resReleaseAll(t, dev, r, s)
		})
	}
}

// resReleaseAll releases r (after its streams are idle) and checks that it
// holds nothing and the device has all its memory back.
func resReleaseAll(t testing.TB, dev gpu.Device, r mr.Resource, streams ...gpu.Stream) {
	t.Helper()
	for _, s := range streams {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	if rel, ok := r.(mr.Releaser); ok {
		if err := rel.Release(); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if u, ok := r.(mr.UsageReporter); ok {
		if got := u.Usage(); got.Reserved != 0 || got.Used != 0 {
			t.Errorf("after release: usage %+v, want nothing reserved or used", got)
		}
	}
	free, total, err := dev.MemGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	if free != total {
		t.Errorf("after release the device has %d of %d bytes free", free, total)
	}
}

// TestResourcesRelease allocates on several streams, frees across them,
// and checks that Release leaves nothing held.
func TestResourcesRelease(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			ss := []gpu.Stream{resStream(t, dev), resStream(t, dev), resStream(t, dev)}
			type alloc struct {
				p gpu.DevicePtr
				n int
				s int
			}
			var live []alloc
			for i, n := range c.sizes(100, 256, 5000, 60000, 64<<10, 700<<10, 3<<20, 9<<20) {
				for k := range 3 {
					si := (i + k) % len(ss)
					p, err := r.Allocate(n, ss[si])
					if err != nil {
						t.Fatal(err)
					}
					live = append(live, alloc{p, n, si})
				}
			}
			for i, a := range live {
				if err := r.Deallocate(a.p, a.n, ss[(a.s+i)%len(ss)]); err != nil {
					t.Fatal(err)
				}
			}
			resReleaseAll(t, dev, r, ss...)
			// And it still works afterwards.
			p, err := r.Allocate(1000, ss[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Deallocate(p, 1000, ss[0]); err != nil {
				t.Fatal(err)
			}
			resReleaseAll(t, dev, r, ss...)
		})
	}
}

// TestResourcesReleaseWhileBusy calls Release over and over while
// goroutines allocate, write, check and free on their own streams and
// across them: Release must only ever take memory nobody uses.
func TestResourcesReleaseWhileBusy(t *testing.T) {
	const workers = 4
	ops := 120
	if testing.Short() {
		ops = 40
	}
	for _, c := range resCases() {
		if _, ok := c.make(t, resDevice(t, sim.Config{})).(mr.Releaser); !ok {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			streams := make([]gpu.Stream, workers)
			for i := range streams {
				streams[i] = resStream(t, dev)
			}
			maxSize := 600 << 10
			if c.maxSize != 0 {
				maxSize = c.maxSize
			}
			stop := make(chan struct{})
			released := make(chan error, 1)
			go func() {
				var err error
				for {
					select {
					case <-stop:
						released <- err
						return
					default:
					}
					if e := r.(mr.Releaser).Release(); e != nil && err == nil {
						err = e
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- resWorker(dev, r, streams[w], streams[(w+1)%workers], uint64(w)+100, ops, maxSize)
				}()
			}
			wg.Wait()
			close(stop)
			if err := <-released; err != nil {
				t.Errorf("Release while busy: %v", err)
			}
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			resReleaseAll(t, dev, r, streams...)
		})
	}
}

// TestResourcesReleaseAfterStreamsDestroyed frees memory on streams, some
// of it across them, destroys the streams, and checks Release still gives
// everything back (on another stream, after synchronizing the device).
func TestResourcesReleaseAfterStreamsDestroyed(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			var ss []gpu.Stream
			for range 3 {
				s, err := dev.NewStream()
				if err != nil {
					t.Fatal(err)
				}
				ss = append(ss, s)
			}
			for i, n := range c.sizes(300, 5000, 64<<10, 1<<20, 3<<20) {
				for k := range ss {
					p, err := r.Allocate(n, ss[k])
					if err != nil {
						t.Fatal(err)
					}
					if err := dev.MemsetD8Async(p, byte(i), n, ss[k]); err != nil {
						t.Fatal(err)
					}
					if err := r.Deallocate(p, n, ss[(k+i)%len(ss)]); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, s := range ss {
				if err := s.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			resReleaseAll(t, dev, r)
		})
	}
}

// TestResourcesUsagePeaks checks Usage's counters and peaks, and that
// ResetPeaks lowers the peaks to the current values.
func TestResourcesUsagePeaks(t *testing.T) {
	for _, c := range resCases() {
		t.Run(c.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := c.make(t, dev)
			u, ok := r.(mr.UsageReporter)
			if !ok {
				t.Skip("not a UsageReporter")
			}
			s := resStream(t, dev)
			const a, b = 3000, 5000
			pa, err := r.Allocate(a, s)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := r.Allocate(b, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Deallocate(pb, b, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := u.Usage()
			if got.Used < a || got.Used >= a+b || got.PeakUsed < a+b || got.Reserved < got.Used || got.PeakReserved < got.Reserved {
				t.Errorf("with %d live after a peak of %d: %+v", a, a+b, got)
			}
			switch rp := r.(type) {
			case interface{ ResetPeaks() }:
				rp.ResetPeaks()
			case interface{ ResetPeaks() error }:
				if err := rp.ResetPeaks(); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("%T has no ResetPeaks", r)
			}
			if got := u.Usage(); got.PeakUsed != got.Used || got.PeakReserved != got.Reserved {
				t.Errorf("after ResetPeaks: %+v, want peaks equal to the current values", got)
			}
			if err := r.Deallocate(pa, a, s); err != nil {
				t.Fatal(err)
			}
		})
	}
}
