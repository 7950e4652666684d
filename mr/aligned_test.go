package mr_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

func TestAlignedAlignments(t *testing.T) {
	up := newRecording()
	s := up.stream()
	a, err := mr.NewAligned(up, 4096)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		align, size int
		wantUpSize  int
	}{
		{1, 100, 100},
		{256, 100, 100},
		{512, 100, 356},
		{4096, 1, 3841},
		{1 << 20, 5000, 5000 + 1<<20 - 256},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d/%d", tc.align, tc.size), func(t *testing.T) {
			// Misalign the upstream's next block so alignment has work to do.
			if _, err := up.Allocate(256, s); err != nil {
				t.Fatal(err)
			}
			n := up.numCalls()
			p, err := a.AllocateAligned(tc.size, tc.align, s)
			if err != nil {
				t.Fatal(err)
			}
			want := max(tc.align, mr.Alignment)
			if int(p)%want != 0 {
				t.Fatalf("%#x not aligned to %d", p, want)
			}
			c := up.Calls()[n]
			if c.Size != tc.wantUpSize || p < c.Ptr || int(p-c.Ptr)+tc.size > c.Size {
				t.Fatalf("upstream block %#x+%d does not hold %#x+%d", c.Ptr, c.Size, p, tc.size)
			}
			if err := a.Deallocate(p, tc.size, s); err != nil {
				t.Fatal(err)
			}
			f := up.Calls()[n+1]
			if f.Op != "deallocate" || f.Ptr != c.Ptr || f.Size != c.Size || f.Err != nil {
				t.Fatalf("upstream free %+v, want the block %#x+%d", f, c.Ptr, c.Size)
			}
		})
	}
	// Allocate uses the adaptor's alignment.
	p, err := a.Allocate(10, s)
	if err != nil || p%4096 != 0 || a.Alignment() != 4096 {
		t.Fatalf("Allocate = %#x, %v", p, err)
	}
	a.Deallocate(p, 10, s)
}

func TestAlignedBadAlignment(t *testing.T) {
	up := newRecording()
	s := up.stream()
	a, _ := mr.NewAligned(up, 512)
	for _, al := range []int{0, -256, 3, 768, mr.MaxAlignment * 2, 1 << 62} {
		_, err := mr.NewAligned(up, al)
		var ae *mr.AlignmentError
		if !errors.Is(err, mr.ErrInvalidAlignment) || !errors.As(err, &ae) || ae.Alignment != al {
			t.Errorf("NewAligned(%d) = %v", al, err)
		}
		if _, err := a.AllocateAligned(64, al, s); !errors.Is(err, mr.ErrInvalidAlignment) {
			t.Errorf("AllocateAligned(64, %d) = %v", al, err)
		}
	}
	if up.numCalls() != 0 {
		t.Fatal("bad alignments reached the upstream")
	}
	// A size whose padding overflows is out of memory, not a panic.
	if _, err := a.AllocateAligned(int(^uint(0)>>1), 1<<20, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("huge aligned request: %v", err)
	}
	if up.numCalls() != 0 {
		t.Fatal("an impossible request reached the upstream")
	}
}

// TestAlignedOverPool: over a pool, which checks owners, Aligned keeps its
// allocations in lock-free slots (aligned_slots.go), and every bad free is
// still refused with its exact error, changing neither the adaptor nor the
// pool; memory handed out around the adaptor, or by another Aligned over
// the same pool, is an unknown pointer to it.
func TestAlignedOverPool(t *testing.T) {
	pool, s := newOwnedPool(t)
	a, err := mr.NewAligned(pool, 4096)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := mr.NewAligned(pool, 4096)
	// An address a freed before and does not hold now is a double free to
	// it, as with a pointer table's memory of frees; any other is unknown.
	freedByA := map[gpu.DevicePtr]bool{}
	notLive := func(q gpu.DevicePtr) error {
		if freedByA[q] {
			return mr.ErrDoubleFree
		}
		return mr.ErrUnknownPointer
	}
	for round := range 3 { // later rounds get the pool's fast slot's block
		p, err := a.Allocate(1000, s)
		if err != nil {
			t.Fatal(err)
		}
		if p%4096 != 0 {
			t.Fatalf("%#x not aligned to 4096", p)
		}
		around, err := pool.Allocate(1000, s)
		if err != nil {
			t.Fatal(err)
		}
		others, err := other.Allocate(1000, s)
		if err != nil {
			t.Fatal(err)
		}
		before, usage := a.String(), pool.Usage()
		bad := []struct {
			name string
			op   func() error
			want error
		}{
			{"unknown pointer", func() error { return a.Deallocate(p+1<<30, 1000, s) }, mr.ErrUnknownPointer},
			{"the pool's own allocation", func() error { return a.Deallocate(around, 1000, s) }, notLive(around)},
			{"another adaptor's allocation", func() error { return a.Deallocate(others, 1000, s) }, notLive(others)},
			{"inside allocation", func() error { return a.Deallocate(p+256, 1000, s) }, notLive(p + 256)},
			{"wrong size", func() error { return a.Deallocate(p, 999, s) }, mr.ErrSizeMismatch},
			{"huge size", func() error { return a.Deallocate(p, int(^uint(0)>>1), s) }, mr.ErrSizeMismatch},
			{"negative size", func() error { return a.Deallocate(p, -1, s) }, mr.ErrInvalidSize},
			{"nil stream", func() error { return a.Deallocate(p, 1000, nil) }, gpu.ErrInvalidHandle},
			{"null with size", func() error { return a.Deallocate(0, 8, s) }, mr.ErrSizeMismatch},
			// The stream is checked before the size, here too.
			{"nil stream and huge size", func() error { return a.Deallocate(p, int(^uint(0)>>1), nil) }, gpu.ErrInvalidHandle},
			{"nil stream and negative size", func() error { return a.Deallocate(p, -1, nil) }, gpu.ErrInvalidHandle},
			{"allocate negative", func() error { _, err := a.Allocate(-1, s); return err }, mr.ErrInvalidSize},
			{"allocate nil stream", func() error { _, err := a.Allocate(8, nil); return err }, gpu.ErrInvalidHandle},
			{"allocate nil stream and negative size", func() error { _, err := a.Allocate(-1, nil); return err }, gpu.ErrInvalidHandle},
		}
		if q, err := a.Allocate(0, s); q != 0 || err != nil {
			t.Errorf("round %d: Allocate(0) = %#x, %v", round, q, err)
		}
		for _, b := range bad {
			if err := b.op(); !errors.Is(err, b.want) {
				t.Errorf("round %d, %s: got %v, want %v", round, b.name, err, b.want)
			}
			if got := a.String(); got != before {
				t.Errorf("round %d, %s changed the adaptor: %s, was %s", round, b.name, got, before)
			}
			if got := pool.Usage(); got != usage {
				t.Errorf("round %d, %s changed the pool: %+v, was %+v", round, b.name, got, usage)
			}
		}
		if err := a.Deallocate(p, 1000, s); err != nil {
			t.Fatal(err)
		}
		freedByA[p] = true
		if err := a.Deallocate(p, 1000, s); !errors.Is(err, mr.ErrDoubleFree) {
			t.Errorf("round %d: double free: got %v, want ErrDoubleFree", round, err)
		}
		if err := other.Deallocate(others, 1000, s); err != nil {
			t.Errorf("the other adaptor's free: %v", err)
		}
		if err := pool.Deallocate(around, 1000, s); err != nil {
			t.Errorf("the pool's own free: %v", err)
		}
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("used %d after every free", u.Used)
	}
}

// TestAlignedOverPoolMany: more live allocations than the slots hold, at
// the adaptor's alignment and at others, all aligned, all freed exactly
// once in another order, leave nothing live in the adaptor or the pool.
func TestAlignedOverPoolMany(t *testing.T) {
	pool, s := newOwnedPool(t)
	a, err := mr.NewAligned(pool, 4096)
	if err != nil {
		t.Fatal(err)
	}
	type alloc struct {
		p           gpu.DevicePtr
		size, align int
	}
	var live []alloc
	for i := range 2500 {
		size, align := 256*(1+i%13), 4096
		if i%5 == 0 {
			align = 1 << (8 + i%9) // 256 B to 64 KiB
		}
		p, err := a.AllocateAligned(size, align, s)
		if err != nil {
			t.Fatal(err)
		}
		if int(p)%max(align, mr.Alignment) != 0 {
			t.Fatalf("%#x not aligned to %d", p, align)
		}
		live = append(live, alloc{p, size, align})
	}
	if want := "aligned to 4.0 KiB: 2500 allocations live"; a.String() != want {
		t.Errorf("%s, want %s", a.String(), want)
	}
	for i := range live { // a fixed shuffle
		j := (i * 7919) % len(live)
		live[i], live[j] = live[j], live[i]
	}
	for _, l := range live {
		if err := a.Deallocate(l.p, l.size, s); err != nil {
			t.Fatalf("free %#x (%d bytes at %d): %v", l.p, l.size, l.align, err)
		}
	}
	for _, l := range live[:20] {
		if err := a.Deallocate(l.p, l.size, s); !errors.Is(err, mr.ErrDoubleFree) && !errors.Is(err, mr.ErrUnknownPointer) {
			t.Errorf("second free of %#x: %v", l.p, err)
		}
	}
	if want := "aligned to 4.0 KiB: 0 allocations live"; a.String() != want {
		t.Errorf("%s, want %s", a.String(), want)
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool used %d after every free", u.Used)
	}
}

// TestAlignedOverPoolRacingFrees: of two frees of one allocation racing,
// exactly one succeeds and the other is refused as a double free or an
// unknown pointer, while other goroutines allocate and free beside them
// (on another stream, with a block of the first stream's chunk kept live
// so that the chunk never goes idle to the other stream: the pool does not
// hand the address out again between the two frees, which would make the
// second free that new allocation's, as with a pointer table).
func TestAlignedOverPoolRacingFrees(t *testing.T) {
	pool, s := newOwnedPool(t)
	a, err := mr.NewAligned(pool, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := pool.Device().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s2.Synchronize(); s2.Destroy() }()
	pin, err := a.Allocate(100, s)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for range 2 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := a.Allocate(3000, s2)
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Deallocate(p, 3000, s2); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < 300 && !t.Failed(); i++ {
		p, err := a.Allocate(1000, s)
		if err != nil {
			t.Error(err)
			break
		}
		var errs [2]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = a.Deallocate(p, 1000, s) }()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, mr.ErrDoubleFree) && !errors.Is(err, mr.ErrUnknownPointer):
				t.Errorf("racing free: %v", err)
			}
		}
		if ok != 1 {
			t.Errorf("%d of two racing frees succeeded: %v", ok, errs)
		}
	}
	close(stop)
	bg.Wait()
	if err := a.Deallocate(pin, 100, s); err != nil {
		t.Error(err)
	}
	if u := pool.Usage(); u.Used != 0 {
		t.Errorf("pool used %d after every free", u.Used)
	}
}
