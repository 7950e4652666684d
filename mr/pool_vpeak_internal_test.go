package mr

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestPoolSmallAtPeak: with SmallAtPeak, over a Virtual that waits for
// decommits (after the release before the growth) and over one that
// refuses commits at addresses being decommitted (before that release), a
// small request whose stream's small chunk is full, at the pool's
// high-water mark, takes the free end of the granule a large block pins
// instead of a new small chunk, with no decommit; below the mark, without
// the option, or with PackHoles (unless HolesKeepPair is set too), it
// grows a small chunk as before.
func TestPoolSmallAtPeak(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	const (
		atMark   = iota
		freeBig  // the large block freed first: the growth raises no mark
		pastPeak // a 10 MiB peak, then a release: 4 MiB under the mark
	)
	for _, tc := range []struct {
		name  string
		wait  bool
		opts  PoolOptions
		setup int
		// After the small request: reserved bytes, requests served at the
		// peak, and whether the request lies right after the large block.
		reserved int
		atPeak   uint64
		inRun    bool
	}{
		{"waiting/at the mark", true, PoolOptions{SmallAtPeak: true}, atMark, 6 * MiB, 1, true},
		{"waiting/below the mark", true, PoolOptions{SmallAtPeak: true}, freeBig, 4 * MiB, 0, false},
		{"waiting/off", true, PoolOptions{}, atMark, 8 * MiB, 0, false},
		{"waiting/PackHoles", true, PoolOptions{SmallAtPeak: true, PackHoles: true}, atMark, 8 * MiB, 0, false},
		{"waiting/PackHoles with HolesKeepPair", true, PoolOptions{SmallAtPeak: true, PackHoles: true, HolesKeepPair: true}, atMark, 6 * MiB, 1, true},
		{"refusing/at the mark", false, PoolOptions{SmallAtPeak: true}, atMark, 6 * MiB, 1, true},
		{"refusing/at the mark with MappedSlack", false, PoolOptions{SmallAtPeak: true, MappedSlack: 0.01}, atMark, 6 * MiB, 1, true},
		{"refusing/below the mark", false, PoolOptions{SmallAtPeak: true}, pastPeak, 8 * MiB, 0, false},
		{"refusing/off", false, PoolOptions{}, atMark, 8 * MiB, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s, alloc, free := newPeakPool(t, tc.wait, tc.opts)
			// Eight blocks of the largest small class fill one small chunk.
			var small []gpu.DevicePtr
			for range poolSmallChunk / poolSmallMax {
				small = append(small, alloc(poolSmallMax))
			}
			big := alloc(3 * MiB) // two granules: 1 MiB free after it
			if u := p.Usage(); u.Reserved != 6*MiB || u.PeakReserved != 6*MiB {
				t.Fatalf("a full small chunk and a 3 MiB block: %+v, want 6 MiB reserved at the peak", u)
			}
			switch tc.setup {
			case freeBig:
				free(big, 3*MiB)
			case pastPeak:
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
			if int(u.Reserved) != tc.reserved || st.SmallAtPeak != tc.atPeak || (x == big+3*MiB) != tc.inRun {
				t.Fatalf("the small request at %#x (large block %#x): reserved %d, %d served at the peak; want %d, %d, in the run %v",
					uint64(x), uint64(big), u.Reserved, st.SmallAtPeak, tc.reserved, tc.atPeak, tc.inRun)
			}
			if st.Decommits != 0 && tc.setup == atMark {
				t.Errorf("%d decommits for a small request", st.Decommits)
			}
			// Freed, the block goes back to the free bytes it came from.
			free(x, 64*KiB)
			if tc.setup != freeBig {
				free(big, 3*MiB)
			}
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

// TestPoolSmallAtPeakPlacement: with SmallAtPeak over a Virtual that
// waits for decommits, the small request at the high-water mark takes the
// smallest free piece of its stream's growable chunk, from its start,
// where a larger one would hold it too; and a small request whose growth
// stays under the mark grows a small chunk although mapped free room is
// left in the growable chunk (the release before the growth decommitted
// enough of it).
func TestPoolSmallAtPeakPlacement(t *testing.T) {
	const KiB, MiB = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name string
		// setup makes the pool's state after a full small chunk and
		// returns the address the small request must get (0: not in
		// the growable chunk) and the pointers it left live.
		setup func(alloc func(int) gpu.DevicePtr, free func(gpu.DevicePtr, int)) (want gpu.DevicePtr, live map[gpu.DevicePtr]int)
		// After the small request: reserved bytes, the peak, requests
		// served at the peak.
		reserved, peak int
		atPeak         uint64
	}{
		{"the smallest piece", func(alloc func(int) gpu.DevicePtr, free func(gpu.DevicePtr, int)) (gpu.DevicePtr, map[gpu.DevicePtr]int) {
			// Two granules: x1 and x2 fill the first, x3 and x4
			// the second; freed, x1 leaves 1.5 MiB and x4 512 KiB
			// free, each in a granule a live block keeps mapped.
			x1 := alloc(3 * MiB / 2)
			x2 := alloc(MiB / 2)
			x3 := alloc(3 * MiB / 2)
			x4 := alloc(MiB / 2)
			free(x1, 3*MiB/2)
			free(x4, MiB/2)
			return x4, map[gpu.DevicePtr]int{x2: MiB / 2, x3: 3 * MiB / 2}
		}, 6 * MiB, 6 * MiB, 1},
		{"below the mark with mapped room", func(alloc func(int) gpu.DevicePtr, free func(gpu.DevicePtr, int)) (gpu.DevicePtr, map[gpu.DevicePtr]int) {
			// A peak of 10 MiB, then 5 MiB free after a 3 MiB block:
			// the release before the small growth decommits the two
			// whole free granules, the growth stays under the peak,
			// and the 1 MiB after the block stays mapped and free.
			big := alloc(3 * MiB)
			y := alloc(4 * MiB)
			free(y, 4*MiB)
			return 0, map[gpu.DevicePtr]int{big: 3 * MiB}
		}, 8 * MiB, 10 * MiB, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s, alloc, free := newPeakPool(t, true, PoolOptions{SmallAtPeak: true})
			small := map[gpu.DevicePtr]bool{}
			for range poolSmallChunk / poolSmallMax {
				small[alloc(poolSmallMax)] = true
			}
			want, live := tc.setup(alloc, free)
			x := alloc(64 * KiB)
			u, st := p.Usage(), p.Stats()
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			c, _, ok := p.chunks.find(x)
			inChunk := ok && c.limit > 0
			if int(u.Reserved) != tc.reserved || int(u.PeakReserved) != tc.peak || st.SmallAtPeak != tc.atPeak ||
				(want != 0 && x != want) || (want == 0) == inChunk {
				t.Fatalf("the small request at %#x (want %#x, in a growable chunk %v): reserved %d, peak %d, %d served at the peak; want %d, %d, %d",
					uint64(x), uint64(want), inChunk, u.Reserved, u.PeakReserved, st.SmallAtPeak, tc.reserved, tc.peak, tc.atPeak)
			}
			free(x, 64*KiB)
			for ptr, n := range live {
				free(ptr, n)
			}
			for ptr := range small {
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

// newPeakPool is a Pool with opts over a Virtual on a simulated device
// (waiting for decommits or refusing commits at their addresses), a
// stream, and allocate and free on it that fail the test on an error;
// the pool and the Virtual are closed when the test ends.
func newPeakPool(t *testing.T, wait bool, opts PoolOptions) (*Pool, gpu.Stream, func(int) gpu.DevicePtr, func(gpu.DevicePtr, int)) {
	t.Helper()
	dev, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVirtual(dev, VirtualOptions{WaitForDecommits: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	p, err := NewPool(v, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
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
	return p, s, alloc, free
}
