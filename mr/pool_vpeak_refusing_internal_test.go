package mr

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestPoolSmallAtPeakRefusing: with SmallAtPeak, over a Virtual that refuses
// commits at addresses being decommitted, a small request whose stream's
// small chunk is full, while the pool maps its high-water mark, takes the
// free end of the granule a large block leaves instead of a new small
// chunk, before the release that would give memory back for that chunk;
// below the mark or without the option it grows a small chunk as before.
// (Over a Virtual that waits for decommits: TestPoolSmallAtPeak.)
func TestPoolSmallAtPeakRefusing(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name  string
		wait  bool
		opts  PoolOptions
		below bool // a larger peak first, then a release: the growth raises no mark
		// After the small request: reserved bytes, requests served in
		// the ranges, and whether the request lies right after the
		// large block.
		reserved int
		inRanges uint64
		inRun    bool
	}{
		{"at the mark", false, PoolOptions{SmallAtPeak: true}, false, 6 * MiB, 1, true},
		{"at the mark with MappedSlack", false, PoolOptions{SmallAtPeak: true, MappedSlack: 0.01}, false, 6 * MiB, 1, true},
		{"below the mark", false, PoolOptions{SmallAtPeak: true}, true, 8 * MiB, 0, false},
		{"off", false, PoolOptions{}, false, 8 * MiB, 0, false},
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
			free := func(ptr gpu.DevicePtr, n int) {
				t.Helper()
				if err := p.Deallocate(ptr, n, s); err != nil {
					t.Fatal(err)
				}
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
				// A peak of 10 MiB, then the 4 MiB block's granules
				// given back: 4 MiB under the mark.
				more := alloc(4 * MiB)
				free(more, 4*MiB)
				if err := p.Release(); err != nil {
					t.Fatal(err)
				}
				if u := p.Usage(); u.Reserved != 6*MiB || u.PeakReserved != 10*MiB {
					t.Fatalf("after a 10 MiB peak and a release: %+v, want 6 MiB reserved", u)
				}
			}
			x := alloc(64 * KiB)
			u, st := p.Usage(), p.Stats()
			if int(u.Reserved) != tc.reserved || st.SmallAtPeak != tc.inRanges || (x == big+3*MiB) != tc.inRun {
				t.Fatalf("the small request at %#x (large block %#x): reserved %d, %d served in the ranges; want %d, %d, in the run %v",
					uint64(x), uint64(big), u.Reserved, st.SmallAtPeak, tc.reserved, tc.inRanges, tc.inRun)
			}
			if st.Decommits != 0 && !tc.below {
				t.Errorf("%d decommits for a small request", st.Decommits)
			}
			// Freed, the block goes back to the free bytes it came from.
			free(x, 64*KiB)
			free(big, 3*MiB)
			for _, ptr := range small {
				free(ptr, poolSmallMax)
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
