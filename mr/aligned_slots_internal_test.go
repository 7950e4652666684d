package mr

import (
	"errors"
	"sync"
	"sync/atomic"
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
			if !sl.bury(w, v) {
				sl.buryEqual(q, v)
			}
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

// windowPool is a pool whose DeallocateOwned runs then, once, after it
// freed a block and before it returns: code run there runs inside an
// Aligned free, between the upstream's free and the slots' tombstone,
// where a descheduled free can stay for any time.
type windowPool struct {
	*Pool
	then func()
}

func (w *windowPool) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	err := w.Pool.DeallocateOwned(p, size, s, o)
	if f := w.then; err == nil && f != nil {
		w.then = nil
		f()
	}
	return err
}

// TestAlignedSlotsFreeWindow: while a free of q has freed its block
// upstream and not yet made q's word a tombstone, q can be handed out
// again (the pool reuses the block, or places another one around q at
// another offset), freed, and handed out again; every one of those
// allocations frees with its size (and a wrong size is a size mismatch),
// the first free still succeeds, and at the end nothing is live in the
// adaptor or the pool and q's next free is a double free. So too when q's
// other slots are taken and the allocations in the window go to the
// table. The pool places blocks first fit from its chunk's start, so a
// block of 1024-off bytes ahead of a block of a's puts q off bytes after
// that block's start.
func TestAlignedSlotsFreeWindow(t *testing.T) {
	const size, align = 256, 1024 // a block of 1024 bytes a request
	cases := []struct {
		name string
		// offsets, before q, of the blocks of the allocations of q made
		// in the window; each is freed there, in order, but the last is
		// freed after the window if keep.
		offsets []int
		keep    bool
		full    bool // q's other slots taken in the window
	}{
		{"the same block", []int{256}, false, false},
		{"another offset", []int{512}, false, false},
		{"another offset, freed after", []int{512}, true, false},
		{"the same block, then another offset", []int{256, 512}, false, false},
		{"the same block, then another offset, freed after", []int{256, 512}, true, false},
		{"another offset, then the same block", []int{512, 256}, true, false},
		{"another offset, in the table", []int{512}, false, true},
		{"another offset, in the table, freed after", []int{512}, true, true},
		{"the same block, in the table", []int{256}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
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
			wp := &windowPool{Pool: pool}
			a, err := NewAligned(wp, align)
			if err != nil {
				t.Fatal(err)
			}
			// ahead fills the pool's chunk up to where the next block
			// of a goes, off bytes before q, and returns the fill's free.
			ahead := func(off int) func() {
				f, err := pool.Allocate(align-off, s)
				if err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := pool.Deallocate(f, align-off, s); err != nil {
						t.Fatal(err)
					}
				}
			}
			unfill := ahead(256)
			q, err := a.Allocate(size, s)
			if err != nil {
				t.Fatal(err)
			}
			unfill()
			var last gpu.DevicePtr
			wp.then = func() {
				// A live word of another address in each of q's other
				// slots (q's own is its home: the slots were empty).
				h := a.slots.home(q)
				var taken []*atomic.Uint64
				for i := uint64(1); c.full && i < alignedProbe; i++ {
					sl := &a.slots.w[(h+i)&(alignedSlotN-1)]
					if !sl.CompareAndSwap(0, uint64(q)+align) {
						t.Fatal("q's slots not empty")
					}
					taken = append(taken, sl)
				}
				for i, off := range c.offsets {
					unfill := ahead(off)
					p, err := a.Allocate(size, s)
					unfill()
					if err != nil {
						t.Fatal(err)
					}
					if p != q {
						t.Fatalf("allocation %d in the window at %#x, not q %#x: the pool placed it elsewhere", i, p, q)
					}
					if c.keep && i == len(c.offsets)-1 {
						last = p
						break
					}
					if err := a.Deallocate(p, size+1, s); !errors.Is(err, ErrSizeMismatch) {
						t.Errorf("free of allocation %d of q in the window with a wrong size: %v, want ErrSizeMismatch", i, err)
					}
					if err := a.Deallocate(p, size, s); err != nil {
						t.Errorf("free of allocation %d of q in the window (its block %d before q): %v", i, off, err)
					}
				}
				for _, sl := range taken {
					sl.Store(0)
				}
			}
			if err := a.Deallocate(q, size, s); err != nil {
				t.Fatalf("the free whose window it was: %v", err)
			}
			if wp.then != nil {
				t.Fatal("the window did not run")
			}
			if last != 0 {
				if got, want := a.String(), "aligned to 1.0 KiB: 1 allocation live"; got != want {
					t.Errorf("after the window: %s, want %s", got, want)
				}
				if err := a.Deallocate(last, size+1, s); !errors.Is(err, ErrSizeMismatch) {
					t.Errorf("free of the allocation of q kept after the window with a wrong size: %v, want ErrSizeMismatch", err)
				}
				if err := a.Deallocate(last, size, s); err != nil {
					t.Errorf("free of the allocation of q kept after the window: %v", err)
				}
			}
			if got, want := a.String(), "aligned to 1.0 KiB: 0 allocations live"; got != want {
				t.Errorf("%s, want %s", got, want)
			}
			if u := pool.Usage(); u.Used != 0 {
				t.Errorf("pool used %d after every free", u.Used)
			}
			if err := a.Deallocate(q, size, s); !errors.Is(err, ErrDoubleFree) {
				t.Errorf("free of q after every free: %v, want ErrDoubleFree", err)
			}
		})
	}
}
