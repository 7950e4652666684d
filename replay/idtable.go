// Tables keyed by the trace's 64-bit ids: its addresses and its streams.
//
// A replay looks up a trace address at every event, among as many live
// blocks as the trace holds (hundreds of thousands in a large log), and
// the trace's addresses are spread over the recorded process's address
// space, so each lookup lands on a cold cache line. A Go map reaches a
// slot through its group's control word, its key and its value, often on
// different lines. idTable keeps key and value side by side in one array,
// open addressing with linear probing, so that a lookup usually costs one
// miss: the slot's line, whose neighbours are the next probes.
//
// Invariants:
//   - len(slots) is a power of two, mask = len(slots)-1, and n, the keys
//     held, stays at most 3/4 of it (grow doubles past that), so a free
//     slot always ends a probe;
//   - a slot whose key is emptyKey is free; a key equal to emptyKey itself
//     is held apart (hasEmpty, emptyVal), so every uint64 can be a key;
//   - a key is found in the run of occupied slots that starts at its home
//     slot (home): delete shifts the run's later members back over the
//     hole, so that no probe ever needs a tombstone.
//
// The table never shrinks: its size follows the most keys it held at
// once, not the number of insertions, so a replay's memory stays flat
// however long the log.

package replay

import "math/bits"

// emptyKey marks a free slot.
const emptyKey = ^uint64(0)

// idSlot is one slot of an idTable.
type idSlot[V any] struct {
	key uint64
	val V
}

// idTable maps uint64 keys to values of type V. The zero idTable is empty
// and ready to use.
type idTable[V any] struct {
	slots    []idSlot[V]
	mask     uint64
	shift    uint // 64 - log2(len(slots))
	n        int
	hasEmpty bool
	emptyVal V
}

// home returns the slot where the probe for k starts: Fibonacci hashing,
// so that addresses aligned to large powers of two still spread.
func (t *idTable[V]) home(k uint64) uint64 {
	return (k * 0x9e3779b97f4a7c15) >> t.shift
}

// len returns the number of keys held.
func (t *idTable[V]) len() int {
	if t.hasEmpty {
		return t.n + 1
	}
	return t.n
}

// get returns the value held for k and whether k is held.
func (t *idTable[V]) get(k uint64) (V, bool) {
	if p := t.ref(k); p != nil {
		return *p, true
	}
	var zero V
	return zero, false
}

// ref returns a pointer to the value held for k, valid until the next put
// or delete, or nil if k is not held.
func (t *idTable[V]) ref(k uint64) *V {
	if k == emptyKey {
		if t.hasEmpty {
			return &t.emptyVal
		}
		return nil
	}
	if t.n == 0 {
		return nil
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.key == k {
			return &s.val
		}
		if s.key == emptyKey {
			return nil
		}
	}
}

// touch loads the slot where a lookup of k starts, so that the lookup, if
// it comes soon, finds the slot's cache line loaded. It returns the key
// there, for the caller to keep, so that the load is not optimized away.
func (t *idTable[V]) touch(k uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[t.home(k)].key
}

// put holds v for k, replacing any value k had.
func (t *idTable[V]) put(k uint64, v V) {
	if k == emptyKey {
		t.hasEmpty, t.emptyVal = true, v
		return
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.key == k {
			s.val = v
			return
		}
		if s.key == emptyKey {
			s.key, s.val = k, v
			t.n++
			return
		}
	}
}

// delete drops k, if held.
func (t *idTable[V]) delete(k uint64) {
	var zero V
	if k == emptyKey {
		t.hasEmpty, t.emptyVal = false, zero
		return
	}
	if t.n == 0 {
		return
	}
	i := t.home(k)
	for ; t.slots[i].key != k; i = (i + 1) & t.mask {
		if t.slots[i].key == emptyKey {
			return
		}
	}
	// Backward shift: move each later member of the run whose home is
	// not in (hole, j] into the hole, until the run ends.
	hole := i
	for j := (i + 1) & t.mask; t.slots[j].key != emptyKey; j = (j + 1) & t.mask {
		h := t.home(t.slots[j].key)
		// j's home lies cyclically in (hole, j]: it must stay.
		if (j-h)&t.mask < (j-hole)&t.mask {
			continue
		}
		t.slots[hole] = t.slots[j]
		hole = j
	}
	t.slots[hole] = idSlot[V]{key: emptyKey, val: zero}
	t.n--
}

// grow doubles the slots (to 16 the first time) and files every key again.
func (t *idTable[V]) grow() {
	size := max(16, 2*len(t.slots))
	old := t.slots
	t.slots = make([]idSlot[V], size)
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	t.mask = uint64(size - 1)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, s := range old {
		if s.key == emptyKey {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != emptyKey {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
	}
}

// each calls f with every key held and its value, in no particular order.
func (t *idTable[V]) each(f func(k uint64, v V)) {
	for _, s := range t.slots {
		if s.key != emptyKey {
			f(s.key, s.val)
		}
	}
	if t.hasEmpty {
		f(emptyKey, t.emptyVal)
	}
}
