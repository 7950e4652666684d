// The ordered sets of streams a Pool's walkers visit (pool_walk.go).
//
// A walker visits listed streams in the order the pool first saw them
// (poolStream.seq), and steal stops at the first stream that has a chunk
// for it, so the sets must give the next stream after a given seq without
// listing or sorting the rest: with many streams that each keep an idle
// chunk, a walk that sorted every listed stream cost O(streams) per
// slow-path allocation. candTree is a treap keyed by seq whose nodes are
// the streams themselves (cl, cr), so listing allocates nothing; a
// node's priority is a hash of its seq, which makes the expected depth
// O(log n) whatever order streams are listed in. A stream is in at most
// one tree at a time (poolStream.tree says which), under Pool.aux.

package mr

// Which tree a stream is listed in (poolStream.tree).
const (
	treeNone uint8 = iota
	treeCands
	treeParked
)

// candTree is a set of streams ordered by seq.
type candTree struct {
	root *poolStream
	n    int
}

// candPrio is a node's treap priority: seq mixed (splitmix64's finalizer),
// so that streams listed in seq order still make a balanced tree.
func candPrio(st *poolStream) uint64 {
	x := st.seq
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// insert adds st, which is in no tree.
func (t *candTree) insert(st *poolStream) {
	st.cl, st.cr = nil, nil
	t.root = candInsert(t.root, st)
	t.n++
}

func candInsert(n, st *poolStream) *poolStream {
	if n == nil {
		return st
	}
	if st.seq < n.seq {
		n.cl = candInsert(n.cl, st)
		if l := n.cl; candPrio(l) > candPrio(n) {
			n.cl, l.cr = l.cr, n
			return l
		}
		return n
	}
	n.cr = candInsert(n.cr, st)
	if r := n.cr; candPrio(r) > candPrio(n) {
		n.cr, r.cl = r.cl, n
		return r
	}
	return n
}

// remove takes out st, which is in t.
func (t *candTree) remove(st *poolStream) {
	t.root = candRemove(t.root, st)
	st.cl, st.cr = nil, nil
	t.n--
}

func candRemove(n, st *poolStream) *poolStream {
	switch {
	case n == nil:
		return nil
	case n == st:
		return candMerge(n.cl, n.cr)
	case st.seq < n.seq:
		n.cl = candRemove(n.cl, st)
	default:
		n.cr = candRemove(n.cr, st)
	}
	return n
}

// candMerge joins two treaps, every seq of a below every seq of b.
func candMerge(a, b *poolStream) *poolStream {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	if candPrio(a) > candPrio(b) {
		a.cr = candMerge(a.cr, b)
		return a
	}
	b.cl = candMerge(a, b.cl)
	return b
}

// next returns the stream of smallest seq above after, or nil.
func (t *candTree) next(after uint64) *poolStream {
	var best *poolStream
	for n := t.root; n != nil; {
		if n.seq > after {
			best = n
			n = n.cl
		} else {
			n = n.cr
		}
	}
	return best
}
