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
// Between a free's upstream free and its compare-and-swap its word is
// stale: the upstream may hand q out again meanwhile, recorded in another
// slot, and that allocation be freed. If the upstream reused the block,
// the new word equals the stale one, and a free of q that finds the stale
// one first frees the new block through it and buries it. The first
// free's compare-and-swap then fails, and it buries the other word equal
// to its own, the one whose block the other free freed; never a live word
// of q with another offset, which records an allocation still live (a
// third one, placed in the slot the other free buried).
//
// An allocation that finds no slot (more than a few hundred live at once,
// or a run of collisions), or one at another alignment (AllocateAligned),
// goes to the adaptor's pointer table as before; a free that finds no live
// word in its slots asks the table.
//
// Tombstones are the memory of recent frees that tells a double free from
// an unknown pointer: a free that neither the slots nor the table know is
// a double free if a tombstone of q is among q's slots. A tombstone stays
// until an allocation reuses its slot, so an old double free may read as
// an unknown pointer, never the reverse (as with the table's ring).
//
// Invariants: a live word for q is in a slot only while q is live (from
// its allocation's insert until its free buries it) and was handed out
// at the adaptor's alignment; its block is q - (word's offset)*256 with
// the request's size plus a-256 bytes. Two live words for one q exist only
// in the race above, and then all but the live allocation's (if q is
// live) are stale, each the word of a free that freed its block and has
// not buried it yet. A freed word's q
// is not live in the slots.

package mr

import (
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

// bury turns the live word w of q, found in sl, into a tombstone after
// the upstream freed its block. If sl no longer holds w (the race in the
// file comment), it buries another word of q equal to w, if there is
// one, and never a live word of q with another offset: that is the
// record of an allocation still live.
func (t *alignedSlots) bury(sl *atomic.Uint64, w uint64, q gpu.DevicePtr) {
	for sl != nil && !sl.CompareAndSwap(w, w|slotFreed) {
		sl = t.holding(q, w)
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
