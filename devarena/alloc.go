// sa_arena_alloc in Go, for the simulator's kernels.
//
// allocate is the same algorithm, step for step, as sa_arena_alloc in
// sa_arena.cuh and its inlined copies in sa_arena.ptx. It reaches the
// header's epoch state (counter and flag) through a cell, so that the
// simulator's kernels can use the simulator's atomics (which, like the
// card's relaxed atomics, create no happens-before edge that would hide a
// missing event from the race detector) and the fuzz test can use plain Go
// memory. The fuzz test checks it against a sequential model.

package devarena

import (
	"encoding/binary"
	"fmt"
)

// cell is the epoch state of one header, reached atomically.
type cell interface {
	// loadOffset reads the counter.
	loadOffset() (uint64, error)
	// addOffset adds n to the counter and returns its value before.
	addOffset(n uint64) (uint64, error)
	// setOverflow sets the flag.
	setOverflow() error
}

// fixed are a header's fields that do not change while the arena lives.
type fixed struct {
	base, size, mask uint64
}

// fixedOf decodes the fixed fields of b, a header's HeaderSize bytes, and
// checks that they are sane: a kernel handed something that is not a
// header gets an error, never a wild write.
func fixedOf(b []byte) (fixed, error) {
	if len(b) < HeaderSize {
		return fixed{}, fmt.Errorf("devarena: header is %d bytes, want %d", len(b), HeaderSize)
	}
	align := binary.LittleEndian.Uint32(b[OffAlign:])
	if align < MinAlign || align > MaxAlign || align&(align-1) != 0 {
		return fixed{}, fmt.Errorf("devarena: header alignment %d: %w", align, ErrInvalidAlign)
	}
	f := fixed{
		base: binary.LittleEndian.Uint64(b[OffBase:]),
		size: binary.LittleEndian.Uint64(b[OffSize:]),
		mask: uint64(align) - 1,
	}
	if f.size > MaxSize || f.base&f.mask != 0 {
		return fixed{}, fmt.Errorf("devarena: header region %#x size %d align %d: %w", f.base, f.size, align, ErrInvalidSize)
	}
	return f, nil
}

// allocate returns the device address of n bytes from the arena, or 0 if
// they do not fit (and then sets the overflow flag).
func allocate(c cell, f fixed, n uint64) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	if n > f.size {
		return 0, c.setOverflow()
	}
	n = (n + f.mask) &^ f.mask
	if n > f.size {
		return 0, c.setOverflow()
	}
	last := f.size - n
	// Read before adding: a thread that has seen the counter past the end
	// adds nothing more (see sa_arena.cuh on why the counter cannot wrap).
	cur, err := c.loadOffset()
	if err != nil {
		return 0, err
	}
	if cur > last {
		return 0, c.setOverflow()
	}
	old, err := c.addOffset(n)
	if err != nil {
		return 0, err
	}
	if old > last {
		return 0, c.setOverflow()
	}
	return f.base + old, nil
}
