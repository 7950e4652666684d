// Device memory: the address space, its mapped segments and their bytes.
//
// A device has an address space far larger than its capacity (so that
// fragmentation of addresses never causes an out-of-memory the card would
// not have), handed out first-fit from a list of free ranges. A segment is
// one mapped range: a cuMemAlloc or managed allocation (exactly its
// requested size, so one byte past the end is an illegal address) or a
// pool's range (poolheap.go: mapped in 32 MiB granules, or 2 MiB near
// capacity; pool blocks are carved from it, and, as on the card, touching
// a freed block of a still-mapped granule is not an error).
//
// A segment's bytes are committed on first touch: segments up to
// maxSinglePage bytes get one slice, larger ones 2 MiB pages, so touching
// one word of an 80 GiB allocation costs 2 MiB of host memory. Views handed
// to kernels are contiguous within one page.
//
// Invariants: segments never overlap; the index (segIndex) publishes
// immutable granule lists, replaced under Device.mu by the host only.
// Stream workers read it and create pages without taking locks or creating
// happens-before edges (see doc.go): lookups are //go:norace and their
// atomics and page creation run with race synchronization disabled.

package sim

import (
	"cmp"
	"slices"
	"sync/atomic"

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

// fits reports whether alloc(size, a) would succeed, without taking
// anything.
func (as *addrSpace) fits(size, a uint64) bool {
	for _, f := range as.free {
		start := roundUp(f.base, a)
		if start >= f.base && start+size <= f.base+f.size && start+size >= start {
			return true
		}
	}
	return false
}

// release returns [base, base+size), coalescing with its neighbours.
func (as *addrSpace) release(base, size uint64) {
	i, _ := slices.BinarySearchFunc(as.free, base, func(f span, b uint64) int { return cmp.Compare(f.base, b) })
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
	// vm, for a reservation (vmm.go) only: one entry per granule, the
	// physical page mapped and accessible there, nil where the granule
	// is unmapped or not accessible. pages is then unused.
	vm []atomic.Pointer[vmPage]
	// res, for managed memory only, is where each page resides
	// (managed.go); set before the segment's address is handed out.
	res *residency
	// peers, if not nil, has bit b set when device b may access the
	// segment (peer.go): the pool's mask for its chunks, the device's
	// for Malloc memory. Read with race synchronization disabled.
	peers *atomic.Uint64
	// view, for memory imported from another process (ipc.go): the
	// exporter's segment whose bytes from viewOff this one shows.
	view    *segment
	viewOff uint64
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

// segIndex maps addresses to segments. It is a two-level radix table over
// the device's address space: one entry per 1 GiB region, each a node of
// 16384 granules of 64 KiB, each granule an immutable list of the segments
// overlapping it. The host replaces granules (under Device.mu); readers
// (stream workers) load them atomically, with race synchronization
// disabled, and never lock: a lookup is two loads and a short scan, and an
// update costs only the granules the segment covers. A segment covers
// whole granules with one shared list of itself (a slot store each) and
// copies the lists of at most the two it covers in part, which hold at
// most 256 segments (64 KiB of 256-byte allocations): so a million live
// small allocations cost O(1) each, where 2 MiB granules of 8192 segments
// made each update copy thousands of pointers.
type segIndex struct {
	base    uint64
	regions []atomic.Pointer[segNode]
}

const (
	granuleShift = 16 // 64 KiB
	regionShift  = 30 // 1 GiB
)

type segNode [1 << (regionShift - granuleShift)]atomic.Pointer[granule]

type granule struct{ segs []*segment } // sorted by base, disjoint

func newSegIndex(base, size uint64) *segIndex {
	return &segIndex{base: base, regions: make([]atomic.Pointer[segNode], (size+(1<<regionShift)-1)>>regionShift)}
}

// slot returns the granule slot of address p, or nil outside the space.
// With create, missing region nodes are made (host only).
//
//go:norace
func (x *segIndex) slot(p uint64, create bool) *atomic.Pointer[granule] {
	if p < x.base {
		return nil
	}
	off := p - x.base
	r := off >> regionShift
	if r >= uint64(len(x.regions)) {
		return nil
	}
	raceDisable()
	n := x.regions[r].Load()
	if n == nil && create {
		n = new(segNode)
		x.regions[r].Store(n)
	}
	raceEnable()
	if n == nil {
		return nil
	}
	return &n[(off>>granuleShift)&(1<<(regionShift-granuleShift)-1)]
}

// find returns the segment holding address p, or nil.
//
//go:norace
func (x *segIndex) find(p uint64) *segment {
	sl := x.slot(p, false)
	if sl == nil {
		return nil
	}
	raceDisable()
	g := sl.Load()
	raceEnable()
	if g == nil {
		return nil
	}
	for _, s := range g.segs {
		if s.base <= p && p < s.base+s.size {
			return s
		}
	}
	return nil
}

// granules calls fn with the address and the slot of every granule s
// overlaps (host only).
func (x *segIndex) granules(s *segment, fn func(g uint64, sl *atomic.Pointer[granule])) {
	first := s.base &^ (1<<granuleShift - 1)
	for g := first; g < s.base+s.size; g += 1 << granuleShift {
		fn(g, x.slot(g, true))
	}
}

// covers reports whether s spans the whole granule at g.
func (s *segment) covers(g uint64) bool {
	return s.base <= g && g+1<<granuleShift <= s.base+s.size
}

// add indexes s (host only, under Device.mu).
func (x *segIndex) add(s *segment) {
	full := &granule{[]*segment{s}} // for the granules s covers whole
	x.granules(s, func(g uint64, sl *atomic.Pointer[granule]) {
		raceDisable()
		old := sl.Load()
		raceEnable()
		var segs []*segment
		if old == nil && s.covers(g) {
			raceDisable()
			sl.Store(full)
			raceEnable()
			return
		}
		if old != nil {
			segs = make([]*segment, 0, len(old.segs)+1)
			i := 0
			for i < len(old.segs) && old.segs[i].base < s.base {
				i++
			}
			segs = append(append(append(segs, old.segs[:i]...), s), old.segs[i:]...)
		} else {
			segs = []*segment{s}
		}
		raceDisable()
		sl.Store(&granule{segs})
		raceEnable()
	})
}

// remove unindexes s (host only, under Device.mu).
func (x *segIndex) remove(s *segment) {
	x.granules(s, func(_ uint64, sl *atomic.Pointer[granule]) {
		raceDisable()
		old := sl.Load()
		raceEnable()
		var ng *granule
		if len(old.segs) > 1 {
			segs := make([]*segment, 0, len(old.segs)-1)
			for _, y := range old.segs {
				if y != s {
					segs = append(segs, y)
				}
			}
			ng = &granule{segs}
		}
		raceDisable()
		sl.Store(ng)
		raceEnable()
	})
}

// lookup finds the segment holding [p, p+n), n >= 1, and the offset of p
// in it, without creating happens-before edges and without the race
// detector seeing its reads of the index (a worker may look up an address
// the host maps at the same time, after the operation was enqueued).
//
//go:norace
func (d *Device) lookup(p, n uint64) (*segment, uint64) { return d.lookupVia(p, n, false) }

// lookupVia is lookup; with routed, memory of another device of the
// backend is found whatever its peer access, as the driver routes copies
// and sets between devices (peer.go).
//
//go:norace
func (d *Device) lookupVia(p, n uint64, routed bool) (*segment, uint64) {
	s := d.segs.find(p)
	if s == nil {
		s = d.peerSegment(p, routed)
	}
	if s == nil || p+n < p || p+n > s.base+s.size {
		return nil, 0
	}
	if s.vm != nil && !s.accessible(p-s.base, n) {
		return nil, 0
	}
	return s, p - s.base
}

// piece returns the bytes of the segment from offset off, at most n of
// them, up to the end of the page holding off. It commits the page if it
// was never touched.
//
//go:norace
func (s *segment) piece(off, n uint64) []byte {
	if s.view != nil {
		return s.view.piece(s.viewOff+off, n)
	}
	if s.vm != nil {
		return s.vmPiece(off, n)
	}
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
// error matching gpu.ErrIllegalAddress naming call.
func (d *Device) chunks(call string, p gpu.DevicePtr, n int, fn func(off int, b []byte) error) error {
	return d.chunksVia(call, p, n, false, fn)
}

// routedChunks is chunks for copies and sets, which reach the memory of
// every device of the backend (lookupVia).
func (d *Device) routedChunks(call string, p gpu.DevicePtr, n int, fn func(off int, b []byte) error) error {
	return d.chunksVia(call, p, n, true, fn)
}

func (d *Device) chunksVia(call string, p gpu.DevicePtr, n int, routed bool, fn func(off int, b []byte) error) error {
	if n <= 0 {
		if n < 0 {
			return driverErrf(call, gpu.ErrInvalidValue, "negative size %d", n)
		}
		return nil
	}
	s, off := d.lookupVia(uint64(p), uint64(n), routed)
	if s == nil {
		return driverErrf(call, gpu.ErrIllegalAddress, "[%#x, +%d) is not inside one allocation of device %d", uint64(p), n, d.ordinal)
	}
	done := 0
	for done < n {
		b := s.piece(off+uint64(done), uint64(n-done))
		if len(b) == 0 {
			// A page of a reservation unmapped since the check.
			return driverErrf(call, gpu.ErrIllegalAddress, "%#x is not mapped", uint64(p)+uint64(done))
		}
		if err := fn(done, b); err != nil {
			return err
		}
		done += len(b)
	}
	return nil
}

// mapped reports whether [p, p+n) lies inside one mapped segment now that
// a copy or set of d may touch (lookupVia, routed).
func (d *Device) mapped(p gpu.DevicePtr, n int) bool {
	if n <= 0 {
		return false
	}
	s, _ := d.lookupVia(uint64(p), uint64(n), true)
	return s != nil
}
