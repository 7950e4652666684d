package mr

import (
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestAlignedSlotBusy: a free of an allocation whose free is in progress
// (its slot busy) waits for that free's outcome; if the upstream refused
// it, the waiting free frees the allocation, and a third free is a double
// free.
func TestAlignedSlotBusy(t *testing.T) {
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
	const mask = 4095
	sl, w := a.slots.take(p, mask) // a free in progress
	if sl == nil {
		t.Fatal("the allocation is not in a slot")
	}
	done := make(chan error, 1)
	go func() { done <- a.Deallocate(p, 1000, s) }()
	select {
	case err := <-done:
		t.Fatalf("a free returned while another free of its pointer was in progress: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	a.slots.end(sl, w, false) // that free was refused
	if err := <-done; err != nil {
		t.Fatalf("the waiting free: %v", err)
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool used %d after the free", u.Used)
	}
	if err := a.Deallocate(p, 1000, s); !errors.Is(err, ErrDoubleFree) {
		t.Errorf("third free: %v, want ErrDoubleFree", err)
	}
}
