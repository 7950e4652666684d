package mr

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestPoolHoleIn: where a piece fills the room a pinning neighbour
// leaves in a free block, for free blocks around granule boundaries and
// neighbours of every state.
func TestPoolHoleIn(t *testing.T) {
	const MiB = 1 << 20
	const gran = 2 * MiB
	const base = gpu.DevicePtr(1 << 32)
	for _, tc := range []struct {
		name       string
		prev, next poolBlockState // the neighbours' states; blockUnmapped also for none
		none       bool           // no neighbours at all
		lo, size   int            // the free block, from base
		req        int
		at         int // from base; -1: no hole
	}{
		{"head after a live block", blockLive, blockUnmapped, false, MiB + MiB/2, 4 * MiB, MiB / 2, MiB + MiB/2},
		{"head after a pending block", blockPending, blockLive, false, MiB + MiB/2, 4 * MiB, MiB / 2, MiB + MiB/2},
		{"head after a cached block", blockCached, blockUnmapped, false, MiB + MiB/2, 4 * MiB, MiB / 2, MiB + MiB/2},
		{"head room larger than the request", blockLive, blockUnmapped, false, MiB, 4 * MiB, MiB / 2, -1},
		{"head room smaller than the request", blockLive, blockUnmapped, false, MiB + MiB/2, 4 * MiB, MiB, -1},
		{"block on a granule boundary", blockLive, blockUnmapped, false, 2 * MiB, 4 * MiB, MiB / 2, -1},
		{"head after unmapped space", blockUnmapped, blockUnmapped, false, 2 * MiB, MiB, MiB, -1},
		{"whole block between live ones", blockLive, blockLive, false, MiB / 2, MiB, MiB, MiB / 2},
		{"tail before a live block", blockUnmapped, blockLive, false, 2 * MiB, 2*MiB + MiB/4, MiB / 4, 4 * MiB},
		{"tail before a pending block", blockUnmapped, blockPending, false, 2 * MiB, 2*MiB + MiB/4, MiB / 4, 4 * MiB},
		{"tail room larger than the request", blockUnmapped, blockLive, false, 2 * MiB, 2*MiB + MiB/2, MiB / 4, -1},
		{"tail on a granule boundary", blockUnmapped, blockLive, false, 2 * MiB, 2 * MiB, MiB / 4, -1},
		{"head taken before tail", blockLive, blockLive, false, MiB + MiB/2, 3 * MiB, MiB / 2, MiB + MiB/2},
		{"tail when the head does not fit", blockLive, blockLive, false, MiB, 3*MiB + MiB/2, MiB / 2, 4 * MiB},
		{"no neighbours", 0, 0, true, MiB / 2, MiB, MiB, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &poolChunk{base: base, limit: 1 << 30}
			b := &poolBlock{ptr: base + gpu.DevicePtr(tc.lo), size: tc.size, c: c, state: blockFree}
			if !tc.none {
				b.prev = &poolBlock{ptr: base, size: tc.lo, c: c, state: tc.prev}
				b.next = &poolBlock{ptr: b.end(), size: gran, c: c, state: tc.next}
			}
			at, ok := holeIn(b, tc.req, gran)
			if tc.at < 0 {
				if ok {
					t.Errorf("holeIn = %#x, true; want no hole", uint64(at-base))
				}
				return
			}
			if !ok || at != base+gpu.DevicePtr(tc.at) {
				t.Errorf("holeIn = %#x, %v; want %#x, true", uint64(at-base), ok, tc.at)
			}
		})
	}
}

// TestPoolFillsHoles: over a Virtual that waits for decommits (the pool
// places by lifetime), a request smaller than a granule takes the free
// room a live block leaves in its granule when the request fills it
// exactly, where the tlsf's fit would take another free block; a request
// that fills no room exactly, or of a granule, takes the fit; freed
// blocks of the growable chunk are filed free at once, not cached: all
// with PoolOptions.PackHoles. Without the option, or over a Virtual that
// refuses commits (no lifetime placement), the quick cache keeps a freed
// block whole and the fit is taken.
func TestPoolFillsHoles(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name  string
		wait  bool
		holes bool // PoolOptions.PackHoles
		req   int
		at    int // the block's offset from the chunk's base
		state BlockState
	}{
		// The layout before the request, from the base: a [0, 1.5 MiB),
		// free [1.5, 6) (b freed), c [6, 7), free [7, 7.75) (d freed),
		// e [7.75, 9), free [9, 10).
		{"fills the room after a", true, true, MiB / 2, MiB + MiB/2, BlockFree},
		{"no exact room: the fit", true, true, MiB/2 + MiB/8, 7 * MiB, BlockFree},
		{"a granule: the fit", true, true, 2 * MiB, MiB + MiB/2, BlockFree},
		{"refusing Virtual: cached, the fit", false, true, MiB / 2, 7 * MiB, BlockCached},
		{"default: cached, the fit", true, false, MiB / 2, 7 * MiB, BlockCached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, p, s := poolOverVirtualOpts(t, tc.wait, PoolOptions{PackHoles: tc.holes})
			defer v.Close()
			defer p.Close()
			defer s.Destroy()
			sizes := []int{MiB + MiB/2, 4*MiB + MiB/2, MiB, MiB - MiB/4, MiB + MiB/4}
			var ptrs []gpu.DevicePtr
			for _, n := range sizes {
				ptr, err := p.Allocate(n, s)
				if err != nil {
					t.Fatal(err)
				}
				ptrs = append(ptrs, ptr)
			}
			base := ptrs[0]
			for i, want := range []int{0, MiB + MiB/2, 6 * MiB, 7 * MiB, 7*MiB + 3*MiB/4} {
				if got := int(ptrs[i] - base); got != want {
					t.Fatalf("setup: block %d at %#x, want %#x", i, got, want)
				}
			}
			for _, i := range []int{1, 3} {
				if err := p.Deallocate(ptrs[i], sizes[i], s); err != nil {
					t.Fatal(err)
				}
			}
			l := p.Layout()
			for _, i := range []int{1, 3} {
				if st := stateAt(l, ptrs[i]); st != tc.state {
					t.Errorf("freed block %d is %v, want %v", i, st, tc.state)
				}
			}
			ptr, err := p.Allocate(tc.req, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := int(ptr - base); got != tc.at {
				t.Errorf("request of %d bytes at %#x, want %#x", tc.req, got, tc.at)
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if err := p.Deallocate(ptr, tc.req, s); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{0, 2, 4} {
				if err := p.Deallocate(ptrs[i], sizes[i], s); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Used != 0 {
				t.Errorf("after every free: %d bytes used, want 0", u.Used)
			}
		})
	}
}

// stateAt returns the state of the block of l that starts at ptr.
func stateAt(l PoolLayout, ptr gpu.DevicePtr) BlockState {
	for _, c := range l.Chunks {
		for _, b := range c.Blocks {
			if b.Ptr == ptr {
				return b.State
			}
		}
	}
	return BlockState(255)
}

// TestPoolForgetHoles: a chunk that leaves a stream takes the names of
// its blocks out of the stream's ring of holes, and only those.
func TestPoolForgetHoles(t *testing.T) {
	c1, c2 := &poolChunk{limit: 1 << 30}, &poolChunk{limit: 1 << 30}
	var st poolStream
	var bs []*poolBlock
	for i := range 5 {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		b := &poolBlock{c: c}
		bs = append(bs, b)
		st.noteHole(b)
	}
	st.noteHole(bs[4]) // the newest again: not filed twice
	if st.holesPos != 5 {
		t.Fatalf("%d names filed, want 5", st.holesPos)
	}
	st.forgetHoles(c1)
	for i, b := range bs {
		in := false
		for _, h := range st.holes {
			in = in || h == b
		}
		if want := b.c == c2; in != want {
			t.Errorf("block %d (chunk %d) in the ring: %v, want %v", i, 1+i%2, in, want)
		}
	}
}
