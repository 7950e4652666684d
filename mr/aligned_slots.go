// alignedSlots: the live allocations of an Aligned adaptor over an
// upstream that checks owners (owner.go), kept without a lock.
//
// Aligned must find, from the aligned address q it handed out, the
// upstream block it came from; a pointer table (ptrtable.go) does that
// with a shard lock taken in the allocation and in the free, four locked
// instructions a pair (a lock and an unlock each), 40-55 ns on the H100
// machine's host. Over an upstream that refuses every bad free exactly,
// the adaptor needs less: the block's size is the request's plus the
// alignment's padding (the free's size, checked by the upstream), so the
// only thing to keep is the offset of q in its block, and the table's
// other work (the size check, refusing what the adaptor never handed out)
// is the upstream's, for the adaptor's own Owner.
//
// How. A fixed array of words, each empty (0), live (q | offset/256) or
// freed (q | offset/256 with slotFreed set, a tombstone). q is aligned to
// the adaptor's alignment a and the offset is below a, so offset/256 fits
// in q's zero low bits. An allocation at the adaptor's alignment puts its
// word in the first empty or freed slot of the alignedProbe slots from
// q's home, with one compare-and-swap. A free finds the live word of q in
// those slots with plain loads, frees the block upstream (q less the
// word's offset, the request's size plus the padding) and, if the
// upstream freed it, turns that word into a tombstone with one
// compare-and-swap. A pair takes two locked instructions of its own.
//
// Racing frees need no lock here: the upstream decides each of them
// exactly (of two frees of one block at most one succeeds, and a free
// with a wrong size changes nothing), so a right free is never refused
// because a wrong one ran beside it, and a free that lost a race to
// another is refused by the upstream (as a double free, or an unknown
// pointer once the block is reused or merged). Only the free that freed
// the block buries its word.
//
// An allocation that finds no slot (more than a few hundred live at once,
// or a run of collisions), or one at another alignment (AllocateAligned),
// goes to the adaptor's pointer table as before; a free that finds no live
// word in its slots asks the table.
//
// Between a free's upstream free and its compare-and-swap its word is
// stale: its block is freed, and the upstream may hand q out again
// meanwhile, recorded in another slot or in the table, and that
// allocation be freed. A free of q that finds the stale word first
// reaches the upstream with the stale block. If the upstream placed the
// new block as the old one (the new word equals the stale one), that
// frees the new block, and the free buries the stale word; the first
// free's compare-and-swap then fails, and it makes dead the other record
// of q with that block, the table's or a word equal to its own (in that
// order: a word holds no size, so the one left, if q was handed out again
// once more, serves whatever size that allocation has), never a live
// word of q with another offset, which records a live allocation. If the
// new block is placed elsewhere, the upstream refuses the stale one, and
// the free tries q's other live words and then the table before it is
// refused (Aligned.freeRefused): a right free is not refused because a
// stale word came first.
//
// Tombstones are the memory of recent frees that tells a double free from
// an unknown pointer: a free that neither the slots nor the table know is
// a double free if a tombstone of q is among q's slots. A tombstone stays
// until an allocation reuses its slot, so an old double free may read as
// an unknown pointer, never the reverse (as with the table's ring).
//
// Invariants: a live word for q is in a slot from its allocation's
// insert until a free buries it, only for an allocation at the adaptor's
// alignment; its block is q - (word's offset)*256 with the request's size
// plus a-256 bytes. It records q's live allocation, or it is stale: a
// free freed its block and has not buried it yet. Of q's live words and
// table record, at most one records a live allocation of q; two or more
// exist only in the race above. A freed word's q is not live in the
// slots.

package mr

import (
	"slices"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	alignedSlotBits = 10
	alignedSlotN    = 1 << alignedSlotBits
	alignedProbe    = 8
	// slotFreed marks a tombstone; addresses at or above slotKeyMax are
	// not kept in the slots (none are, on any device the backends know).
	slotFreed  = 1 << 63
	slotKeyMax = 1 << 61
)

type alignedSlots struct {
	w [alignedSlotN]atomic.Uint64
}

// home is the first of q's slots.
func (t *alignedSlots) home(q gpu.DevicePtr) uint64 {
	return uint64(q) * 0x9E3779B97F4A7C15 >> (64 - alignedSlotBits)
}

// insert records q live with offset units (the block's offset from q,
// in 256-byte units, below the alignment), and reports whether a slot
// took it.
func (t *alignedSlots) insert(q gpu.DevicePtr, units uint64) bool {
	if uint64(q) >= slotKeyMax {
		return false
	}
	w := uint64(q) | units
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		sl := &t.w[(h+i)&(alignedSlotN-1)]
		if v := sl.Load(); (v == 0 || v&slotFreed != 0) && sl.CompareAndSwap(v, w) {
			return true
		}
	}
	return false
}

// find returns the slot of a live word of q and that word, or nil if no
// slot holds q live. mask is the alignment minus one.
func (t *alignedSlots) find(q gpu.DevicePtr, mask uint64) (*atomic.Uint64, uint64) {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		sl := &t.w[(h+i)&(alignedSlotN-1)]
		if v := sl.Load(); v&slotFreed == 0 && v != 0 && v&^mask == uint64(q) {
			return sl, v
		}
	}
	return nil, 0
}

// findOther is find of a live word of q that is none of the words in
// not.
func (t *alignedSlots) findOther(q gpu.DevicePtr, mask uint64, not []uint64) (*atomic.Uint64, uint64) {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		sl := &t.w[(h+i)&(alignedSlotN-1)]
		if v := sl.Load(); v&slotFreed == 0 && v != 0 && v&^mask == uint64(q) && !slices.Contains(not, v) {
			return sl, v
		}
	}
	return nil, 0
}

// bury turns the live word w, found in sl, into a tombstone after the
// upstream freed its block, and reports whether sl still held w.
func (t *alignedSlots) bury(sl *atomic.Uint64, w uint64) bool {
	return sl.CompareAndSwap(w, w|slotFreed)
}

// buryEqual turns a live word of q equal to w into a tombstone, if there
// is one, and reports whether there was.
func (t *alignedSlots) buryEqual(q gpu.DevicePtr, w uint64) bool {
	for {
		sl := t.holding(q, w)
		if sl == nil {
			return false
		}
		if sl.CompareAndSwap(w, w|slotFreed) {
			return true
		}
	}
}

// holding returns the slot among q's that holds the word w, or nil.
func (t *alignedSlots) holding(q gpu.DevicePtr, w uint64) *atomic.Uint64 {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		if sl := &t.w[(h+i)&(alignedSlotN-1)]; sl.Load() == w {
			return sl
		}
	}
	return nil
}

// freed reports whether a tombstone of q is among its slots.
func (t *alignedSlots) freed(q gpu.DevicePtr, mask uint64) bool {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		if v := t.w[(h+i)&(alignedSlotN-1)].Load(); v&slotFreed != 0 && v&^(mask|slotFreed) == uint64(q) {
			return true
		}
	}
	return false
}

// live counts the live words.
func (t *alignedSlots) live() int {
	n := 0
	for i := range t.w {
		if v := t.w[i].Load(); v != 0 && v&slotFreed == 0 {
			n++
		}
	}
	return n
}
