package mr_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

// hostPoolCase makes one of the host pools on dev, with a check, at the
// end of the test, that it gave everything back: nothing used, and
// nothing held once released (a HostPool) or closed (a DriverHostPool,
// whose Close refuses while anything is allocated).
type hostPoolCase struct {
	name string
	make func(tb testing.TB, dev gpu.Device) mr.Resource
}

func hostPoolCases() []hostPoolCase {
	return []hostPoolCase{
		{"hostpool", func(tb testing.TB, dev gpu.Device) mr.Resource {
			p := mr.NewHostPool(dev)
			tb.Cleanup(func() {
				if err := dev.Synchronize(); err != nil {
					tb.Error(err)
				}
				if _, err := p.ReleaseContext(context.Background()); err != nil {
					tb.Errorf("Release: %v", err)
				}
				if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
					tb.Errorf("host pool after Release: %+v, want nothing used or held", u)
				}
			})
			return p
		}},
		{"driverhostpool", func(tb testing.TB, dev gpu.Device) mr.Resource {
			p, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{})
			if errors.Is(err, gpu.ErrNotSupported) {
				tb.Skipf("no host-located pools: %v", err)
			}
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				if err := dev.Synchronize(); err != nil {
					tb.Error(err)
				}
				if err := p.Close(); err != nil {
					tb.Errorf("Close: %v", err)
				}
			})
			return p
		}},
	}
}

// hostConformance is the conformance suite's options for host memory:
// no kernels touch it, and the host pools refuse captures.
func hostConformance(t *testing.T) mrtest.Options {
	opts := mrtest.Options{DetectsDoubleFree: true, NoKernels: true, RefusesCapture: true,
		Foreign: testdev.Foreign(t), Goroutines: 4, Iterations: 60}
	if testing.Short() {
		opts.Goroutines, opts.Iterations = 2, 20
	}
	return opts
}

// TestHostPoolsConformance runs the resource conformance suite on each
// host pool alone, under each adaptor, and under all the adaptors stacked.
func TestHostPoolsConformance(t *testing.T) {
	dev := testdev.Device(t)
	opts := hostConformance(t)
	for _, hc := range hostPoolCases() {
		t.Run(hc.name, func(t *testing.T) {
			t.Run("alone", func(t *testing.T) { mrtest.Run(t, hc.make, dev, opts) })
			for _, ac := range adaptorCases() {
				t.Run(ac.name, func(t *testing.T) {
					mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
						return ac.wrap(tb, hc.make(tb, dev))
					}, dev, opts)
				})
			}
			t.Run("stack", func(t *testing.T) {
				mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
					r := hc.make(tb, dev)
					for _, ac := range adaptorCases() {
						r = ac.wrap(tb, r)
					}
					return r
				}, dev, opts)
			})
		})
	}
}

// Bad frees of host memory through an adaptor: each is refused with its
// sentinel by the adaptor, before the pool sees it, and changes neither
// the adaptor's counters nor the pool's. The same frees made to the pool
// itself name the pool's own errors.
func TestHostPoolAdaptorsBadFrees(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	for _, hc := range hostPoolCases() {
		for _, ac := range adaptorCases() {
			t.Run(hc.name+"/"+ac.name, func(t *testing.T) {
				pool := hc.make(t, dev)
				a := ac.wrap(t, pool)
				live := must[[]byte](t)(mr.AllocateHost[byte](a, 8192, s))
				freed := must[[]byte](t)(mr.AllocateHost[byte](a, 4096, s))
				if err := mr.FreeHost(a, freed, s); err != nil {
					t.Fatal(err)
				}
				before, usage := ac.state(a), pool.(mr.UsageReporter).Usage()
				for _, tc := range []struct {
					name string
					b    []byte
					want error
				}{
					{"Go memory", make([]byte, 4096), mr.ErrUnknownPointer},
					{"a prefix", live[:4096], mr.ErrSizeMismatch},
					{"inside", live[4096:], mr.ErrUnknownPointer},
					{"double free", freed, mr.ErrDoubleFree},
				} {
					if err := mr.FreeHost(a, tc.b, s); !errors.Is(err, tc.want) {
						t.Errorf("FreeHost(%s) = %v, want %v", tc.name, err, tc.want)
					}
					if got := ac.state(a); got != before {
						t.Errorf("FreeHost(%s) changed the adaptor: %s -> %s", tc.name, before, got)
					}
					if u := pool.(mr.UsageReporter).Usage(); u != usage {
						t.Errorf("FreeHost(%s) changed the pool: %+v -> %+v", tc.name, usage, u)
					}
				}
				if err := mr.FreeHost(a, live, s); err != nil {
					t.Errorf("the live slice after the bad frees: %v", err)
				}
				if u := pool.(mr.UsageReporter).Usage(); u.Used != 0 {
					t.Errorf("pool after every free: %+v", u)
				}
			})
		}
	}
}

// The pools' own answers to a slice that is part of an allocation: the
// Resource contract's sentinel, and for a HostPool also ErrSubSlice.
func TestHostPoolsPartFrees(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	for _, tc := range []struct {
		pool         string
		prefix, tail []error
	}{
		{"hostpool", []error{mr.ErrSizeMismatch, mr.ErrSubSlice}, []error{mr.ErrUnknownPointer, mr.ErrSubSlice}},
		{"driverhostpool", []error{mr.ErrSizeMismatch}, []error{mr.ErrUnknownPointer}},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			var p mr.Resource
			for _, hc := range hostPoolCases() {
				if hc.name == tc.pool {
					p = hc.make(t, dev)
				}
			}
			b := must[[]byte](t)(mr.AllocateHost[byte](p, 8192, s))
			for _, part := range []struct {
				name string
				b    []byte
				want []error
			}{{"prefix", b[:100], tc.prefix}, {"tail", b[100:], tc.tail}} {
				err := mr.FreeHost(p, part.b, s)
				for _, w := range part.want {
					if !errors.Is(err, w) {
						t.Errorf("FreeHost(%s) = %v, want it to match %v", part.name, err, w)
					}
				}
			}
			if err := mr.FreeHost(p, b, s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Bytes and HostBytesOf: any range inside a live allocation, through any
// stack (Aligned hands out an address inside the pool's block), and the
// exact error of every other request.
func TestHostBytes(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	for _, hc := range hostPoolCases() {
		t.Run(hc.name, func(t *testing.T) {
			pool := hc.make(t, dev)
			al, err := mr.NewAligned(pool, 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			top := mr.NewStats(al, mr.StatsOptions{})
			p := must[gpu.DevicePtr](t)(top.Allocate(10000, s))
			whole := must[[]byte](t)(mr.HostBytesOf(top, p, 10000))
			for i := range whole {
				whole[i] = byte(i)
			}
			part := must[[]byte](t)(mr.HostBytesOf(top, p+100, 50))
			if len(part) != 50 || cap(part) != 50 || !bytes.Equal(part, whole[100:150]) {
				t.Errorf("HostBytesOf(p+100, 50) = len %d cap %d, not bytes 100 to 150 of the allocation", len(part), cap(part))
			}
			if b, err := mr.HostBytesOf(top, p, 0); b != nil || err != nil {
				t.Errorf("HostBytesOf(p, 0) = %v, %v; want nil, nil", b, err)
			}
			// The pool knows its own allocations: the end of one is
			// where the size it was asked for ends.
			q := must[gpu.DevicePtr](t)(pool.Allocate(5000, s))
			if b := must[[]byte](t)(mr.HostBytesOf(pool, q+100, 4900)); len(b) != 4900 {
				t.Errorf("HostBytesOf(q+100, 4900): %d bytes", len(b))
			}
			for _, tc := range []struct {
				name string
				p    gpu.DevicePtr
				n    int
				want error
			}{
				{"past the end", q + 100, 4901, mr.ErrInvalidSize},
				{"negative size", q, -1, mr.ErrInvalidSize},
				{"an address no allocation holds", 256, 1, mr.ErrUnknownPointer},
			} {
				if _, err := mr.HostBytesOf(top, tc.p, tc.n); !errors.Is(err, tc.want) {
					t.Errorf("HostBytesOf(%s) = %v, want %v", tc.name, err, tc.want)
				}
			}
			if err := pool.Deallocate(q, 5000, s); err != nil {
				t.Fatal(err)
			}
			if err := top.Deallocate(p, 10000, s); err != nil {
				t.Fatal(err)
			}
			if _, err := mr.HostBytesOf(top, p, 1); !errors.Is(err, mr.ErrUnknownPointer) {
				t.Errorf("HostBytesOf after the free = %v, want ErrUnknownPointer", err)
			}
		})
	}
	// A stack of device memory has no host bytes, and AllocateHost
	// refuses it before allocating.
	direct := mr.NewStats(mr.NewDirect(dev), mr.StatsOptions{})
	p := must[gpu.DevicePtr](t)(direct.Allocate(4096, s))
	if _, err := mr.HostBytesOf(direct, p, 4096); !errors.Is(err, mr.ErrNotHostMemory) {
		t.Errorf("HostBytesOf(device memory) = %v, want ErrNotHostMemory", err)
	}
	if _, err := mr.AllocateHost[byte](direct, 4096, s); !errors.Is(err, mr.ErrNotHostMemory) {
		t.Errorf("AllocateHost(device memory) = %v, want ErrNotHostMemory", err)
	}
	if snap := direct.Snapshot(); snap.Allocations.Total != 1 {
		t.Errorf("AllocateHost over device memory allocated: %d allocations, want the 1 before", snap.Allocations.Total)
	}
	if err := direct.Deallocate(p, 4096, s); err != nil {
		t.Fatal(err)
	}
	if _, err := mr.AllocateHost[byte](nil, 1, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("AllocateHost(nil resource) = %v, want ErrInvalidHandle", err)
	}
	if err := mr.FreeHost[byte](nil, nil, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("FreeHost(nil resource) = %v, want ErrInvalidHandle", err)
	}
}

// A host pool's address on the simulator: device work refuses it (the
// simulator does not model device access to host memory), and the
// []byte view is page-locked memory to the copies, byte for byte through
// an adaptor.
func TestHostPointerOnSimulator(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	for _, hc := range hostPoolCases() {
		t.Run(hc.name, func(t *testing.T) {
			top := mr.NewStats(hc.make(t, dev), mr.StatsOptions{})
			const n = 64 << 10
			p := must[gpu.DevicePtr](t)(top.Allocate(n, s))
			if err := dev.MemsetD8Async(p, 1, n, s); !errors.Is(err, gpu.ErrInvalidValue) {
				t.Errorf("memset of a host pool's address = %v, want gpu.ErrInvalidValue", err)
			}
			d := must[gpu.DevicePtr](t)(dev.Malloc(n))
			defer dev.Free(d)
			if err := dev.CopyDtoDAsync(d, p, n, s); !errors.Is(err, gpu.ErrInvalidValue) {
				t.Errorf("device copy from a host pool's address = %v, want gpu.ErrInvalidValue", err)
			}
			if err := s.Synchronize(); err != nil { // the host may touch a DriverHostPool's memory now
				t.Fatal(err)
			}
			src := must[[]byte](t)(mr.HostBytesOf(top, p, n))
			for i := range src {
				src[i] = byte(i * 7)
			}
			dst := must[[]byte](t)(mr.AllocateHost[byte](top, n, s))
			if err := dev.CopyHtoDAsync(d, src, s); err != nil {
				t.Fatal(err)
			}
			if err := dev.CopyDtoHAsync(dst, d, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src, dst) {
				t.Error("the round trip through the device changed the bytes")
			}
			if err := top.Deallocate(p, n, s); err != nil {
				t.Fatal(err)
			}
			if err := mr.FreeHost(top, dst, s); err != nil {
				t.Fatal(err)
			}
			if snap := top.Snapshot(); snap.Bytes.Current != 0 || snap.Allocations.Total != 2 {
				t.Errorf("stats after the frees: %+v", snap)
			}
		})
	}
}

// On a GPU, a HostPool's address is the unified address of its
// page-locked block: the driver's memset and device copies take it, and
// the host sees what they wrote through the []byte view. (The simulator
// refuses it: TestHostPointerOnSimulator.)
func TestHostPoolPointerOnDevice(t *testing.T) {
	dev := testdev.Device(t)
	if dev.Properties().Simulated {
		t.Skip("the simulator does not model device access to host memory")
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	top := mr.NewStats(mr.NewHostPool(dev), mr.StatsOptions{})
	const n = 1 << 20
	p := must[gpu.DevicePtr](t)(top.Allocate(n, s))
	if err := dev.MemsetD8Async(p, 0xab, n, s); err != nil {
		t.Fatalf("memset through a host pool's address: %v", err)
	}
	d := must[gpu.DevicePtr](t)(dev.Malloc(n))
	defer dev.Free(d)
	if err := dev.CopyDtoDAsync(d, p, n, s); err != nil {
		t.Fatalf("device copy from a host pool's address: %v", err)
	}
	back := make([]byte, n)
	if err := dev.CopyDtoHAsync(back, d, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	host := must[[]byte](t)(mr.HostBytesOf(top, p, n))
	for i := range n {
		if host[i] != 0xab || back[i] != 0xab {
			t.Fatalf("byte %d: %#x in the pool's memory, %#x copied through the device; want 0xab", i, host[i], back[i])
		}
	}
	if err := top.Deallocate(p, n, s); err != nil {
		t.Fatal(err)
	}
}
