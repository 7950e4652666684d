package sim_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// A host pool destroyed with memory allocated keeps serving its frees,
// and gives every page-locked byte back with the last one.
func TestHostMemPoolDestroyWhileAllocated(t *testing.T) {
	const capacity = 1 << 20
	gd, err := sim.New(sim.Config{HostCapacity: capacity}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gd.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	f := managedFixture{dev: gd.(*sim.Device), s: s}
	pool, err := f.dev.NewHostMemPool(gpu.HostLocation())
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.dev.MallocHostFromPoolAsync(10000, pool, f.s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.dev.MallocHostFromPoolAsync(5000, pool, f.s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.dev.FreeHostAsync(b, f.s); err != nil {
		t.Fatal(err)
	}
	if err := pool.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dev.MallocHostFromPoolAsync(16, pool, f.s); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("allocation from a destroyed pool: %v, want gpu.ErrDestroyed", err)
	}
	if err := f.dev.FreeHostAsync(a, f.s); err != nil {
		t.Fatalf("free after Destroy: %v", err)
	}
	if err := f.dev.FreeHostAsync(a, f.s); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("second free: %v, want gpu.ErrInvalidValue", err)
	}
	// All page-locked memory is back: the whole capacity can be pinned.
	h, err := f.dev.MallocHost(capacity)
	if err != nil {
		t.Fatalf("pinning the whole host capacity after the pool went: %v", err)
	}
	if err := f.dev.FreeHost(h); err != nil {
		t.Fatal(err)
	}
}
