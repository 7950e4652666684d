// The header that kernels receive: struct sa_arena of sa_arena.cuh.
//
// The header is 32 little-endian bytes at an address that is a multiple of
// mr.Alignment (so its 64-bit counter is 8-byte aligned, as atomics need):
//
//	offset  0  u64 base      device address of the region, a multiple of align
//	offset  8  u64 size      bytes in the region
//	offset 16  u64 offset    bump counter; may pass size once a request fails
//	offset 24  u32 overflow  0, or 1 once a request of the epoch failed
//	offset 28  u32 align     alignment of every device-side allocation
//
// base, size and align are written once, when the arena is created; the
// 12 bytes from offset 16 are the epoch state that Reset zeroes. The C
// header, the PTX and the simulator's kernels all use these offsets; the
// tests check the constants against each other.
//
// The header and the region are one allocation from the resource:
//
//	p          base = the first multiple of align at or past p+32
//	| header | padding | region: size bytes ............. | slack |
//	|<----------- max(256, align) + size bytes ------------------>|
//
// so one Allocate and one Deallocate cover both, and the region's base is
// aligned to the arena's alignment even when that exceeds mr.Alignment
// (p, from the resource, is a multiple of 256, so base <= p + max(256, align)).

package devarena

import (
	"encoding/binary"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Offsets of the header's fields, in bytes.
const (
	OffBase     = 0
	OffSize     = 8
	OffOffset   = 16
	OffOverflow = 24
	OffAlign    = 28
	// HeaderSize is the size of struct sa_arena.
	HeaderSize = 32

	// epochBytes is what Reset zeroes: the counter and the overflow flag.
	epochBytes = OffAlign - OffOffset
)

// Limits of the host side.
const (
	// DefaultAlign is the alignment of device-side allocations when
	// Config.Align is 0: what cudaMalloc guarantees.
	DefaultAlign = mr.Alignment
	// MinAlign is the smallest alignment: every allocation can hold a
	// 64-bit word.
	MinAlign = 8
	// MaxAlign is the largest alignment.
	MaxAlign = 1 << 16
	// MaxSize is the largest region. It bounds the device counter well
	// below 2^64 (see sa_arena.cuh) and is larger than any device's memory.
	MaxSize = 1 << 40
)

// header is the host's copy of the fixed fields.
type header struct {
	base  gpu.DevicePtr
	size  uint64
	align uint32
}

// encode returns the header's 32 bytes with a zero counter and flag.
func (h header) encode() []byte {
	b := make([]byte, HeaderSize)
	binary.LittleEndian.PutUint64(b[OffBase:], uint64(h.base))
	binary.LittleEndian.PutUint64(b[OffSize:], h.size)
	binary.LittleEndian.PutUint32(b[OffAlign:], h.align)
	return b
}

// epoch is the counter and flag as read back from the device (the 12 bytes
// from OffOffset).
type epoch struct {
	offset   uint64
	overflow uint32
}

func decodeEpoch(b []byte) epoch {
	return epoch{
		offset:   binary.LittleEndian.Uint64(b[OffOffset-OffOffset:]),
		overflow: binary.LittleEndian.Uint32(b[OffOverflow-OffOffset:]),
	}
}

// regionBase is where the region starts in a block at p (a multiple of
// mr.Alignment): the first multiple of align past the header.
func regionBase(p gpu.DevicePtr, align int) gpu.DevicePtr {
	return alignPtr(p+HeaderSize, align)
}

// blockBytes is the allocation that holds the header and a region of size
// bytes at alignment align: the region starts at most max(256, align)
// bytes past a 256-aligned p.
func blockBytes(size, align int) int {
	return size + max(mr.Alignment, align)
}

func alignPtr(p gpu.DevicePtr, align int) gpu.DevicePtr {
	a := gpu.DevicePtr(align)
	return (p + a - 1) &^ (a - 1)
}
