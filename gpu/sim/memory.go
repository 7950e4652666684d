// Device memory: the address space, its mapped segments and their bytes.
//
// A device has an address space far larger than its capacity (so that
// fragmentation of addresses never causes an out-of-memory the card would
// not have), handed out first-fit from a list of free ranges. A segment is
// one mapped range: a cuMemAlloc or managed allocation (exactly its
// requested size, so one byte past the end is an illegal address) or a
// chunk reserved by a pool (whole 2 MiB units; pool blocks are carved from
// it, and, as on the card, touching a freed block of a still-reserved chunk
// is not an error).
//
// A segment's bytes are committed on first touch: segments up to
// maxSinglePage bytes get one slice, larger ones 2 MiB pages, so touching
// one word of an 80 GiB allocation costs 2 MiB of host memory. Views handed
// to kernels are contiguous within one page.
//
// Invariants: segments never overlap; the published table (segTable) is
// immutable and sorted by base; it is replaced, under Device.mu, by the
// host only. Stream workers read it and create pages without taking locks
// or creating happens-before edges (see doc.go): lookups are //go:norace
// and page creation runs with race synchronization disabled.

package sim

import (
	"sync/atomic"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

const (
	// align is the alignment of every allocation (cudaMalloc's guarantee).
	align = 256
	// bigAlign is the alignment and granularity of allocations of 2 MiB
	// and more, and of pool reservations (the card's large page).
	bigAlign = 2 << 20
	// maxSinglePage: segments up to this size are backed by one slice.
	maxSinglePage = 64 << 20
	// pageShift: larger segments are backed by pages of 1<<pageShift bytes.
	pageShift = 21
	// vaBase is where the first device's addresses start; each device has
	// at least vaStride bytes of address space.
	vaBase   = 0x7f0000000000
	vaStride = 1 << 40
)

func roundUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// addrSpace hands out address ranges first-fit. Guarded by Device.mu.
type addrSpace struct {
	free []span // sorted, disjoint, not adjacent
}

type span struct{ base, size uint64 }

func newAddrSpace(base, size uint64) addrSpace {
	return addrSpace{free: []span{{base, size}}}
}

// alloc returns a range of size bytes aligned to a, or false.
func (as *addrSpace) alloc(size, a uint64) (uint64, bool) {
	for i, f := range as.free {
		start := roundUp(f.base, a)
		if start < f.base || start+size > f.base+f.size || start+size < start {
			continue
		}
		end := f.base + f.size
		var repl []span
		if start > f.base {
			repl = append(repl, span{f.base, start - f.base})
		}
		if start+size < end {
			repl = append(repl, span{start + size, end - start - size})
		}
		as.free = append(as.free[:i], append(repl, as.free[i+1:]...)...)
		return start, true
	}
	return 0, false
}

// release returns [base, base+size), coalescing with its neighbours.
func (as *addrSpace) release(base, size uint64) {
	i := 0
	for i < len(as.free) && as.free[i].base < base {
		i++
	}
	s := span{base, size}
	if i > 0 && as.free[i-1].base+as.free[i-1].size == base {
		i--
		s = span{as.free[i].base, as.free[i].size + size}
		as.free = append(as.free[:i], as.free[i+1:]...)
	}
	if i < len(as.free) && s.base+s.size == as.free[i].base {
		s.size += as.free[i].size
		as.free = append(as.free[:i], as.free[i+1:]...)
	}
	as.free = append(as.free[:i], append([]span{s}, as.free[i:]...)...)
}

// segment is one mapped range of device memory.
type segment struct {
	base, size uint64
	paged      bool
	pages      []atomic.Pointer[page]
}

type page struct{ b []byte }

func newSegment(base, size uint64) *segment {
	s := &segment{base: base, size: size}
	if size > maxSinglePage {
		s.paged = true
		s.pages = make([]atomic.Pointer[page], (size+(1<<pageShift)-1)>>pageShift)
	} else {
		s.pages = make([]atomic.Pointer[page], 1)
	}
	return s
}

// segTable is an immutable sorted list of a device's segments.
type segTable struct{ segs []*segment }

// find returns the segment holding address p, or nil.
//
//go:norace
func (t *segTable) find(p uint64) *segment {
	segs := t.segs
	lo, hi := 0, len(segs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s := segs[m]; s.base+s.size <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(segs) && segs[lo].base <= p {
		return segs[lo]
	}
	return nil
}

// with returns a table with s added.
func (t *segTable) with(s *segment) *segTable {
	i := 0
	for i < len(t.segs) && t.segs[i].base < s.base {
		i++
	}
	segs := make([]*segment, 0, len(t.segs)+1)
	segs = append(append(append(segs, t.segs[:i]...), s), t.segs[i:]...)
	return &segTable{segs}
}

// without returns a table with s removed.
func (t *segTable) without(s *segment) *segTable {
	segs := make([]*segment, 0, len(t.segs))
	for _, x := range t.segs {
		if x != s {
			segs = append(segs, x)
		}
	}
	return &segTable{segs}
}

// lookup finds the segment holding [p, p+n), n >= 1, without creating
// happens-before edges.
//
//go:norace
func (d *Device) lookup(p, n uint64) *segment {
	raceDisable()
	t := d.segs.Load()
	raceEnable()
	s := t.find(p)
	if s == nil || p+n < p || p+n > s.base+s.size {
		return nil
	}
	return s
}

// piece returns the bytes of the segment from offset off, at most n of
// them, up to the end of the page holding off. It commits the page if it
// was never touched.
//
//go:norace
func (s *segment) piece(off, n uint64) []byte {
	var i, start uint64
	if s.paged {
		i = off >> pageShift
		start = i << pageShift
	}
	raceDisable()
	pg := s.pages[i].Load()
	if pg == nil {
		size := s.size
		if s.paged {
			size = min(s.size-start, 1<<pageShift)
		}
		np := &page{b: make([]byte, size)}
		if s.pages[i].CompareAndSwap(nil, np) {
			pg = np
		} else {
			pg = s.pages[i].Load()
		}
	}
	raceEnable()
	b := pg.b[off-start:]
	if uint64(len(b)) > n {
		b = b[:n]
	}
	return b
}

// chunks calls fn on consecutive pieces of the n bytes at p, off being
// each piece's offset from p. The whole range is checked first: if it is
// not inside one mapped segment, chunks touches nothing and returns an
// error matching cuda.ErrIllegalAddress naming call.
func (d *Device) chunks(call string, p gpu.DevicePtr, n int, fn func(off int, b []byte) error) error {
	if n <= 0 {
		if n < 0 {
			return driverErrf(call, cuda.ErrInvalidValue, "negative size %d", n)
		}
		return nil
	}
	s := d.lookup(uint64(p), uint64(n))
	if s == nil {
		return driverErrf(call, cuda.ErrIllegalAddress, "[%#x, +%d) is not inside one allocation of device %d", uint64(p), n, d.ordinal)
	}
	off := uint64(p) - s.base
	done := 0
	for done < n {
		b := s.piece(off+uint64(done), uint64(n-done))
		if err := fn(done, b); err != nil {
			return err
		}
		done += len(b)
	}
	return nil
}

// mapped reports whether [p, p+n) lies inside one mapped segment now.
func (d *Device) mapped(p gpu.DevicePtr, n int) bool {
	return n > 0 && d.lookup(uint64(p), uint64(n)) != nil
}
