package devarena

// Requests large enough to wrap 64-bit arithmetic: rounding n up to the
// alignment, or adding n to the counter. None of them may be served, move
// the counter, or write anything; and once the counter has passed the end
// of the region no request of the epoch adds to it again, which is what
// keeps the counter from wrapping (sa_arena.cuh).

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// hugeRequests are requests that a careless sa_arena_alloc would serve:
// each wraps the rounding (n + align - 1) to a small number, or the
// counter's add, or both.
var hugeRequests = []uint64{
	math.MaxUint64,                // rounds to 0 at every alignment
	math.MaxUint64 - 6,            // the largest n that rounds to 0 at align 8
	math.MaxUint64 - MaxAlign + 2, // rounds to 0 at MaxAlign only
	1 << 63,
	math.MaxInt64,
	MaxSize + 1,
}

// TestAllocHugeRequests: in the Go allocator (the simulator's kernels),
// every huge request fails with the flag set and leaves the counter where
// it was, whether the arena is empty, half full or already overflowed.
func TestAllocHugeRequests(t *testing.T) {
	const base = 1 << 20
	for _, align := range []uint32{MinAlign, DefaultAlign, MaxAlign} {
		for _, start := range []uint64{0, 96, 1 << 20} { // empty, part used, counter past the end
			h := newHostArena(t, base, 1000, align)
			*h.c.offset = start
			for _, n := range append(hugeRequests, 1001) {
				*h.c.overflow = 0
				if p := h.alloc(t, n); p != 0 {
					t.Fatalf("align %d counter %d: alloc(%#x) = %#x, want 0", align, start, n, p)
				}
				if *h.c.offset != start || *h.c.overflow != 1 {
					t.Fatalf("align %d counter %d: alloc(%#x) left counter %d overflow %d; want %d, 1",
						align, start, n, *h.c.offset, *h.c.overflow, start)
				}
			}
		}
	}
	// The counter past the end: a request that would fit an empty region
	// adds nothing.
	h := newHostArena(t, base, 1000, 8)
	*h.c.offset = 1001
	if p := h.alloc(t, 8); p != 0 || *h.c.offset != 1001 || *h.c.overflow != 1 {
		t.Fatalf("after the end: alloc(8) = %#x, counter %d, overflow %d; want 0, 1001, 1", p, *h.c.offset, *h.c.overflow)
	}
}

// testHuge: the same on the device (the PTX on a GPU, the Go kernels on
// the simulator): huge requests from every thread of a launch are refused
// without a write or a move of the counter; and after a kernel has run the
// counter past the end, later kernels of the epoch do not move it.
func testHuge(t *testing.T, dev gpu.Device) {
	k := loadKernels(t, dev)
	s := newStream(t, dev)
	g := newGuarded(dev)
	const size, n = MaxAlign, 2000 // size >= every alignment, so the whole region can be served
	for _, align := range []int{MinAlign, 0, MaxAlign} {
		a := newArena(t, g, s, Config{Size: size, Align: align})
		for _, bytes := range hugeRequests {
			if err := a.Reset(); err != nil {
				t.Fatal(err)
			}
			// Bump's own check takes an int; launch directly to pass any
			// 64-bit request, as a user's kernel could.
			if err := dev.Launch(k.bump, grid(n), gpu.Dim3{X: blockSize}, 0, s, a.Header(), uint64(n), bytes); err != nil {
				t.Fatalf("launch: %v", err)
			}
			off, overflow := rawEpoch(t, a)
			if off != 0 || overflow != 1 {
				t.Errorf("align %d: %d threads asking %#x bytes: counter %d overflow %d; want 0, 1", a.Align(), n, bytes, off, overflow)
			}
		}
		if err := k.Bump(s, a, n, math.MaxInt); err != nil {
			t.Fatal(err)
		}
		if st, err := a.Stats(); err != nil || st != (Stats{Overflow: true}) {
			t.Errorf("align %d: Bump of MaxInt bytes: %+v, %v; want nothing claimed, overflow", a.Align(), st, err)
		}
		region := readBack(t, dev, s, a.Base(), a.Size())
		if i := notPoison(region); i >= 0 {
			t.Errorf("align %d: region byte %d written by a refused request", a.Align(), i)
		}
		g.checkOutside(t, a)

		// Every thread asks for the whole region: one is served, the others
		// fail, some of them (those that read the counter before the first
		// add) after their own add.
		if err := a.Reset(); err != nil {
			t.Fatal(err)
		}
		if err := k.Bump(s, a, n, size); err != nil {
			t.Fatal(err)
		}
		full, overflow := rawEpoch(t, a)
		if full < size || full > n*size || overflow != 1 {
			t.Fatalf("align %d: %d threads asking the whole region: counter %d overflow %d; want %d to %d, 1",
				a.Align(), n, full, overflow, size, n*size)
		}
		// From now on no request of the epoch, large or small, adds.
		for _, bytes := range []int{1, 8, size} {
			if err := k.Bump(s, a, n, bytes); err != nil {
				t.Fatal(err)
			}
			if off, _ := rawEpoch(t, a); off != full {
				t.Errorf("align %d: after the end, %d threads asking %d bytes moved the counter from %d to %d",
					a.Align(), n, bytes, full, off)
			}
		}
		region = readBack(t, dev, s, a.Base(), a.Size())
		if id := binary.LittleEndian.Uint32(region); id >= n {
			t.Errorf("align %d: the one served thread wrote %d, not a thread id", a.Align(), id)
		}
		if i := notPoison(region[4:]); i >= 0 {
			t.Errorf("align %d: region byte %d written, only the served thread's first word may be", a.Align(), 4+i)
		}
		g.checkOutside(t, a)
		closeArena(t, g, a)
	}
}

// rawEpoch reads a's counter and flag as they are on the device, without
// the clamping of Stats.
func rawEpoch(t *testing.T, a *Arena) (offset uint64, overflow uint32) {
	t.Helper()
	e := decodeEpoch(readBack(t, a.Device(), a.Stream(), a.Header()+OffOffset, epochBytes))
	return e.offset, e.overflow
}
