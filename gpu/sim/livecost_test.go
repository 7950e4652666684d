package sim

import (
	"testing"
)

// Many small live allocations cost the simulator O(1) each: the address
// index keeps at most 256 segments in a granule (64 KiB of 256-byte
// allocations), so indexing one copies at most that many pointers (2 MiB
// granules held 8192, and each of a million cuMemAlloc calls copied
// thousands). (A driver pool's allocation likewise visits only the free
// blocks kept apart from a free neighbour, settleLocked; FuzzPoolModel
// checks that every such block is noted.)
func TestLargeLiveSetCosts(t *testing.T) {
	dev, err := New(Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*Device)
	const n = 20_000
	for range n {
		if _, err := d.Malloc(256); err != nil {
			t.Fatal(err)
		}
	}
	most := 0
	for i := range d.segs.regions {
		node := d.segs.regions[i].Load()
		if node == nil {
			continue
		}
		for j := range node {
			if g := node[j].Load(); g != nil {
				most = max(most, len(g.segs))
			}
		}
	}
	if most > 256 {
		t.Errorf("a granule lists %d segments, want at most 256", most)
	}
}
