// ptrMap: the live blocks of one pool stream, by address.
//
// Deallocate's first step is this lookup, so it is a purpose-built hash
// table rather than a Go map: open addressing with linear probing over a
// power-of-two array, keys hashed by a Fibonacci multiply of the address
// (whose low 8 bits are always zero), and deletion by backward shift, so
// there are no tombstones and probe sequences stay short under any
// alloc/free churn. A Go map costs two to three times as much here (a
// delete that empties it even draws a random number to reseed).
//
// The most recently put entry is kept in a front slot outside the table,
// and moves into the table only when the next put needs the front slot: a
// block freed right after it was allocated (the common case of a pool's
// alloc/free pair) is put and deleted without hashing or probing.
//
// Invariants: keys are non-zero addresses (0 marks an empty slot); a key
// is in the front slot or in the table, never both; every key in the table
// is reachable from its home slot without crossing an empty slot; the
// table is at most half full, and grows (the only time it allocates) by
// doubling. (In random churn under cachegrind, the removals' backward
// shifts took 39 instructions per operation with the table at most 3/4
// full, 29 at most half full.)

package mr

import "github.com/streamalloc/streamalloc/gpu"

type ptrMapSlot struct {
	key gpu.DevicePtr
	val *poolBlock
}

type ptrMap struct {
	front ptrMapSlot // the last entry put, unless deleted since
	slots []ptrMapSlot
	n     int  // entries in slots
	shift uint // 64 - log2(len(slots))
}

// len returns the number of entries.
func (m *ptrMap) len() int {
	if m.front.key != 0 {
		return m.n + 1
	}
	return m.n
}

const ptrMapMinSlots = 64

// ptrMapMul is the Fibonacci multiplier, 2^64 over the golden ratio.
const ptrMapMul = 0x9E3779B97F4A7C15

func (m *ptrMap) home(k gpu.DevicePtr) int {
	return int((uint64(k) * ptrMapMul) >> m.shift)
}

func (m *ptrMap) get(k gpu.DevicePtr) *poolBlock {
	v, _ := m.find(k)
	return v
}

// ptrMapFront is the position find reports for the front slot.
const ptrMapFront = -1

// find returns k's value and its position, for delAt: ptrMapFront or an
// index of the table. The value is nil if k is not in the map.
func (m *ptrMap) find(k gpu.DevicePtr) (*poolBlock, int) {
	if k == 0 {
		return nil, 0
	}
	if m.front.key == k {
		return m.front.val, ptrMapFront
	}
	if m.n == 0 {
		return nil, 0
	}
	slots := m.slots
	mask := len(slots) - 1
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &slots[i&mask]
		if s.key == k {
			return s.val, i
		}
		if s.key == 0 {
			return nil, 0
		}
	}
}

// put sets k's value; k must not be in the map.
func (m *ptrMap) put(k gpu.DevicePtr, v *poolBlock) {
	if m.front.key != 0 {
		m.putTable(m.front.key, m.front.val)
	}
	m.front = ptrMapSlot{k, v}
}

// putTable files k, which is in neither the front slot nor the table, in
// the table.
func (m *ptrMap) putTable(k gpu.DevicePtr, v *poolBlock) {
	if (m.n+1)*2 > len(m.slots) {
		m.grow()
	}
	slots := m.slots
	mask := len(slots) - 1
	i := m.home(k) & mask
	for slots[i].key != 0 {
		i = (i + 1) & mask
	}
	slots[i] = ptrMapSlot{k, v}
	m.n++
}

// del removes k, which must be in the map.
func (m *ptrMap) del(k gpu.DevicePtr) {
	if m.front.key == k {
		m.front = ptrMapSlot{}
		return
	}
	mask := len(m.slots) - 1
	i := m.home(k)
	for m.slots[i].key != k {
		i = (i + 1) & mask
	}
	m.delAt(i)
}

// delAt removes the entry at position at, as find reported it, so that a
// lookup followed by a removal (a free) probes the table once.
func (m *ptrMap) delAt(at int) {
	if at == ptrMapFront {
		m.front = ptrMapSlot{}
		return
	}
	slots, shift := m.slots, m.shift
	mask := len(slots) - 1
	i := at & mask
	// Backward shift: move later entries of the probe run into the hole
	// unless that would put them before their home slot. (The locals keep
	// the loop from reloading the map's fields at every step.)
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &slots[j]
		if s.key == 0 {
			break
		}
		h := int((uint64(s.key) * ptrMapMul) >> shift)
		// s may move to i iff i lies cyclically in [h, j).
		if (j-h)&mask >= (j-i)&mask {
			slots[i] = *s
			i = j
		}
	}
	slots[i] = ptrMapSlot{}
	m.n--
}

func (m *ptrMap) grow() {
	old := m.slots
	size := max(ptrMapMinSlots, 2*len(old))
	m.slots = make([]ptrMapSlot, size)
	m.shift = uint(64 - log2(size))
	m.n = 0
	for _, s := range old {
		if s.key != 0 {
			m.putTable(s.key, s.val)
		}
	}
}

func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
