// The indexes of a driver pool's free blocks, so that an allocation costs
// O(log n) in the free blocks, not O(n).
//
// An allocation looks for the best fitting block in two orders (pool.go):
// first among the blocks its own stream freed and the pool has not yet
// processed (pending, every free on that stream), the smallest that fits,
// the oldest free among equal sizes; then among all free blocks, the
// smallest that fits and that the stream may use, the lowest address among
// equal sizes. Walking the pool's list of free blocks for both made every
// allocation O(free blocks): 24 us an event with 20,000 blocks live, 126 us
// with 200,000. Two treaps order the same blocks by those keys: bySize
// holds every listed free block by (size, address); each stream's byPend
// tree holds the pending blocks whose frees are all on that stream by
// (size, when freed, address). A search walks a tree in order from the
// request's size and stops at the first block that serves, so it visits
// only the blocks that fit but may not be used, in order.
//
// Invariants (under Device.mu): a block is in bySize iff it is in the free
// list; it is in the byPend tree of stream s (pendOf == s) iff it is listed,
// pending and its one free is on s; it is in the list of pending blocks
// (pend, pprev, pnext) iff it is listed and pending, which is what
// processing the completed frees (flushLocked) visits instead of every
// free block. A listed block's key fields (size,
// freed, pending, deps) change only inside rekey, which takes it out of the
// trees first and files it again after. Priorities are a hash of the
// address, so the trees' shapes, like everything else, are the same on
// every run.

package sim

// treeLinks are a block's children and priority in one treap.
type treeLinks struct {
	l, r *block
	prio uint64
}

// blockTree is a treap of blocks; links selects the block's links for
// it, less its order (a total one: addresses are unique).
type blockTree struct {
	root  *block
	links func(*block) *treeLinks
	less  func(a, b *block) bool
}

func bySizeLinks(b *block) *treeLinks { return &b.bySize }
func byPendLinks(b *block) *treeLinks { return &b.byPend }

// sizeLess orders blocks by (size, address).
func sizeLess(a, b *block) bool { return a.size < b.size || a.size == b.size && a.addr < b.addr }

// pendLess orders blocks by (size, when freed, address).
func pendLess(a, b *block) bool {
	return a.size < b.size || a.size == b.size && (a.freed < b.freed || a.freed == b.freed && a.addr < b.addr)
}

// treePrio is the treap priority of the block at addr (splitmix64).
func treePrio(addr uint64) uint64 {
	z := addr + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (t *blockTree) insert(x *block) {
	lx := t.links(x)
	lx.l, lx.r, lx.prio = nil, nil, treePrio(x.addr)
	t.root = t.ins(t.root, x)
}

func (t *blockTree) ins(n, x *block) *block {
	if n == nil {
		return x
	}
	ln, lx := t.links(n), t.links(x)
	if lx.prio > ln.prio {
		lx.l, lx.r = t.split(n, x)
		return x
	}
	if t.less(x, n) {
		ln.l = t.ins(ln.l, x)
	} else {
		ln.r = t.ins(ln.r, x)
	}
	return n
}

// split divides the tree at n into the blocks before x and the rest.
func (t *blockTree) split(n, x *block) (lo, hi *block) {
	if n == nil {
		return nil, nil
	}
	ln := t.links(n)
	if t.less(n, x) {
		ln.r, hi = t.split(ln.r, x)
		return n, hi
	}
	lo, ln.l = t.split(ln.l, x)
	return lo, n
}

func (t *blockTree) remove(x *block) {
	t.root = t.rem(t.root, x)
	lx := t.links(x)
	lx.l, lx.r = nil, nil
}

func (t *blockTree) rem(n, x *block) *block {
	if n == nil {
		return nil // not in the tree
	}
	ln := t.links(n)
	if n == x {
		return t.merge(ln.l, ln.r)
	}
	if t.less(x, n) {
		ln.l = t.rem(ln.l, x)
	} else {
		ln.r = t.rem(ln.r, x)
	}
	return n
}

func (t *blockTree) merge(a, b *block) *block {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	la, lb := t.links(a), t.links(b)
	if la.prio > lb.prio {
		la.r = t.merge(la.r, b)
		return a
	}
	lb.l = t.merge(a, lb.l)
	return b
}

// ascend calls fn on the blocks of at least need bytes in the tree's
// order until fn returns false; it reports whether it went through all.
func (t *blockTree) ascend(need uint64, fn func(*block) bool) bool {
	return t.asc(t.root, need, fn)
}

func (t *blockTree) asc(n *block, need uint64, fn func(*block) bool) bool {
	if n == nil {
		return true
	}
	ln := t.links(n)
	if n.size >= need {
		if !t.asc(ln.l, need, fn) || !fn(n) {
			return false
		}
	}
	return t.asc(ln.r, need, fn)
}

// pendTree is the byPend tree of s, made if make is set.
func (p *memPool) pendTree(s *stream, make bool) *blockTree {
	t := p.byPend[s]
	if t == nil && make {
		if p.byPend == nil {
			p.byPend = map[*stream]*blockTree{}
		}
		t = &blockTree{links: byPendLinks, less: pendLess}
		p.byPend[s] = t
	}
	return t
}

// index files listed block b in the trees, and in the list of pending
// blocks if it is one.
func (p *memPool) index(b *block) {
	p.bySize.insert(b)
	if b.pending && len(b.deps) == 1 {
		b.pendOf = b.deps[0].s
		p.pendTree(b.pendOf, true).insert(b)
	}
	if b.pending {
		b.inPend, b.pprev, b.pnext = true, nil, p.pend
		if p.pend != nil {
			p.pend.pprev = b
		}
		p.pend = b
	}
}

// unindex takes b out of the trees and the list of pending blocks.
func (p *memPool) unindex(b *block) {
	p.bySize.remove(b)
	if b.inPend {
		if b.pprev != nil {
			b.pprev.pnext = b.pnext
		} else {
			p.pend = b.pnext
		}
		if b.pnext != nil {
			b.pnext.pprev = b.pprev
		}
		b.inPend, b.pprev, b.pnext = false, nil, nil
	}
	if s := b.pendOf; s != nil {
		t := p.pendTree(s, false)
		t.remove(b)
		if t.root == nil {
			delete(p.byPend, s)
		}
		b.pendOf = nil
	}
}

// rekey changes listed block b's key fields with change, keeping the
// trees in order.
func (p *memPool) rekey(b *block, change func()) {
	p.unindex(b)
	change()
	p.index(b)
}
