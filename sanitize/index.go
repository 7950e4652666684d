// index: the sanitizer's map from device addresses to regions, a treap
// keyed by base address.
//
// Regions in the index never overlap (the sanitizer removes or trims what a
// new allocation covers before inserting it), so the region containing an
// address, if any, is the one with the greatest base not above it, and the
// regions overlapping a range are that one and its successors below the
// range's end. A treap keeps every operation O(log n) expected with no
// rebalancing bookkeeping beyond a random priority per node; the priority
// comes from a xorshift generator owned by the index (callers hold the
// sanitizer's lock), so the index allocates nothing of its own.

package sanitize

import "github.com/streamalloc/streamalloc/gpu"

type index struct {
	root *region
	n    int
	rng  uint64
}

func (x *index) prio() uint64 {
	if x.rng == 0 {
		x.rng = 0x9e3779b97f4a7c15
	}
	x.rng ^= x.rng << 13
	x.rng ^= x.rng >> 7
	x.rng ^= x.rng << 17
	return x.rng
}

// insert adds r, whose base no region in the index has.
func (x *index) insert(r *region) {
	r.left, r.right, r.prio = nil, nil, x.prio()
	x.root = insertNode(x.root, r)
	x.n++
}

func insertNode(t, r *region) *region {
	if t == nil {
		return r
	}
	if r.base < t.base {
		t.left = insertNode(t.left, r)
		if t.left.prio > t.prio {
			t = rotateRight(t)
		}
	} else {
		t.right = insertNode(t.right, r)
		if t.right.prio > t.prio {
			t = rotateLeft(t)
		}
	}
	return t
}

func rotateRight(t *region) *region {
	l := t.left
	t.left, l.right = l.right, t
	return l
}

func rotateLeft(t *region) *region {
	r := t.right
	t.right, r.left = r.left, t
	return r
}

// remove deletes r (by base) if it is in the index.
func (x *index) remove(r *region) {
	var found bool
	x.root, found = removeNode(x.root, r)
	if found {
		x.n--
		r.left, r.right = nil, nil
	}
}

func removeNode(t, r *region) (*region, bool) {
	if t == nil {
		return nil, false
	}
	var found bool
	switch {
	case r.base < t.base:
		t.left, found = removeNode(t.left, r)
		return t, found
	case r.base > t.base:
		t.right, found = removeNode(t.right, r)
		return t, found
	case t != r:
		return t, false
	}
	return merge(t.left, t.right), true
}

// merge joins two treaps whose keys are all ordered (a before b).
func merge(a, b *region) *region {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = merge(a.right, b)
		return a
	}
	b.left = merge(a, b.left)
	return b
}

// floor is the region with the greatest base <= p, or nil.
func (x *index) floor(p gpu.DevicePtr) *region {
	var best *region
	for t := x.root; t != nil; {
		if t.base <= p {
			best, t = t, t.right
		} else {
			t = t.left
		}
	}
	return best
}

// ceil is the region with the least base >= p, or nil.
func (x *index) ceil(p gpu.DevicePtr) *region {
	var best *region
	for t := x.root; t != nil; {
		if t.base >= p {
			best, t = t, t.left
		} else {
			t = t.right
		}
	}
	return best
}

// containing is the region holding address p, or nil.
func (x *index) containing(p gpu.DevicePtr) *region {
	if r := x.floor(p); r != nil && p-r.base < gpu.DevicePtr(r.size) {
		return r
	}
	return nil
}

// overlapping appends to out every region that intersects [p, p+n), in
// address order. A zero-length range intersects nothing.
func (x *index) overlapping(p gpu.DevicePtr, n int, out []*region) []*region {
	if n <= 0 {
		return out
	}
	end := p + gpu.DevicePtr(n)
	if r := x.floor(p); r != nil && r.base+gpu.DevicePtr(r.size) > p {
		out = append(out, r)
	}
	for r := x.ceil(p + 1); r != nil && r.base < end; r = x.ceil(r.base + 1) {
		out = append(out, r)
	}
	return out
}
