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
// freed (the same with slotFreed set, a tombstone). q is aligned to the
// adaptor's alignment a and the offset is below a, so offset/256 fits in
// q's zero low bits. An allocation at the adaptor's alignment puts its
// word in the first empty or freed slot of the alignedProbe slots from
// q's home, with one compare-and-swap; a free finds the live word of q in
// those slots with plain loads and marks it freed with one
// compare-and-swap, which of two racing frees only one wins, then frees
// the block upstream; if the upstream refuses (a wrong size), the word is
// made live again (or, if an allocation took the slot meanwhile, put in
// another slot, or else among the adaptor's orphans, a map under a lock
// that a free asks only while it is not empty). So a pair takes two locked
// instructions of its own. An allocation that finds no slot (more than a few hundred live at
// once, or a run of collisions), or one at another alignment
// (AllocateAligned), goes to the adaptor's pointer table as before; a free
// that finds no live word in its slots asks the table.
//
// Tombstones are the memory of recent frees that tells a double free from
// an unknown pointer: a free that neither the slots nor the table know is
// a double free if a tombstone of q is among q's slots. A tombstone stays
// until an allocation reuses its slot, so an old double free may read as
// an unknown pointer, never the reverse (as with the table's ring).
//
// Invariants: a live word for q is in at most one slot, and only while q
// is live and was handed out at the adaptor's alignment; its block is
// q - (word's offset)*256 with the request's size plus a-256 bytes. A
// freed word's q is not live in the slots. Between the compare-and-swap
// that marks a word freed and a refused free's restore, a racing free of
// q reads as a double free.

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
	slotKeyMax = 1 << 62
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

// take marks q's live word freed and returns its slot and word, or nil
// if no slot holds q live. mask is the alignment minus one.
func (t *alignedSlots) take(q gpu.DevicePtr, mask uint64) (*atomic.Uint64, uint64) {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		sl := &t.w[(h+i)&(alignedSlotN-1)]
		for {
			v := sl.Load()
			if v&slotFreed != 0 || v&^mask != uint64(q) || v == 0 {
				break
			}
			if sl.CompareAndSwap(v, v|slotFreed) {
				return sl, v
			}
			// Another free of q won, or the word changed: look again.
		}
	}
	return nil, 0
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
