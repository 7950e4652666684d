package mr

import (
	"errors"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestAlignedSlotsRightAndWrongFree: a free with the right size racing
// with one of a wrong size, of an allocation kept in the slots, always
// succeeds; the wrong one is refused as a wrong size, or as a double free
// once the right one freed the block (never an error of another kind),
// and nothing leaks: a third free is a double free and the pool ends
// empty.
func TestAlignedSlotsRightAndWrongFree(t *testing.T) {
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
	const mask = 4095
	for round := range 200 {
		p, err := a.Allocate(1000, s)
		if err != nil {
			t.Fatal(err)
		}
		if sl, _ := a.slots.find(p, mask); sl == nil {
			t.Fatalf("round %d: the allocation is not in a slot", round)
		}
		var right, wrong error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); right = a.Deallocate(p, 1000, s) }()
		go func() { defer wg.Done(); wrong = a.Deallocate(p, 999, s) }()
		wg.Wait()
		if right != nil {
			t.Fatalf("round %d: the right free, beside a wrong one: %v", round, right)
		}
		if !errors.Is(wrong, ErrSizeMismatch) && !errors.Is(wrong, ErrDoubleFree) {
			t.Fatalf("round %d: the wrong free: %v, want ErrSizeMismatch or ErrDoubleFree", round, wrong)
		}
		if err := a.Deallocate(p, 1000, s); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("round %d: third free: %v, want ErrDoubleFree", round, err)
		}
		if sl, _ := a.slots.find(p, mask); sl != nil {
			t.Fatalf("round %d: %#x still live in the slots", round, p)
		}
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool used %d after every free", u.Used)
	}
	if want := "aligned to 4.0 KiB: 0 allocations live"; a.String() != want {
		t.Errorf("%s, want %s", a.String(), want)
	}
}

// TestAlignedSlotsBury: bury turns the word it was given into a
// tombstone, or, when that slot no longer holds it (a free of the
// address's next allocation, at the same offset, found the stale word
// first and buried it), another word equal to it; never a live word of
// the address with another offset (another allocation's record), and
// with none left it changes nothing.
func TestAlignedSlotsBury(t *testing.T) {
	const mask = 4095
	q := gpu.DevicePtr(0x7f0000042000)
	cases := []struct {
		name   string
		words  []uint64 // inserted as units
		steal  bool     // bury the first word before the bury under test
		wantLv int      // live words of q left
	}{
		{"one word", []uint64{3}, false, 0},
		{"two equal words, the first buried by another free", []uint64{3, 3}, true, 0},
		{"two words, the first buried by another free", []uint64{3, 5}, true, 1},
		{"two words", []uint64{3, 5}, false, 1},
		{"two equal words", []uint64{3, 3}, false, 1},
		{"one word, buried by another free", []uint64{3}, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sl alignedSlots
			for _, u := range c.words {
				if !sl.insert(q, u) {
					t.Fatal("insert found no slot")
				}
			}
			w, v := sl.find(q, mask)
			if w == nil || v != uint64(q)|c.words[0] {
				t.Fatalf("find: %v, %#x", w, v)
			}
			if c.steal {
				if !w.CompareAndSwap(v, v|slotFreed) {
					t.Fatal("steal")
				}
			}
			sl.bury(w, v, q)
			if got := sl.live(); got != c.wantLv {
				t.Errorf("%d live words left, want %d", got, c.wantLv)
			}
			if c.wantLv == 1 {
				if _, left := sl.find(q, mask); left != uint64(q)|c.words[1] {
					t.Errorf("live word left %#x, want %#x", left, uint64(q)|c.words[1])
				}
			}
			if !sl.freed(q, mask) {
				t.Error("no tombstone of q")
			}
		})
	}
}
