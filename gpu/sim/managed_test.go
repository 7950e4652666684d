package sim_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// managedFixture is a fresh device (its counters start at zero), a stream
// and the kernels.
type managedFixture struct {
	dev *sim.Device
	s   gpu.Stream
	k   *kernels.Kernels
}

func newManagedFixture(t *testing.T, devices int) managedFixture {
	t.Helper()
	gd, err := sim.New(sim.Config{Devices: devices}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	dev := gd.(*sim.Device)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	return managedFixture{dev, s, k}
}

func (f managedFixture) managed(t *testing.T, size int) gpu.DevicePtr {
	t.Helper()
	p, err := f.dev.MallocManaged(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.dev.Free(p) })
	return p
}

func (f managedFixture) fill(t *testing.T, p gpu.DevicePtr, size int) {
	t.Helper()
	if err := f.k.Fill(f.s, p, size/4, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func (f managedFixture) host(t *testing.T, p gpu.DevicePtr, size int, write bool) {
	t.Helper()
	if err := f.dev.HostAccess(p, size, write); err != nil {
		t.Fatal(err)
	}
}

func (f managedFixture) prefetch(t *testing.T, p gpu.DevicePtr, size int, loc gpu.Location) {
	t.Helper()
	if err := f.dev.PrefetchAsync(p, size, loc, f.s); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func (f managedFixture) advise(t *testing.T, p gpu.DevicePtr, size int, a gpu.Advice, loc gpu.Location) {
	t.Helper()
	if err := f.dev.Advise(p, size, a, loc); err != nil {
		t.Fatal(err)
	}
}

// TestManagedResidency follows pages through kernels, host accesses,
// prefetches and advice, checking the counters after each scenario.
func TestManagedResidency(t *testing.T) {
	const size = 16 * sim.ManagedPage
	const pages = 16
	dev0 := gpu.DeviceLocation(0)
	host := gpu.HostLocation()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, f managedFixture, p gpu.DevicePtr)
		want sim.ManagedStats
	}{
		{"first touch by a kernel faults once per page", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.fill(t, p, size)
			f.fill(t, p, size) // resident now: no more faults
		}, sim.ManagedStats{DeviceFaults: pages}},
		{"prefetch to the device avoids the faults", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.prefetch(t, p, size, dev0)
			f.fill(t, p, size)
		}, sim.ManagedStats{PrefetchedToDevice: pages}},
		{"pages bounce between host and device", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.host(t, p, size, true) // first touch on the host
			f.fill(t, p, size)       // migrate to the device
			f.host(t, p, size, false)
			f.fill(t, p, size)
		}, sim.ManagedStats{HostFaults: 2 * pages, DeviceFaults: 2 * pages}},
		{"prefetch to the host, then a kernel faults again", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.prefetch(t, p, size, dev0)
			f.prefetch(t, p, size, host)
			f.fill(t, p, size)
			f.host(t, p, size/2, false)
		}, sim.ManagedStats{PrefetchedToDevice: pages, PrefetchedToHost: pages, DeviceFaults: pages, HostFaults: pages / 2}},
		{"read-mostly pages are duplicated, a host write collapses them", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.advise(t, p, size, gpu.AdviseSetReadMostly, dev0)
			f.host(t, p, size, true)
			f.prefetch(t, p, size, dev0) // duplicates
			f.host(t, p, size, false)    // the host kept its copy
			f.fill(t, p, size)           // so did the device
			f.host(t, p, size, true)     // the write drops the device's copy
			f.fill(t, p, size)           // which the kernel duplicates again
		}, sim.ManagedStats{HostFaults: pages, PrefetchedToDevice: pages, DeviceFaults: pages, Duplicated: 2 * pages}},
		{"preferred on the host: the device maps the pages", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.host(t, p, size, true)
			f.advise(t, p, size, gpu.AdviseSetPreferredLocation, host)
			f.fill(t, p, size) // faults, maps
			f.fill(t, p, size) // mapped: no fault
			f.host(t, p, size, false)
		}, sim.ManagedStats{HostFaults: pages, DeviceFaults: pages}},
		{"accessed by the device: no faults on populated pages", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.host(t, p, size, true)
			f.advise(t, p, size, gpu.AdviseSetAccessedBy, dev0)
			f.fill(t, p, size)
			f.advise(t, p, size, gpu.AdviseUnsetAccessedBy, dev0)
			f.fill(t, p, size)
		}, sim.ManagedStats{HostFaults: pages, DeviceFaults: pages}},
		{"a partial range touches only its pages", func(t *testing.T, f managedFixture, p gpu.DevicePtr) {
			f.prefetch(t, p+1, sim.ManagedPage, dev0) // straddles pages 0 and 1
			f.fill(t, p, 4*sim.ManagedPage)
		}, sim.ManagedStats{PrefetchedToDevice: 2, DeviceFaults: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newManagedFixture(t, 1)
			p := f.managed(t, size)
			c.run(t, f, p)
			if got := f.dev.ManagedStats(); got != c.want {
				t.Errorf("stats:\n got %v\nwant %v", got, c.want)
			}
		})
	}
}

// TestManagedPrefetchStreamOrder: a prefetch runs when its stream reaches
// it, not when it is enqueued.
func TestManagedPrefetchStreamOrder(t *testing.T) {
	f := newManagedFixture(t, 1)
	p := f.managed(t, 4*sim.ManagedPage)
	release := f.dev.Hold(f.s)
	if err := f.dev.PrefetchAsync(p, 4*sim.ManagedPage, gpu.DeviceLocation(0), f.s); err != nil {
		t.Fatal(err)
	}
	if got := f.dev.ManagedStats().PrefetchedToDevice; got != 0 {
		t.Fatalf("%d pages prefetched while the stream is held", got)
	}
	release()
	if err := f.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := f.dev.ManagedStats().PrefetchedToDevice; got != 4 {
		t.Fatalf("%d pages prefetched after the stream ran, want 4", got)
	}
}

// TestManagedPoolResidency: memory of a managed pool faults like
// MallocManaged's; a device pool's does not count.
func TestManagedPoolResidency(t *testing.T) {
	f := newManagedFixture(t, 1)
	pool, err := f.dev.NewManagedPool()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Destroy()
	p, err := f.dev.MallocFromPoolAsync(8*sim.ManagedPage, pool, f.s)
	if err != nil {
		t.Fatal(err)
	}
	f.fill(t, p, 8*sim.ManagedPage)
	d, err := f.dev.MallocAsync(8*sim.ManagedPage, f.s)
	if err != nil {
		t.Fatal(err)
	}
	f.fill(t, d, 8*sim.ManagedPage)
	if err := f.dev.HostAccess(d, 16, false); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("HostAccess of device memory: %v, want ErrInvalidValue", err)
	}
	if got := f.dev.ManagedStats(); got != (sim.ManagedStats{DeviceFaults: 8}) {
		t.Errorf("stats %v, want 8 device faults", got)
	}
	f.dev.FreeAsync(p, f.s)
	f.dev.FreeAsync(d, f.s)
}

// TestManagedBadInputSim: what only the simulator can be asked (another
// device of the same backend, a NUMA node, a capturing stream, HostAccess)
// is refused with the driver's error and changes nothing.
func TestManagedBadInputSim(t *testing.T) {
	f := newManagedFixture(t, 2)
	p := f.managed(t, 4*sim.ManagedPage)
	capt, err := f.dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Destroy()
	if err := gpu.BeginCapture(capt, gpu.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	capErr := f.dev.PrefetchAsync(p, 4096, gpu.DeviceLocation(0), capt)
	if _, err := gpu.EndCapture(capt); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"prefetch to the other device", f.dev.PrefetchAsync(p, 4096, gpu.DeviceLocation(1), f.s), gpu.ErrInvalidDevice},
		{"prefetch to NUMA node 1", f.dev.PrefetchAsync(p, 4096, gpu.Location{Kind: gpu.LocationHostNUMA, ID: 1}, f.s), gpu.ErrInvalidValue},
		{"prefetch past the end", f.dev.PrefetchAsync(p, 4*sim.ManagedPage+1, gpu.DeviceLocation(0), f.s), gpu.ErrInvalidValue},
		{"prefetch on a capturing stream", capErr, gpu.ErrStreamCaptureUnsupported},
		{"host access past the end", f.dev.HostAccess(p+1, 4*sim.ManagedPage, true), gpu.ErrInvalidValue},
		{"host access of 0 bytes", f.dev.HostAccess(p, 0, true), gpu.ErrInvalidValue},
		{"advice past the end", f.dev.Advise(p, 4*sim.ManagedPage+1, gpu.AdviseSetReadMostly, gpu.DeviceLocation(0)), gpu.ErrInvalidValue},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.err, c.want)
		}
	}
	if got := f.dev.ManagedStats(); got != (sim.ManagedStats{}) {
		t.Errorf("refused calls changed the counters: %v", got)
	}
	// NUMA node 0 is the host.
	if err := f.dev.PrefetchAsync(p, 4096, gpu.Location{Kind: gpu.LocationHostNUMA}, f.s); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := f.dev.ManagedStats().PrefetchedToHost; got != 1 {
		t.Errorf("prefetch to NUMA node 0: %d pages to the host, want 1", got)
	}
}

// Host accesses racing on the same unpopulated pages count one host fault
// per page: the fault goes with the transition that populated the page,
// never with an attempt that lost the race to another accessor.
func TestManagedFaultsCountedOnceUnderContention(t *testing.T) {
	f := newManagedFixture(t, 1)
	const pages, accessors, rounds = 1024, 8, 10
	for r := 0; r < rounds; r++ {
		p := f.managed(t, pages*sim.ManagedPage)
		var wg sync.WaitGroup
		for a := 0; a < accessors; a++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.dev.HostAccess(p, pages*sim.ManagedPage, false); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if got, want := f.dev.ManagedStats().HostFaults, uint64((r+1)*pages); got != want {
			t.Fatalf("round %d: %d host faults, want %d (one per page)", r, got, want)
		}
	}
}
