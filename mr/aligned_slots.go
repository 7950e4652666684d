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
// How. A fixed array of words, each empty (0), live (q | offset/256),
// busy (live with slotBusy set: a free of it is in progress) or freed
// (q | offset/256 with slotFreed set, a tombstone). q is aligned to the
// adaptor's alignment a and the offset is below a, so offset/256 fits in
// q's zero low bits. An allocation at the adaptor's alignment puts its
// word in the first empty or freed slot of the alignedProbe slots from
// q's home, with one compare-and-swap. A free finds the live word of q in
// those slots with plain loads and marks it busy with one
// compare-and-swap, which of two racing frees only one wins; it frees the
// block upstream and stores the tombstone, or, if the upstream refuses (a
// wrong size), the live word again. Another free of q that finds the word
// busy waits for that outcome, as it would wait for a pointer table's
// shard lock, so a right free is never refused because a wrong one ran
// beside it. A pair takes three locked instructions of its own, where the
// table's two locks and unlocks take four, each heavier. An allocation
// that finds no slot (more than a few hundred live at once, or a run of
// collisions), or one at another alignment (AllocateAligned), goes to the
// adaptor's pointer table as before; a free that finds no live word in its
// slots asks the table.
//
// Tombstones are the memory of recent frees that tells a double free from
// an unknown pointer: a free that neither the slots nor the table know is
// a double free if a tombstone of q is among q's slots. A tombstone stays
// until an allocation reuses its slot, so an old double free may read as
// an unknown pointer, never the reverse (as with the table's ring).
//
// Invariants: a live or busy word for q is in at most one slot, and only
// while q is live and was handed out at the adaptor's alignment; its block
// is q - (word's offset)*256 with the request's size plus a-256 bytes. A
// busy word changes only by the free that made it busy. A freed word's q
// is not live in the slots.

package mr

import (
	"runtime"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	alignedSlotBits = 10
	alignedSlotN    = 1 << alignedSlotBits
	alignedProbe    = 8
	// slotFreed marks a tombstone and slotBusy a free in progress;
	// addresses at or above slotKeyMax are not kept in the slots (none
	// are, on any device the backends know).
	slotFreed  = 1 << 63
	slotBusy   = 1 << 62
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

// take marks q's live word busy and returns its slot and the live word,
// or nil if no slot holds q live. It waits while another free of q is in
// progress. mask is the alignment minus one. The caller ends the free
// with end.
func (t *alignedSlots) take(q gpu.DevicePtr, mask uint64) (*atomic.Uint64, uint64) {
	h := t.home(q)
	for i := range uint64(alignedProbe) {
		sl := &t.w[(h+i)&(alignedSlotN-1)]
		for {
			v := sl.Load()
			if v&slotFreed != 0 || v&^(mask|slotBusy) != uint64(q) {
				break
			}
			if v&slotBusy != 0 {
				// Another free of q runs: its outcome decides ours.
				runtime.Gosched()
				continue
			}
			if sl.CompareAndSwap(v, v|slotBusy) {
				return sl, v
			}
		}
	}
	return nil, 0
}

// end ends the free of the live word w that take marked busy in sl:
// freed if the upstream freed the block, live again if it refused.
func (t *alignedSlots) end(sl *atomic.Uint64, w uint64, freed bool) {
	if freed {
		w |= slotFreed
	}
	sl.Store(w)
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

// live counts the live and busy words.
func (t *alignedSlots) live() int {
	n := 0
	for i := range t.w {
		if v := t.w[i].Load(); v != 0 && v&slotFreed == 0 {
			n++
		}
	}
	return n
}
