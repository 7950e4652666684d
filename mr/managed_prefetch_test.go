package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// managedSim is a fresh simulated device (its fault counters at zero), a
// stream and the kernels.
func managedSim(t *testing.T) (*sim.Device, gpu.Stream, *kernels.Kernels) {
	t.Helper()
	gd, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gd.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	k, err := kernels.Load(gd)
	if err != nil {
		t.Fatal(err)
	}
	return gd.(*sim.Device), s, k
}

// A kernel over managed memory takes a fault per page; prefetched first,
// none, and the pages are counted as prefetched.
func TestManagedPrefetchAvoidsFaults(t *testing.T) {
	const size = 32 * sim.ManagedPage
	dev, s, k := managedSim(t)
	m := mr.NewManaged(dev)
	cold, err := m.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := m.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Fill(s, cold, size/4, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Prefetch(warm, size, gpu.DeviceLocation(0), s); err != nil {
		t.Fatal(err)
	}
	if err := k.Fill(s, warm, size/4, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got, want := dev.ManagedStats(), (sim.ManagedStats{DeviceFaults: 32, PrefetchedToDevice: 32}); got != want {
		t.Errorf("stats %v, want %v", got, want)
	}
	// Back to the host in stream order, then read there: no host faults.
	if err := m.Prefetch(warm, size, gpu.HostLocation(), s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := dev.HostAccess(warm, size, false); err != nil {
		t.Fatal(err)
	}
	if got := dev.ManagedStats(); got.HostFaults != 0 || got.PrefetchedToHost != 32 {
		t.Errorf("after prefetch to the host: %v, want 32 pages to the host and no host faults", got)
	}
	for _, p := range []gpu.DevicePtr{cold, warm} {
		if err := m.Deallocate(p, size, s); err != nil {
			t.Fatal(err)
		}
	}
}

// Read-mostly advice through the resource duplicates pages on prefetch.
func TestManagedAdviseReadMostly(t *testing.T) {
	const size = 8 * sim.ManagedPage
	dev, s, _ := managedSim(t)
	m := mr.NewManaged(dev)
	p, err := m.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Deallocate(p, size, s)
	if err := m.Advise(p, size, gpu.AdviseSetReadMostly, gpu.DeviceLocation(0)); err != nil {
		t.Fatal(err)
	}
	if err := dev.HostAccess(p, size, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Prefetch(p, size, gpu.DeviceLocation(0), s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := dev.HostAccess(p, size, false); err != nil {
		t.Fatal(err)
	}
	if got, want := dev.ManagedStats(), (sim.ManagedStats{HostFaults: 8, PrefetchedToDevice: 8, Duplicated: 8}); got != want {
		t.Errorf("stats %v, want %v", got, want)
	}
}

// Bad prefetches and advice are refused with typed errors and change
// nothing; interior, unaligned ranges are accepted.
func TestManagedPrefetchBadInput(t *testing.T) {
	const size = 4 * sim.ManagedPage
	dev, s, _ := managedSim(t)
	m := mr.NewManaged(dev)
	p, err := m.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := m.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Deallocate(freed, size, s); err != nil {
		t.Fatal(err)
	}
	direct := mr.NewDirect(dev)
	foreign, err := direct.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Deallocate(foreign, size, s)
	other, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	here := gpu.DeviceLocation(0)
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"foreign pointer", m.Prefetch(foreign, 4096, here, s), mr.ErrUnknownPointer},
		{"freed pointer", m.Prefetch(freed, 4096, here, s), mr.ErrUnknownPointer},
		{"one past the end", m.Prefetch(p+size, 1, here, s), mr.ErrUnknownPointer},
		{"range past the end", m.Prefetch(p+1, size, here, s), mr.ErrInvalidSize},
		{"size 0", m.Prefetch(p, 0, here, s), mr.ErrInvalidSize},
		{"negative size", m.Prefetch(p, -4096, here, s), mr.ErrInvalidSize},
		{"nil stream", m.Prefetch(p, 4096, here, nil), gpu.ErrInvalidHandle},
		{"location kind 7", m.Prefetch(p, 4096, gpu.Location{Kind: 7}, s), gpu.ErrInvalidValue},
		{"device 5", m.Prefetch(p, 4096, gpu.DeviceLocation(5), s), gpu.ErrInvalidDevice},
		{"advice 0", m.Advise(p, 4096, 0, here), gpu.ErrInvalidValue},
		{"advice on a foreign pointer", m.Advise(foreign, 4096, gpu.AdviseSetReadMostly, here), mr.ErrUnknownPointer},
		{"preferred location on device 5", m.Advise(p, 4096, gpu.AdviseSetPreferredLocation, gpu.DeviceLocation(5)), gpu.ErrInvalidDevice},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.err, c.want)
		}
	}
	if got := dev.ManagedStats(); got != (sim.ManagedStats{}) {
		t.Errorf("refused calls changed the counters: %v", got)
	}
	// An interior, unaligned range covers the pages it touches.
	if err := m.Prefetch(p+sim.ManagedPage-1, 2, here, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := dev.ManagedStats().PrefetchedToDevice; got != 2 {
		t.Errorf("2 bytes across a page boundary prefetched %d pages, want 2", got)
	}
	if err := m.Deallocate(p, size, s); err != nil {
		t.Fatal(err)
	}
}

// AsyncOptions.ManagedPool: stream-ordered managed memory, which faults
// like MallocManaged's and prefetches through the device's control.
func TestAsyncManagedPool(t *testing.T) {
	const size = 8 * sim.ManagedPage
	dev, s, k := managedSim(t)
	_, err := mr.NewAsync(dev, mr.AsyncOptions{ManagedPool: true, OwnPool: true})
	if !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("ManagedPool with OwnPool: %v, want gpu.ErrInvalidValue", err)
	}
	r, err := mr.NewAsync(dev, mr.AsyncOptions{ManagedPool: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := gpu.ManagedMemoryOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := mm.PrefetchAsync(b, size, gpu.DeviceLocation(0), s); err != nil {
		t.Fatal(err)
	}
	if err := k.Fill(s, a, size/4, 1); err != nil {
		t.Fatal(err)
	}
	if err := k.Fill(s, b, size/4, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got, want := dev.ManagedStats(), (sim.ManagedStats{DeviceFaults: 8, PrefetchedToDevice: 8}); got != want {
		t.Errorf("stats %v, want %v", got, want)
	}
	for _, p := range []gpu.DevicePtr{a, b} {
		if err := r.Deallocate(p, size, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
