package mr

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestAlignedSlotRestore: a free the upstream refuses while allocations
// took its slot and every other slot of its address puts the allocation
// among the orphans, from which the right free then frees it; a second
// free is then refused.
func TestAlignedSlotRestore(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool(NewDirect(dev), PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a, err := NewAligned(pool, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if a.slots == nil {
		t.Fatal("no slots over a pool")
	}
	p, err := a.Allocate(1000, s)
	if err != nil {
		t.Fatal(err)
	}
	mask := uint64(4095)
	sl, w := a.slots.take(p, mask)
	if sl == nil {
		t.Fatal("the allocation is not in a slot")
	}
	// Fill every slot of p's window with live words of other addresses,
	// as allocations racing with the free would.
	h := a.slots.home(p)
	for i := range uint64(alignedProbe) {
		a.slots.w[(h+i)&(alignedSlotN-1)].Store(uint64(p) + (i+1)<<32)
	}
	if err := a.freeSlot(sl, w, p, 999, s, mask); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("wrong size: %v", err)
	}
	if a.norphans.Load() != 1 {
		t.Fatalf("%d orphans, want 1", a.norphans.Load())
	}
	for i := range uint64(alignedProbe) {
		a.slots.w[(h+i)&(alignedSlotN-1)].Store(0)
	}
	used := pool.Usage().Used
	if err := a.Deallocate(p, 999, s); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("wrong size of an orphan: %v", err)
	}
	if a.norphans.Load() != 1 || pool.Usage().Used != used {
		t.Fatal("a refused free of an orphan changed something")
	}
	if err := a.Deallocate(p, 1000, s); err != nil {
		t.Fatal(err)
	}
	if a.norphans.Load() != 0 || pool.Usage().Used != 0 {
		t.Fatalf("after the free: %d orphans, pool used %d", a.norphans.Load(), pool.Usage().Used)
	}
	if err := a.Deallocate(p, 1000, s); !errors.Is(err, ErrUnknownPointer) && !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second free: %v", err)
	}
}
