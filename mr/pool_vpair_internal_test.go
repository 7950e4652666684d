package mr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestPoolHolesKeepPair: over a Virtual that waits for decommits, with
// PackHoles and HolesKeepPair, the block a stream handed out last stays
// whole in the quick cache when it is freed, and the next request of its
// size takes it back from there (a quick hit, at the same address); a
// block freed out of that order is filed free, as with PackHoles alone.
// With PackHoles alone both are filed free and the request is served
// from the tlsf; without PackHoles both are cached. Above 1 MiB the
// quick cache takes the freed block; up to it the fast slot does
// (pool_fast.go), and the lock that settles the slot files the block as
// quickPut does.
func TestPoolHolesKeepPair(t *testing.T) {
	const MiB = 1 << 20
	for _, size := range []int{MiB / 2, MiB + MiB/2} {
		for _, tc := range []struct {
			name        string
			opts        PoolOptions
			last, other BlockState // the freed last block, then an older one
			hits        uint64     // quick hits of the pair's second request
		}{
			{"PackHoles and HolesKeepPair", PoolOptions{PackHoles: true, HolesKeepPair: true}, BlockCached, BlockFree, 1},
			{"with SmallAtPeak", PoolOptions{PackHoles: true, HolesKeepPair: true, SmallAtPeak: true}, BlockCached, BlockFree, 1},
			{"PackHoles alone", PoolOptions{PackHoles: true}, BlockFree, BlockFree, 0},
			{"default", PoolOptions{}, BlockCached, BlockCached, 1},
		} {
			t.Run(fmt.Sprintf("size=%dKiB/%s", size>>10, tc.name), func(t *testing.T) {
				v, p, s := poolOverVirtualOpts(t, true, tc.opts)
				defer v.Close()
				defer p.Close()
				defer s.Destroy()
				alloc := func() gpu.DevicePtr {
					t.Helper()
					ptr, err := p.Allocate(size, s)
					if err != nil {
						t.Fatal(err)
					}
					return ptr
				}
				free := func(ptr gpu.DevicePtr) {
					t.Helper()
					if err := p.Deallocate(ptr, size, s); err != nil {
						t.Fatal(err)
					}
				}
				a, b := alloc(), alloc()
				free(b) // the block handed out last: a pair's
				if st := stateAt(p.Layout(), b); st != tc.last {
					t.Errorf("the last block freed: %v, want %v", st, tc.last)
				}
				hits := p.Stats().QuickHits
				if x := alloc(); x != b {
					t.Errorf("the pair's second request at %#x, want the freed block's %#x", uint64(x), uint64(b))
				}
				if got := p.Stats().QuickHits - hits; got != tc.hits {
					t.Errorf("%d quick hits for the pair's second request, want %d", got, tc.hits)
				}
				free(a) // not the block handed out last
				if st := stateAt(p.Layout(), a); st != tc.other {
					t.Errorf("an older block freed: %v, want %v", st, tc.other)
				}
				if err := p.checkInvariants(); err != nil {
					t.Fatal(err)
				}
				free(b)
				if err := p.checkInvariants(); err != nil {
					t.Fatal(err)
				}
				if u := p.Usage(); u.Used != 0 {
					t.Errorf("after every free: %d bytes used, want 0", u.Used)
				}
			})
		}
	}
}

// TestPoolHolesKeepPairNeedsPackHoles: HolesKeepPair refines PackHoles and
// means nothing without it: NewPool refuses it alone, and makes no pool.
func TestPoolHolesKeepPairNeedsPackHoles(t *testing.T) {
	v, p, s := poolOverVirtualOpts(t, true, PoolOptions{})
	defer v.Close()
	defer p.Close()
	defer s.Destroy()
	bad, err := NewPool(v, PoolOptions{HolesKeepPair: true})
	const want = "pool: HolesKeepPair without PackHoles: CUDA_ERROR_INVALID_VALUE"
	if !errors.Is(err, gpu.ErrInvalidValue) || err.Error() != want || bad != nil {
		t.Fatalf("NewPool with HolesKeepPair alone: %v, %v; want nil, %q", bad, err, want)
	}
}
