// sa_arena_alloc in Go, for the simulator's kernels.
//
// view is a header in (simulated) device memory seen through Go pointers:
// the fixed fields read once, the counter and flag as words that Go's
// atomics operate on. alloc is the same algorithm, step for step, as
// sa_arena_alloc in sa_arena.cuh and the inlined copies in sa_arena.ptx;
// the fuzz test checks it against a plain sequential model.
package devarena

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// view is one header as a kernel sees it.
type view struct {
	base, size, mask uint64
	offset           *uint64
	overflow         *uint32
}

// viewOf interprets b, the HeaderSize bytes of a header in simulated
// device memory. The counter and flag are used with atomics, so b must be
// 8-byte aligned in host memory; the fixed fields must be sane (a header
// that is not one, say a stray pointer, is reported, never used).
func viewOf(b []byte) (*view, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("devarena: header is %d bytes, want %d", len(b), HeaderSize)
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("devarena: header at host address %p is not 8-byte aligned", &b[0])
	}
	align := binary.LittleEndian.Uint32(b[OffAlign:])
	if align < MinAlign || align > MaxAlign || align&(align-1) != 0 {
		return nil, fmt.Errorf("devarena: header alignment %d: %w", align, ErrInvalidAlign)
	}
	return &view{
		base:     binary.LittleEndian.Uint64(b[OffBase:]),
		size:     binary.LittleEndian.Uint64(b[OffSize:]),
		mask:     uint64(align) - 1,
		offset:   (*uint64)(unsafe.Pointer(&b[OffOffset])),
		overflow: (*uint32)(unsafe.Pointer(&b[OffOverflow])),
	}, nil
}

// alloc returns the device address of n bytes from the arena, or 0 if
// they do not fit (and then sets the overflow flag).
func (v *view) alloc(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n > v.size {
		return v.fail()
	}
	n = (n + v.mask) &^ v.mask
	if n > v.size {
		return v.fail()
	}
	last := v.size - n
	if atomic.LoadUint64(v.offset) > last {
		return v.fail()
	}
	old := atomic.AddUint64(v.offset, n) - n
	if old > last {
		return v.fail()
	}
	return v.base + old
}

func (v *view) fail() uint64 {
	atomic.StoreUint32(v.overflow, 1)
	return 0
}
