package devarena

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// hostHeader returns a header in 8-byte aligned Go memory.
func hostHeader(t testing.TB, base, size uint64, align uint32) []byte {
	t.Helper()
	words := make([]uint64, HeaderSize/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), HeaderSize)
	copy(b, header{base: gpu.DevicePtr(base), size: size, align: align}.encode())
	return b
}

// hostCell is a header's epoch state in Go memory.
type hostCell struct {
	offset   *uint64
	overflow *uint32
}

func hostCellOf(b []byte) hostCell {
	return hostCell{
		offset:   (*uint64)(unsafe.Pointer(&b[OffOffset])),
		overflow: (*uint32)(unsafe.Pointer(&b[OffOverflow])),
	}
}

func (c hostCell) loadOffset() (uint64, error) { return atomic.LoadUint64(c.offset), nil }
func (c hostCell) addOffset(n uint64) (uint64, error) {
	return atomic.AddUint64(c.offset, n) - n, nil
}
func (c hostCell) setOverflow() error { atomic.StoreUint32(c.overflow, 1); return nil }

// hostArena is a header in Go memory and its allocator.
type hostArena struct {
	b []byte
	c hostCell
	f fixed
}

func newHostArena(t testing.TB, base, size uint64, align uint32) *hostArena {
	t.Helper()
	b := hostHeader(t, base, size, align)
	f, err := fixedOf(b)
	if err != nil {
		t.Fatal(err)
	}
	return &hostArena{b: b, c: hostCellOf(b), f: f}
}

func (h *hostArena) alloc(t testing.TB, n uint64) uint64 {
	p, err := allocate(h.c, h.f, n)
	if err != nil {
		t.Error(err)
	}
	return p
}

func TestFixedOfRejects(t *testing.T) {
	good := header{base: 4096, size: 100, align: 8}.encode()
	if f, err := fixedOf(good); err != nil || f != (fixed{base: 4096, size: 100, mask: 7}) {
		t.Fatalf("good header: %+v, %v", f, err)
	}
	if _, err := fixedOf(good[:HeaderSize-1]); err == nil {
		t.Error("short header accepted")
	}
	for _, align := range []uint32{0, 4, 12, MaxAlign * 2} {
		b := header{base: 4096, size: 100, align: align}.encode()
		if _, err := fixedOf(b); !errors.Is(err, ErrInvalidAlign) {
			t.Errorf("align %d: err = %v, want ErrInvalidAlign", align, err)
		}
	}
	for _, h := range []header{{base: 4100, size: 100, align: 8}, {base: 4096, size: MaxSize + 1, align: 8}} {
		if _, err := fixedOf(h.encode()); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("%+v: err = %v, want ErrInvalidSize", h, err)
		}
	}
}

// model is sa_arena_alloc run by one thread: with no concurrent adds, a
// request that fails never reaches the counter.
type model struct {
	base, size, align, off uint64
	overflow               bool
}

func (m *model) alloc(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n > m.size {
		m.overflow = true
		return 0
	}
	r := (n + m.align - 1) / m.align * m.align
	if r > m.size || m.off > m.size-r {
		m.overflow = true
		return 0
	}
	p := m.base + m.off
	m.off += r
	return p
}

// FuzzAllocSequence runs a sequence of requests and resets through alloc
// and through the model and compares every result and the final state.
func FuzzAllocSequence(f *testing.F) {
	f.Add(uint32(1000), uint8(3), []byte{10, 20, 0, 255, 1, 7})
	f.Add(uint32(64), uint8(0), []byte{8, 8, 8, 8, 8, 8, 8, 8, 8, 0xff, 8})
	f.Add(uint32(1), uint8(13), []byte{1, 2})
	f.Fuzz(func(t *testing.T, size uint32, alignLog uint8, ops []byte) {
		if size == 0 {
			size = 1
		}
		align := uint32(MinAlign) << (alignLog % 14) // 8 .. 65536
		const base = 1 << 20
		h := newHostArena(t, base, uint64(size), align)
		b := h.b
		m := &model{base: base, size: uint64(size), align: uint64(align)}
		for i, op := range ops {
			if op == 0xff { // reset, as Reset's memset does
				clear(b[OffOffset:OffAlign])
				m.off, m.overflow = 0, false
				continue
			}
			// Requests from 0 to well past the region, in bytes.
			n := uint64(op) * uint64(op) * uint64(size) / 4096
			if op%2 == 1 {
				n = uint64(op)
			}
			got, want := h.alloc(t, n), m.alloc(n)
			if got != want {
				t.Fatalf("op %d: alloc(%d) = %#x, model %#x", i, n, got, want)
			}
			if got != 0 && (got%uint64(align) != 0 || got < base || got+n > base+uint64(size)) {
				t.Fatalf("op %d: alloc(%d) = %#x outside [%#x, %#x) or misaligned", i, n, got, base, base+uint64(size))
			}
		}
		e := decodeEpoch(b[OffOffset:])
		if e.offset != m.off || (e.overflow != 0) != m.overflow {
			t.Fatalf("state: offset %d overflow %d, model %d %v", e.offset, e.overflow, m.off, m.overflow)
		}
		st := statsOf(e, int(size))
		if st.HighWater != int(m.off) || st.Overflow != m.overflow {
			t.Fatalf("stats %+v, model offset %d overflow %v", st, m.off, m.overflow)
		}
	})
}

// TestAllocConcurrent lets goroutines race on one counter, past the end of
// the region, and checks the invariants that hold under any interleaving.
func TestAllocConcurrent(t *testing.T) {
	const (
		base    = 1 << 30
		workers = 8
		each    = 2000
	)
	for _, tc := range []struct {
		name  string
		size  uint64
		align uint32
	}{
		{"roomy", workers * each * 64, 8},
		{"tight", workers * each * 16, 16},
		{"align256", 4 << 20, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostArena(t, base, tc.size, tc.align)
			type span struct{ lo, hi uint64 }
			got := make([][]span, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						n := uint64(1 + (w*each+i)%40)
						if p := h.alloc(t, n); p != 0 {
							got[w] = append(got[w], span{p, p + roundUp(n, uint64(tc.align))})
						}
					}
				})
			}
			wg.Wait()
			all := slices.Concat(got...)
			slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
			var sum uint64
			for i, s := range all {
				if s.lo < base || s.hi > base+tc.size || s.lo%uint64(tc.align) != 0 {
					t.Fatalf("allocation [%#x, %#x) outside the region or misaligned", s.lo, s.hi)
				}
				if i > 0 && s.lo < all[i-1].hi {
					t.Fatalf("allocations [%#x, %#x) and [%#x, %#x) overlap", all[i-1].lo, all[i-1].hi, s.lo, s.hi)
				}
				sum += s.hi - s.lo
			}
			st := statsOf(decodeEpoch(h.b[OffOffset:]), int(tc.size))
			if !st.Overflow && uint64(st.HighWater) != sum {
				t.Errorf("high water %d, served %d bytes", st.HighWater, sum)
			}
			if st.Overflow && (uint64(st.HighWater) < sum || uint64(st.HighWater) > tc.size) {
				t.Errorf("overflowed with high water %d, want between the served %d and the size %d", st.HighWater, sum, tc.size)
			}
			if sum > tc.size {
				t.Errorf("served %d bytes of a %d-byte region", sum, tc.size)
			}
			if off := *h.c.offset; off > (workers*each+1)*tc.size {
				t.Errorf("counter %d beyond its bound", off)
			}
			wantOverflow := tc.name == "tight"
			if st.Overflow != wantOverflow {
				t.Errorf("overflow = %v, want %v", st.Overflow, wantOverflow)
			}
		})
	}
}

func roundUp(n, a uint64) uint64 { return (n + a - 1) / a * a }
