package mr

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestPoolSmallAtPeak: with SmallAtPeak, over a Virtual that waits for
// decommits, a small request whose stream's small chunk is full, at the
// pool's high-water mark, takes the free end of the granule a large block
// pins instead of a new small chunk; below the mark, without the option,
// with PackHoles, or over a Virtual that refuses commits, it grows a
// small chunk as before.
func TestPoolSmallAtPeak(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name  string
		wait  bool
		opts  PoolOptions
		below bool // free the large block first: the growth raises no mark
		// After the small request: reserved bytes, requests served at the
		// peak, and whether the request lies right after the large block.
		reserved int
		atPeak   uint64
		inRun    bool
	}{
		{"at the mark", true, PoolOptions{SmallAtPeak: true}, false, 6 * MiB, 1, true},
		{"below the mark", true, PoolOptions{SmallAtPeak: true}, true, 4 * MiB, 0, false},
		{"off", true, PoolOptions{}, false, 8 * MiB, 0, false},
		{"PackHoles", true, PoolOptions{SmallAtPeak: true, PackHoles: true}, false, 8 * MiB, 0, false},
		{"refusing Virtual", false, PoolOptions{SmallAtPeak: true}, false, 8 * MiB, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			v, err := NewVirtual(dev, VirtualOptions{WaitForDecommits: tc.wait})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := v.Close(); err != nil {
					t.Error(err)
				}
			}()
			p, err := NewPool(v, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}()
			s, err := dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			alloc := func(n int) gpu.DevicePtr {
				t.Helper()
				ptr, err := p.Allocate(n, s)
				if err != nil {
					t.Fatal(err)
				}
				return ptr
			}
			// Eight blocks of the largest small class fill one small chunk.
			var small []gpu.DevicePtr
			for range poolSmallChunk / poolSmallMax {
				small = append(small, alloc(poolSmallMax))
			}
			big := alloc(3 * MiB) // two granules: 1 MiB free after it
			if u := p.Usage(); u.Reserved != 6*MiB || u.PeakReserved != 6*MiB {
				t.Fatalf("a full small chunk and a 3 MiB block: %+v, want 6 MiB reserved at the peak", u)
			}
			if tc.below {
				if err := p.Deallocate(big, 3*MiB, s); err != nil {
					t.Fatal(err)
				}
			}
			x := alloc(64 * KiB)
			u, st := p.Usage(), p.Stats()
			if int(u.Reserved) != tc.reserved || st.SmallAtPeak != tc.atPeak || (x == big+3*MiB) != tc.inRun {
				t.Fatalf("the small request at %#x (large block %#x): reserved %d, %d served at the peak; want %d, %d, in the run %v",
					uint64(x), uint64(big), u.Reserved, st.SmallAtPeak, tc.reserved, tc.atPeak, tc.inRun)
			}
			// Freed, the block goes back to the free bytes it came from.
			if err := p.Deallocate(x, 64*KiB, s); err != nil {
				t.Fatal(err)
			}
			if !tc.below {
				if err := p.Deallocate(big, 3*MiB, s); err != nil {
					t.Fatal(err)
				}
			}
			for _, ptr := range small {
				if err := p.Deallocate(ptr, poolSmallMax, s); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
				t.Fatalf("after every free and a release: %+v", u)
			}
		})
	}
}
