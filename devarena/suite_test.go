package devarena

// The behaviour tests, written against gpu.Device so that the same code
// runs on the simulator and on a GPU (arena_test.go chooses).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

func newStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatalf("new stream: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Synchronize(); err != nil {
			t.Errorf("synchronize stream: %v", err)
		}
		if err := s.Destroy(); err != nil {
			t.Errorf("destroy stream: %v", err)
		}
	})
	return s
}

func loadKernels(t *testing.T, dev gpu.Device) *Kernels {
	t.Helper()
	k, err := LoadKernels(dev)
	if err != nil {
		t.Fatalf("load kernels: %v", err)
	}
	return k
}

func newArena(t *testing.T, g *guarded, s gpu.Stream, cfg Config) *Arena {
	t.Helper()
	a, err := New(g, s, cfg)
	if err != nil {
		t.Fatalf("new arena %+v: %v", cfg, err)
	}
	return a
}

func closeArena(t *testing.T, g *guarded, a *Arena) {
	t.Helper()
	if err := a.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := a.Stream().Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n := g.liveBlocks(); n != 0 {
		t.Fatalf("%d blocks still live after Close", n)
	}
}

// testLayout: the header the device holds after New is the documented
// struct, and the region is aligned and inside the block for every
// alignment.
func testLayout(t *testing.T, dev gpu.Device) {
	s := newStream(t, dev)
	g := newGuarded(dev)
	for _, tc := range []struct{ size, align, wantAlign int }{
		{1, 0, DefaultAlign},
		{1000, 8, 8},
		{4096, 256, 256},
		{777, 512, 512},
		{10, 4096, 4096},
		{100, MaxAlign, MaxAlign},
	} {
		t.Run(fmt.Sprintf("size%d_align%d", tc.size, tc.align), func(t *testing.T) {
			a := newArena(t, g, s, Config{Size: tc.size, Align: tc.align})
			defer closeArena(t, g, a)
			if a.Align() != tc.wantAlign || a.Size() != tc.size {
				t.Errorf("Align %d Size %d, want %d %d", a.Align(), a.Size(), tc.wantAlign, tc.size)
			}
			p, n := g.block(t, a)
			if int(a.Base())%tc.wantAlign != 0 || a.Base() < p+HeaderSize || int(a.Base()-p)+a.Size() > n {
				t.Fatalf("region [%#x, +%d) not aligned or not inside block [%#x, +%d) past the header",
					a.Base(), a.Size(), p, n)
			}
			h := readBack(t, dev, s, a.Header(), HeaderSize)
			if got := binary.LittleEndian.Uint64(h[OffBase:]); got != uint64(a.Base()) {
				t.Errorf("header base %#x, want %#x", got, a.Base())
			}
			if got := binary.LittleEndian.Uint64(h[OffSize:]); got != uint64(tc.size) {
				t.Errorf("header size %d, want %d", got, tc.size)
			}
			if got := binary.LittleEndian.Uint64(h[OffOffset:]); got != 0 {
				t.Errorf("header offset %d, want 0", got)
			}
			if got := binary.LittleEndian.Uint32(h[OffOverflow:]); got != 0 {
				t.Errorf("header overflow %d, want 0", got)
			}
			if got := binary.LittleEndian.Uint32(h[OffAlign:]); got != uint32(tc.wantAlign) {
				t.Errorf("header align %d, want %d", got, tc.wantAlign)
			}
			st, err := a.Stats()
			if err != nil || st != (Stats{}) {
				t.Errorf("fresh arena: Stats = %+v, %v; want zero", st, err)
			}
			g.checkOutside(t, a)
		})
	}
}

// testTag: many threads allocate a few bytes each from a roomy arena;
// nothing overlaps and the high-water mark is the sum of the requests.
func testTag(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	n := 20000
	if testing.Short() {
		n = 3000
	}
	for _, tc := range []struct {
		name      string
		n, span   int
		align     int
		extraRoom int
	}{
		{"align8", n, 7, 8, 0},
		{"align16_exact", n, 13, 16, 0},
		{"align256", n / 4, 3, 0, 1000},
		{"span1", n, 1, 8, 8},
		{"one_thread", 1, 5, 64, 0},
		{"zero_threads", 0, 5, 64, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			align := tc.align
			if align == 0 {
				align = DefaultAlign
			}
			demand := tagDemand(tc.n, tc.span, align)
			a := newArena(t, g, s, Config{Size: demand + tc.extraRoom, Align: tc.align})
			defer closeArena(t, g, a)
			r := runTag(t, k, g, a, tc.n, tc.span)
			if r.failed != 0 || r.stats.Overflow || r.stats.HighWater != demand {
				t.Errorf("served %d failed %d stats %+v; want all served, high water %d", r.served, r.failed, r.stats, demand)
			}
		})
	}
}

// testOverflow: an arena too small for its kernel serves what fits, fails
// the rest with null, sets the flag, and writes nothing outside the region.
func testOverflow(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	n := 20000
	if testing.Short() {
		n = 3000
	}
	// wantHW < 0: the region is full (an add ran past the end), or the
	// served bytes if the overflowing requests were all refused before the
	// add; both are right, which one happens depends on the interleaving.
	for _, tc := range []struct {
		name        string
		size, align int
		n, span     int
		wantHW      int
	}{
		{"half", tagDemand(n, 9, 8) / 2, 8, n, 9, -1},
		{"odd_size", 1001, 16, n, 4, -1},
		{"smaller_than_any_request", 7, 8, 100, 4, 0},   // every rounded request is larger: refused before the add
		{"smaller_than_alignment", 100, 256, 100, 1, 0}, // the same with 4-byte requests and 256-byte rounding
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newArena(t, g, s, Config{Size: tc.size, Align: tc.align})
			defer closeArena(t, g, a)
			r := runTag(t, k, g, a, tc.n, tc.span)
			if !r.stats.Overflow || r.failed == 0 {
				t.Errorf("served %d failed %d stats %+v; want overflow", r.served, r.failed, r.stats)
			}
			if tc.wantHW >= 0 && r.stats.HighWater != tc.wantHW {
				t.Errorf("high water %d, want %d", r.stats.HighWater, tc.wantHW)
			}
		})
	}
}

// testReset: after an overflowed epoch, Reset gives the next epoch the
// whole region; the epoch after that sees only its own requests.
func testReset(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	const span, align = 5, 8
	size := tagDemand(1000, span, align)
	a := newArena(t, g, s, Config{Size: size, Align: align})
	defer closeArena(t, g, a)

	if r := runTag(t, k, g, a, 3000, span); !r.stats.Overflow {
		t.Fatalf("epoch 1: %+v, want overflow", r.stats)
	}
	for epoch, n := range []int{1000, 10, 999} {
		if err := a.Reset(); err != nil {
			t.Fatalf("reset: %v", err)
		}
		repoison(t, a)
		r := runTag(t, k, g, a, n, span)
		if want := tagDemand(n, span, align); r.stats.Overflow || r.stats.HighWater != want {
			t.Fatalf("epoch %d after reset: %+v, want high water %d and no overflow", epoch+2, r.stats, want)
		}
	}
	// Without a reset the counter carries on.
	before, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	repoison(t, a)
	if err := k.Bump(s, a, 3, 8); err != nil {
		t.Fatal(err)
	}
	after, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.HighWater != before.HighWater+24 {
		t.Errorf("without reset: high water %d after %d, want +24", after.HighWater, before.HighWater)
	}
}

// testBump: one allocation per thread, the benchmark's kernel.
func testBump(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	for _, tc := range []struct {
		name         string
		size, align  int
		n, bytes     int
		wantHW       int
		wantOverflow bool
		wantIDs      int // threads whose word is in the region
	}{
		{"fits", 4096 * 64, 64, 4096, 64, 4096 * 64, false, 4096},
		{"rounded", 1000 * 16, 16, 1000, 9, 16000, false, 1000},
		{"zero_bytes", 256, 8, 1000, 0, 0, false, 0},
		{"too_big_request", 256, 8, 10, 257, 0, true, 0},
		{"overflow", 100 * 256, 256, 1000, 256, 100 * 256, true, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newArena(t, g, s, Config{Size: tc.size, Align: tc.align})
			defer closeArena(t, g, a)
			if err := k.Bump(s, a, tc.n, tc.bytes); err != nil {
				t.Fatal(err)
			}
			st, err := a.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.HighWater != tc.wantHW || st.Overflow != tc.wantOverflow {
				t.Errorf("stats %+v, want high water %d overflow %v", st, tc.wantHW, tc.wantOverflow)
			}
			// Each served thread wrote its id at the start of its slot: the
			// ids found are distinct and number the served threads.
			region := readBack(t, dev, s, a.Base(), a.Size())
			seen := make(map[uint32]bool)
			slot := (max(tc.bytes, 1) + tc.align - 1) / tc.align * tc.align
			for off := 0; off+4 <= a.Size() && off < st.HighWater; off += slot {
				id := binary.LittleEndian.Uint32(region[off:])
				if int(id) >= tc.n || seen[id] {
					t.Fatalf("slot at %d holds %d: not a thread id, or a repeated one", off, id)
				}
				seen[id] = true
			}
			if len(seen) != tc.wantIDs {
				t.Errorf("%d threads wrote their id, want %d", len(seen), tc.wantIDs)
			}
			g.checkOutside(t, a)
		})
	}
}

// testClosed: after Close, every operation is ErrClosed and the memory is
// back with the resource.
func testClosed(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	a := newArena(t, g, s, Config{Size: 4096})
	if _, err := a.Stats(); err != nil { // makes the pinned buffer and event
		t.Fatal(err)
	}
	closeArena(t, g, a)
	if !a.Closed() {
		t.Error("Closed() = false after Close")
	}
	out, err := dev.MallocAsync(8, s)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.FreeAsync(out, s)
	for name, op := range map[string]func() error{
		"Stats": func() error { _, err := a.Stats(); return err },
		"Reset": a.Reset,
		"Close": a.Close,
		"Tag":   func() error { return k.Tag(s, a, out, 1, 1) },
		"Bump":  func() error { return k.Bump(s, a, 1, 8) },
	} {
		if err := op(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// testSet: one arena per stream, used by concurrent goroutines for several
// epochs each; each stream sees only its own allocations.
func testSet(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	g := newGuarded(dev)
	const streams, epochs, span, align = 4, 3, 6, 16
	n := 4000
	if testing.Short() {
		n = 1000
	}
	demand := tagDemand(n, span, align)
	set, err := NewSet(g, Config{Size: demand, Align: align})
	if err != nil {
		t.Fatal(err)
	}
	ss := make([]gpu.Stream, streams)
	for i := range ss {
		ss[i] = newStream(t, dev)
	}
	arenas := make([]*Arena, streams)
	// The streams' subtests run in parallel; the group returns when all have.
	t.Run("streams", func(t *testing.T) {
		for i, s := range ss {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				a, err := set.For(s)
				if err != nil {
					t.Fatalf("For: %v", err)
				}
				arenas[i] = a
				for e := range epochs {
					if again, err := set.For(s); err != nil || again != a {
						t.Fatalf("For again = %p, %v; want the same arena", again, err)
					}
					if e > 0 {
						if err := a.Reset(); err != nil {
							t.Fatalf("reset: %v", err)
						}
						repoison(t, a)
					}
					// Alternate an epoch that fits with one that overflows.
					m := n
					if (i+e)%2 == 1 {
						m = 2 * n
					}
					r := runTag(t, k, g, a, m, span)
					if wantOverflow := m > n; r.stats.Overflow != wantOverflow || (!wantOverflow && r.stats.HighWater != demand) {
						t.Errorf("epoch %d: %+v", e, r.stats)
					}
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	if set.Len() != streams {
		t.Errorf("Len = %d, want %d", set.Len(), streams)
	}
	for i := range arenas {
		for j := range i {
			if arenas[i] == arenas[j] || arenas[i].Header() == arenas[j].Header() {
				t.Fatalf("streams %d and %d share an arena", i, j)
			}
		}
	}
	if err := set.Close(); err != nil {
		t.Fatalf("close set: %v", err)
	}
	for _, s := range ss {
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.liveBlocks(); n != 0 {
		t.Errorf("%d blocks live after the set's Close", n)
	}
	if _, err := set.For(ss[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("For after Close: %v, want ErrClosed", err)
	}
	// An arena the set handed out is freed with it: reading or resetting
	// it afterwards is ErrClosed, not a copy from freed memory.
	for i, a := range arenas {
		if _, err := a.Stats(); !errors.Is(err, ErrClosed) {
			t.Errorf("stream %d: Stats after the set's Close: %v, want ErrClosed", i, err)
		}
		if err := a.Reset(); !errors.Is(err, ErrClosed) {
			t.Errorf("stream %d: Reset after the set's Close: %v, want ErrClosed", i, err)
		}
	}
	if err := set.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}
