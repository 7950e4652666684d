package mr

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestPoolBorrowsSmall: over a Grower, a stream that would grow a small
// chunk of its own takes a free block of another stream's small chunk,
// after its work is ordered after that stream's, up to poolBorrowMax
// times; over an upstream of fixed chunks it grows its own at once.
func TestPoolBorrowsSmall(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name    string
		grower  bool
		borrows uint64 // by the first request of the second stream
	}{
		{"over Virtual", true, 1},
		{"over Direct", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			d := dev.(*sim.Device)
			var up Resource = NewDirect(d)
			if tc.grower {
				v, err := NewVirtual(d, VirtualOptions{WaitForDecommits: true})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := v.Close(); err != nil {
						t.Error(err)
					}
				}()
				up = v
			}
			p, err := NewPool(up, PoolOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}()
			a, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Destroy()
			b, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Destroy()

			x, err := p.Allocate(4*KiB, a)
			if err != nil {
				t.Fatal(err)
			}
			// A live block keeps a's chunk from being idle (an idle one
			// would be released or stolen rather than shared).
			keep, err := p.Allocate(4*KiB, a)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Deallocate(keep, 4*KiB, a); err != nil {
					t.Error(err)
				}
			}()
			if u := p.Usage(); u.Reserved != 2*MiB {
				t.Fatalf("a's small chunk: reserved %d, want %d", u.Reserved, 2*MiB)
			}
			// a's work on x is still running when x is freed on a.
			release := d.Hold(a)
			defer release()
			if err := p.Deallocate(x, 4*KiB, a); err != nil {
				t.Fatal(err)
			}
			y, err := p.Allocate(4*KiB, b)
			if err != nil {
				t.Fatal(err)
			}
			st := p.Stats()
			if st.BorrowedSmall != tc.borrows {
				t.Fatalf("%d borrowed, want %d", st.BorrowedSmall, tc.borrows)
			}
			if !tc.grower {
				if u := p.Usage(); u.Reserved != 4*MiB || y == x {
					t.Fatalf("b's request at %#x (a's freed block %#x), reserved %d; want a chunk of its own, %d", uint64(y), uint64(x), u.Reserved, 4*MiB)
				}
				release()
				if err := p.Deallocate(y, 4*KiB, b); err != nil {
					t.Fatal(err)
				}
				return
			}
			if u := p.Usage(); u.Reserved != 2*MiB || u.Used != 8*KiB || y != x {
				t.Fatalf("b's request at %#x, reserved %d, used %d; want a's freed block %#x, %d, %d", uint64(y), u.Reserved, u.Used, uint64(x), 2*MiB, 8*KiB)
			}
			// b's work now follows a's, still held.
			if err := b.Query(); !errors.Is(err, gpu.ErrNotReady) {
				t.Fatalf("b while a is held: %v, want %v", err, gpu.ErrNotReady)
			}
			release()
			if err := b.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := p.Deallocate(y, 4*KiB, b); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.CrossStreamFrees != 1 {
				t.Fatalf("%d cross-stream frees, want 1 (b freed a block of a's chunk)", st.CrossStreamFrees)
			}
			// b borrows up to poolBorrowMax blocks, then grows its own
			// small chunk.
			for i := 1; i < poolBorrowMax; i++ {
				z, err := p.Allocate(4*KiB, b)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Deallocate(z, 4*KiB, b); err != nil {
					t.Fatal(err)
				}
			}
			if st, u := p.Stats(), p.Usage(); st.BorrowedSmall != poolBorrowMax || u.Reserved != 2*MiB {
				t.Fatalf("after %d requests of b: %d borrowed, reserved %d; want %d, %d", poolBorrowMax, st.BorrowedSmall, u.Reserved, poolBorrowMax, 2*MiB)
			}
			z, err := p.Allocate(4*KiB, b)
			if err != nil {
				t.Fatal(err)
			}
			if st, u := p.Stats(), p.Usage(); st.BorrowedSmall != poolBorrowMax || u.Reserved != 4*MiB {
				t.Fatalf("past the bound: %d borrowed, reserved %d; want %d, %d (a chunk of b's own)", st.BorrowedSmall, u.Reserved, poolBorrowMax, 4*MiB)
			}
			if err := p.Deallocate(z, 4*KiB, b); err != nil {
				t.Fatal(err)
			}
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Used != 4*KiB {
				t.Fatalf("after b's frees: used %d, want %d (a's block)", u.Used, 4*KiB)
			}
		})
	}
}
