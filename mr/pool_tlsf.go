// tlsf: the free-block index of one stream of a Pool, a two-level
// segregated fit (TLSF) structure.
//
// Free blocks are filed by size in classes. A size of u units (one unit is
// Alignment bytes) below 32 units has a class of its own: sizes up to 8 KiB
// are exact size classes, so a small request is served in O(1) by the first
// block of its class. Above that, the first level is the power of two
// below u and the second level splits each power-of-two range into 32 equal
// classes, so a class spans at most 1/32 of its sizes (about 3%). A bitmap
// per level records which classes are non-empty; finding the smallest
// non-empty class that can serve a request is two count-trailing-zeros
// instructions, whatever the number of free blocks.
//
// find first scans a few blocks of the request's own class (some of which
// may be large enough) and takes the smallest fitting one, then falls back
// to the first block of the next class up, whose every block fits: a
// bounded best fit, O(1) per call.
//
// findFit is find restricted to the blocks a predicate accepts; it walks
// the lists of the classes above the request's until it finds one, so its
// cost grows with the number of rejected blocks met on the way (the pool
// rejects only the free blocks of a few large chunks).
//
// Layout: a first level's second-level bitmap and its row of list heads
// sit side by side (tlsfLevel, 16 bytes, each on one cache line), so that
// a search, an insert into an empty class or a remove that empties one
// reads one line of the tlsf where separate arrays of bitmaps and rows
// spread it over two. (A call whose caches the host's work evicted, the C
// ABI inside PyTorch, misses on each line; TestTlsfLevelLines pins it.)
//
// Invariants: a block is in a tlsf iff its state is blockFree; it is in the
// list of class mapping(b.size), which insert records in b.fl, b.sl so that
// remove need not compute it again; bit (fl, sl) of the bitmaps is set iff
// lv[fl].row[sl] != nil. (It keeps no count of its blocks or bytes: the
// pool reads none, and two counters cost every insert and remove.)
// A first level's row of list heads is allocated when a block is first
// filed in it, so an idle stream costs hundreds of bytes, not the 10 KiB
// that every row would take.
// A tlsf belongs to one poolStream and is only touched under its mutex.

package mr

import "math/bits"

const (
	tlsfSLBits = 5
	tlsfSL     = 1 << tlsfSLBits
	// tlsfFL first levels cover sizes below 2^(tlsfFL+tlsfSLBits+7)
	// bytes (2 PiB), far beyond any device; larger sizes share the top
	// class (tlsfClass clamps), where find checks each block's size.
	// (39, not 40: a stream's three tlsfs then fit its state in 4 KiB
	// with their levels 16 bytes each, TestPoolStreamStateSize.)
	tlsfFL = 39
	// tlsfScan bounds the blocks find examines in the request's own
	// class before it falls back to the next class.
	tlsfScan = 8
)

type tlsf struct {
	flMap uint64
	// lv lies on a 16-byte boundary of memory where poolStream holds the
	// tlsfs (after the heap's 8-byte header and the fields before them),
	// so that no level spans two lines; pad keeps a tlsf a multiple of 16
	// bytes, so that the stream's next tlsf's levels are placed alike.
	lv  [tlsfFL]tlsfLevel
	pad uint64
}

// tlsfLevel is a first level: its second-level bitmap and list heads.
type tlsfLevel struct {
	slMap uint32
	row   *[tlsfSL]*poolBlock // nil until a block is filed in the row
}

// tlsfClass returns the class of a block of size bytes (a positive multiple
// of Alignment).
func tlsfClass(size int) (fl, sl int) {
	u := uint64(size) / Alignment
	if u < tlsfSL {
		return 0, int(u)
	}
	l := bits.Len64(u) - 1 // >= tlsfSLBits
	fl = l - tlsfSLBits + 1
	if fl >= tlsfFL {
		return tlsfFL - 1, tlsfSL - 1
	}
	return fl, int(u>>(l-tlsfSLBits)) - tlsfSL
}

// insert files b, which must be free and in no list.
func (t *tlsf) insert(b *poolBlock) {
	fl, sl := tlsfClass(b.size)
	b.fl, b.sl = uint8(fl), uint8(sl)
	lv := &t.lv[fl]
	row := lv.row
	if row == nil {
		row = new([tlsfSL]*poolBlock)
		lv.row = row
	}
	h := row[sl]
	b.lprev, b.lnext = nil, h
	if h != nil {
		h.lprev = b
	} else { // the class was empty: its bits were clear
		t.flMap |= 1 << fl
		lv.slMap |= 1 << sl
	}
	row[sl] = b
}

// remove takes b, which must be filed in t, out of its list.
func (t *tlsf) remove(b *poolBlock) {
	fl, sl := int(b.fl), int(b.sl)
	if b.lprev != nil {
		b.lprev.lnext = b.lnext
	} else {
		lv := &t.lv[fl]
		lv.row[sl] = b.lnext
		if b.lnext == nil {
			lv.slMap &^= 1 << sl
			if lv.slMap == 0 {
				t.flMap &^= 1 << fl
			}
		}
	}
	if b.lnext != nil {
		b.lnext.lprev = b.lprev
	}
	b.lprev, b.lnext = nil, nil
}

// find returns a filed block of at least size bytes, or nil. It does not
// remove it.
func (t *tlsf) find(size int) *poolBlock {
	fl, sl := tlsfClass(size)
	if lv := &t.lv[fl]; lv.slMap&(1<<sl) != 0 {
		// The request's own class (exact for small classes, otherwise
		// its blocks may be smaller or larger than size), or the top
		// class, which holds all the largest sizes.
		var best *poolBlock
		i := 0
		for b := lv.row[sl]; b != nil && (i < tlsfScan || fl == tlsfFL-1); b = b.lnext {
			if b.size == size {
				return b
			}
			if b.size > size && (best == nil || b.size < best.size) {
				best = b
			}
			i++
		}
		if best != nil {
			return best
		}
	}
	// Every block of a class above the request's fits.
	if fl, sl, ok := t.nextClass(fl, sl); ok {
		return t.lv[fl].row[sl]
	}
	return nil
}

// largest returns the size of the largest filed block, or 0: the largest
// in the top non-empty class, whose blocks are all larger than those of
// the classes below.
func (t *tlsf) largest() int {
	if t.flMap == 0 {
		return 0
	}
	fl := bits.Len64(t.flMap) - 1
	best := 0
	for b := t.lv[fl].row[bits.Len32(t.lv[fl].slMap)-1]; b != nil; b = b.lnext {
		best = max(best, b.size)
	}
	return best
}

// nextClass returns the first non-empty class above class (fl, sl), in
// increasing order of size, from the bitmaps; ok is false if there is none.
func (t *tlsf) nextClass(fl, sl int) (int, int, bool) {
	sl++
	if sl == tlsfSL {
		fl, sl = fl+1, 0
	}
	if fl >= tlsfFL {
		return 0, 0, false
	}
	slm := t.lv[fl].slMap & (^uint32(0) << sl)
	if slm == 0 {
		flm := t.flMap & (^uint64(0) << (fl + 1))
		if flm == 0 {
			return 0, 0, false
		}
		fl = bits.TrailingZeros64(flm)
		slm = t.lv[fl].slMap
	}
	return fl, bits.TrailingZeros32(slm), true
}

// findFit returns a filed block of at least size bytes that ok accepts:
// the smallest of the first few that fit in the request's own class, else
// the first accepted block of the classes above, in increasing order of
// class. It returns nil if no filed block qualifies; it removes nothing.
func (t *tlsf) findFit(size int, ok func(*poolBlock) bool) *poolBlock {
	fl, sl := tlsfClass(size)
	var best *poolBlock
	found := 0 // candidates met in the request's class
	var head *poolBlock
	if row := t.lv[fl].row; row != nil { // rows are allocated on use
		head = row[sl]
	}
	for b := head; b != nil && (found < tlsfScan || fl == tlsfFL-1); b = b.lnext {
		if b.size < size || !ok(b) {
			continue
		}
		found++
		if best == nil || b.size < best.size {
			best = b
		}
	}
	if best != nil {
		return best
	}
	for {
		var more bool
		if fl, sl, more = t.nextClass(fl, sl); !more {
			return nil
		}
		for b := t.lv[fl].row[sl]; b != nil; b = b.lnext {
			if ok(b) {
				return b
			}
		}
	}
}
