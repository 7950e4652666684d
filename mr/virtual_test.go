package mr_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

func newVirtual(tb testing.TB, dev gpu.Device, opts mr.VirtualOptions) *mr.Virtual {
	tb.Helper()
	v, err := mr.NewVirtual(dev, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := v.Close(); err != nil {
			tb.Error(err)
		}
	})
	return v
}

// TestVirtualConformance runs the resource conformance suite against
// Virtual alone and a Pool over it, on the device STREAMALLOC_DEVICE
// selects (the simulator by default).
func TestVirtualConformance(t *testing.T) {
	dev := testdev.Device(t)
	for _, tc := range []struct {
		name string
		make mrtest.Factory
		opts mrtest.Options
	}{
		{"vmm", func(tb testing.TB, dev gpu.Device) mr.Resource {
			return newVirtual(tb, dev, mr.VirtualOptions{})
		}, mrtest.Options{RefusesCapture: true}},
		// Exportable: every handle is kept while mapped and released
		// with the unmap, which the suite's accounting checks.
		{"vmm-exportable", func(tb testing.TB, dev gpu.Device) mr.Resource {
			return newVirtual(tb, dev, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX})
		}, mrtest.Options{RefusesCapture: true}},
		{"pool-over-vmm", func(tb testing.TB, dev gpu.Device) mr.Resource {
			up := newVirtual(tb, dev, mr.VirtualOptions{})
			p, err := mr.NewPool(up, mr.PoolOptions{})
			if err != nil {
				tb.Fatal(err)
			}
			return struct {
				mr.Resource
				mr.UsageReporter
				mr.Releaser
			}{p, p, releaseOverVirtual{p, up}}
		}, mrtest.Options{}},
		// The lifetime placement (a Virtual that waits for decommits)
		// with the holes in pinned granules filled (pool_vhole.go).
		{"pool-over-vmm-holes", func(tb testing.TB, dev gpu.Device) mr.Resource {
			up := newVirtual(tb, dev, mr.VirtualOptions{WaitForDecommits: true})
			p, err := mr.NewPool(up, mr.PoolOptions{PackHoles: true})
			if err != nil {
				tb.Fatal(err)
			}
			return struct {
				mr.Resource
				mr.UsageReporter
				mr.Releaser
			}{p, p, releaseOverVirtual{p, up}}
		}, mrtest.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DetectsDoubleFree = true
			tc.opts.Foreign = testdev.Foreign(t)
			mrtest.Run(t, tc.make, dev, tc.opts)
		})
	}
}

// releaseOverVirtual releases a Pool, then waits for the chunk frees it
// enqueued on Virtual to complete and unmaps them: Virtual gives memory
// back only once the free's work has run.
type releaseOverVirtual struct {
	p  *mr.Pool
	up *mr.Virtual
}

func (r releaseOverVirtual) Release() error {
	if err := r.p.Release(); err != nil {
		return err
	}
	return r.up.ReleaseContext(context.Background())
}

// TestVirtualGrowShrink: allocations are adjacent granules at the end of
// the range; a free is unmapped only after its stream's work, and the
// range's end moves back when its tail is freed; the counters tell live,
// mapped and reserved bytes apart.
func TestVirtualGrowShrink(t *testing.T) {
	dev, err := sim.New(sim.Config{Capacity: 64 << 20}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	v := newVirtual(t, dev, mr.VirtualOptions{ReserveSize: 1 << 30})
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	st := v.Stats()
	g := st.Granularity
	if st.Reserved != 1<<30 || st.Mapped != 0 || st.Live != 0 {
		t.Fatalf("fresh: %+v", st)
	}
	a, err := v.Allocate(100, s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Allocate(int(g)+1, s)
	if err != nil {
		t.Fatal(err)
	}
	if b != a+gpu.DevicePtr(g) {
		t.Fatalf("second allocation at %#x, want the granule after the first, %#x", uint64(b), uint64(a)+g)
	}
	if st := v.Stats(); st.Mapped != 3*g || st.Live != g+101 {
		t.Fatalf("after two allocations: mapped %d live %d, want %d and %d", st.Mapped, st.Live, 3*g, g+101)
	}
	// The device counts exactly the mapped granules.
	free, total, _ := dev.MemGetInfo()
	if total-free != 3*g {
		t.Fatalf("device memory in use %d, want %d", total-free, 3*g)
	}
	// A free behind work still queued on s stays mapped until the work is
	// done: the stream is held (the simulator's hook) across the free.
	release := dev.(*sim.Device).Hold(s)
	if err := v.Deallocate(b, int(g)+1, s); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != 3*g || st.Pending != 2*g || st.Live != 100 {
		t.Fatalf("free behind held work: %+v, want mapped %d pending %d live 100", st, 3*g, 2*g)
	}
	release()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := v.Release(); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != g || st.Pending != 0 || st.PeakMapped != 3*g {
		t.Fatalf("after the work: %+v, want mapped %d, peak %d", st, g, 3*g)
	}
	// The tail went back: the next allocation reuses its addresses.
	c, err := v.Allocate(int(g), s)
	if err != nil {
		t.Fatal(err)
	}
	if c != b {
		t.Fatalf("allocation after the tail was freed at %#x, want %#x", uint64(c), uint64(b))
	}
	// Beyond the device: out of memory, nothing left behind.
	if _, err := v.Allocate(64<<20, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("allocation beyond the device: got %v, want ErrOutOfMemory", err)
	}
	if st := v.Stats(); st.Mapped != 2*g {
		t.Fatalf("after a refused allocation: mapped %d, want %d", st.Mapped, 2*g)
	}
	for _, x := range []struct {
		p gpu.DevicePtr
		n int
	}{{a, 100}, {c, int(g)}} {
		if err := v.Deallocate(x.p, x.n, s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVirtualNeedsVirtualMemory: a device without the interface is
// refused with ErrNotSupported.
func TestVirtualNeedsVirtualMemory(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mr.NewVirtual(struct{ gpu.Device }{dev}, mr.VirtualOptions{})
	if !errors.Is(err, gpu.ErrNotSupported) {
		t.Fatalf("got %v, want ErrNotSupported", err)
	}
}

// TestVirtualWaitForFrees: a free behind work still queued stays mapped,
// and an allocation that maps new memory meanwhile holds both; with
// WaitForFrees that allocation first waits for the free's work and unmaps
// it, so the memory mapped never holds both. A pending free of the same
// size is taken back without a wait either way.
func TestVirtualWaitForFrees(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			dev, err := sim.New(sim.Config{Capacity: 64 << 20}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			v := newVirtual(t, dev, mr.VirtualOptions{ReserveSize: 1 << 30, WaitForFrees: wait})
			if got := v.Options().WaitForFrees; got != wait {
				t.Fatalf("Options().WaitForFrees = %v, want %v", got, wait)
			}
			g := int(v.Stats().Granularity)
			s1, s2 := newSimStream(t, dev), newSimStream(t, dev)
			a, err := v.Allocate(4*g, s1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := v.Allocate(2*g, s1)
			if err != nil {
				t.Fatal(err)
			}
			release := dev.(*sim.Device).Hold(s1)
			defer release()
			if err := v.Deallocate(b, 2*g, s1); err != nil {
				t.Fatal(err)
			}
			// The same size: b's memory comes back, s2 ordered after s1's
			// work, with no host wait (the stream is still held).
			b2, err := v.Allocate(2*g, s2)
			if err != nil {
				t.Fatal(err)
			}
			if st := v.Stats(); b2 != b || st.Mapped != uint64(6*g) || st.FreeWaits != 0 {
				t.Fatalf("reuse of a pending free: %#x (freed %#x), %+v", uint64(b2), uint64(b), st)
			}
			if err := v.Deallocate(a, 4*g, s1); err != nil {
				t.Fatal(err)
			}
			var released atomic.Bool
			if wait {
				go func() {
					time.Sleep(20 * time.Millisecond)
					released.Store(true)
					release()
				}()
			}
			c, err := v.Allocate(g, s2)
			if err != nil {
				t.Fatal(err)
			}
			st := v.Stats()
			if wait {
				if !released.Load() || st.Mapped != uint64(3*g) || st.Pending != 0 || st.FreeWaits != 1 || st.PeakMapped != uint64(6*g) {
					t.Fatalf("allocation with a free pending, waiting: released %v, %+v; want mapped %d, 1 wait, peak %d",
						released.Load(), st, 3*g, 6*g)
				}
			} else if st.Mapped != uint64(7*g) || st.Pending != uint64(4*g) || st.FreeWaits != 0 || st.PeakMapped != uint64(7*g) {
				t.Fatalf("allocation with a free pending, not waiting: %+v; want mapped %d, pending %d, peak %d", st, 7*g, 4*g, 7*g)
			}
			release()
			for _, x := range []struct {
				p gpu.DevicePtr
				n int
			}{{b2, 2 * g}, {c, g}} {
				if err := v.Deallocate(x.p, x.n, s2); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func newSimStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}
