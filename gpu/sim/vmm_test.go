package sim_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestVirtualMemoryConformance runs the virtual-memory suite, which the
// card also passes, on the simulator.
func TestVirtualMemoryConformance(t *testing.T) {
	dev := newDevice(t)
	gputest.RunVirtualMemory(t, dev)
}

// TestVirtualMemoryFaults: a kernel touching a page of a reservation that
// is not mapped, or mapped without access, fails with
// gpu.ErrIllegalAddress, as it faults on the card (so the conformance suite
// never does it); a copy or set whose range is not mapped and accessible
// when it is enqueued is refused then with gpu.ErrInvalidValue, as the
// simulator refuses one outside any allocation. Also the calls the
// simulator refuses beyond the card's documented rules.
func TestVirtualMemoryFaults(t *testing.T) {
	dev := newDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := dev.Granularity(false)
	p, err := dev.ReserveAddress(4*g, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dev.CreatePhysical(2 * g)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Map(p, 2*g, h, 0); err != nil {
		t.Fatal(err)
	}
	// access runs op on a fresh stream (the error is sticky on the one it
	// happens on) and returns its error, at enqueue or when it ran.
	access := func(op func(gpu.Stream) error) error {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		if err := op(s); err != nil {
			return err
		}
		return s.Synchronize()
	}
	fill := func(at gpu.DevicePtr, n uint64) func(gpu.Stream) error {
		return func(s gpu.Stream) error { return k.Fill(s, at, int(n/4), 1) }
	}
	memset := func(at gpu.DevicePtr, n uint64) func(gpu.Stream) error {
		return func(s gpu.Stream) error { return dev.MemsetD8Async(at, 1, int(n), s) }
	}
	read := func(at gpu.DevicePtr, n uint64) func(gpu.Stream) error {
		return func(s gpu.Stream) error { return dev.CopyDtoHAsync(make([]byte, n), at, s) }
	}
	type bad struct {
		name string
		op   func(gpu.Stream) error
		want error
	}
	for _, c := range []bad{
		{"kernel on a page mapped without access", fill(p, g), gpu.ErrIllegalAddress},
		{"memset on a page mapped without access", memset(p, 16), gpu.ErrInvalidValue},
		{"copy from a page never mapped", read(p+gpu.DevicePtr(3*g), 16), gpu.ErrInvalidValue},
	} {
		if err := access(c.op); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if err := dev.SetAccess(p, 2*g); err != nil {
		t.Fatal(err)
	}
	if err := access(fill(p, 2*g)); err != nil {
		t.Fatalf("kernel on mapped, accessible pages: %v", err)
	}
	for _, c := range []bad{
		{"kernel running one word into the unmapped tail", fill(p+gpu.DevicePtr(2*g)-4, 8), gpu.ErrIllegalAddress},
		{"memset of the first unmapped byte", memset(p+gpu.DevicePtr(2*g), 1), gpu.ErrInvalidValue},
		{"copy across the end of the mapping", read(p+gpu.DevicePtr(2*g)-8, 16), gpu.ErrInvalidValue},
	} {
		if err := access(c.op); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Refused by the simulator: freeing a reservation with something
	// mapped, and releasing a handle twice.
	if err := dev.FreeAddress(p, 4*g); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("FreeAddress with a mapping: got %v, want ErrInvalidValue", err)
	}
	if err := dev.ReleasePhysical(h); err != nil {
		t.Fatal(err)
	}
	if err := dev.ReleasePhysical(h); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("second ReleasePhysical: got %v, want ErrInvalidValue", err)
	}
	if err := dev.Map(p+gpu.DevicePtr(2*g), g, h, 0); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("Map of a released handle: got %v, want ErrInvalidValue", err)
	}
	// Unmapped after a write: the bytes are gone from that address.
	if err := dev.Unmap(p, 2*g); err != nil {
		t.Fatal(err)
	}
	if err := access(fill(p, 16)); !errors.Is(err, gpu.ErrIllegalAddress) {
		t.Errorf("kernel after unmap: got %v, want ErrIllegalAddress", err)
	}
	if err := dev.FreeAddress(p, 4*g); err != nil {
		t.Fatal(err)
	}
	if err := access(fill(p, 16)); !errors.Is(err, gpu.ErrIllegalAddress) {
		t.Errorf("kernel after the reservation is freed: got %v, want ErrIllegalAddress", err)
	}
}

// TestVirtualMemoryCapacity: physical allocations are charged exactly,
// reservations not at all, and creation beyond the capacity is refused.
func TestVirtualMemoryCapacity(t *testing.T) {
	b := sim.New(sim.Config{Capacity: 64 << 20})
	d, err := b.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	dev := d.(*sim.Device)
	g, _ := dev.Granularity(false)
	free := func() uint64 {
		f, _, err := dev.MemGetInfo()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f0 := free()
	p, err := dev.ReserveAddress(1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f := free(); f != f0 {
		t.Fatalf("a 1 GiB reservation took %d bytes of capacity", f0-f)
	}
	var hs []gpu.Physical
	for range f0 / g {
		h, err := dev.CreatePhysical(g)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	if _, err := dev.CreatePhysical(g); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Fatalf("CreatePhysical beyond capacity: got %v, want ErrOutOfMemory", err)
	}
	if err := dev.Map(p, g, hs[0], 0); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if err := dev.ReleasePhysical(h); err != nil {
			t.Fatal(err)
		}
	}
	if f := free(); f != f0-g {
		t.Fatalf("all released, one granule mapped: free %d, want %d", f, f0-g)
	}
	if err := dev.Unmap(p, g); err != nil {
		t.Fatal(err)
	}
	if err := dev.FreeAddress(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	if f := free(); f != f0 {
		t.Fatalf("everything unmapped and released: free %d, want %d", f, f0)
	}
}

// TestVirtualMemoryUnmapIsNotStreamOrdered: a kernel enqueued before an
// Unmap but run after it faults, as on the card: the caller must unmap
// only after the work that uses the pages has completed.
func TestVirtualMemoryUnmapIsNotStreamOrdered(t *testing.T) {
	dev := newDevice(t)
	k, err := kernels.Load(dev)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := dev.Granularity(false)
	p, err := dev.ReserveAddress(g, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := dev.CreatePhysical(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{dev.Map(p, g, h, 0), dev.SetAccess(p, g), dev.ReleasePhysical(h)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	release := dev.Hold(s)
	if err := k.Fill(s, p, int(g/4), 1); err != nil {
		t.Fatal(err)
	}
	if err := dev.Unmap(p, g); err != nil {
		t.Fatal(err)
	}
	release()
	if err := s.Synchronize(); !errors.Is(err, gpu.ErrIllegalAddress) {
		t.Fatalf("kernel run after the unmap: got %v, want ErrIllegalAddress", err)
	}
	if err := dev.FreeAddress(p, g); err != nil {
		t.Fatal(err)
	}
}
