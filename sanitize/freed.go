// freedQueue: the order in which freed regions were remembered, so that
// the oldest beyond MaxFreed are forgotten. The sanitizer's own freed
// regions and its model of the driver's pools each keep one beside the
// index they look regions up in.
//
// Invariants: regions[head:] are the regions remembered, oldest first;
// regions[:head] are nil. A region forgotten here leaves its index and is
// marked dead, unless it was dead already (another allocation took its
// place in the index). The slice is compacted when more than half of it,
// and more than 1024 entries, lie before head, so it stays within twice
// the regions remembered.

package sanitize

type freedQueue struct {
	regions []*region
	head    int
}

// push remembers r as the newest freed region.
func (q *freedQueue) push(r *region) { q.regions = append(q.regions, r) }

// evict forgets the oldest regions beyond max, removing each from idx.
func (q *freedQueue) evict(idx *index, max int) {
	for len(q.regions)-q.head > max {
		old := q.regions[q.head]
		q.regions[q.head] = nil
		q.head++
		if !old.dead {
			idx.remove(old)
			old.dead = true
		}
	}
	if q.head > 1024 && q.head*2 > len(q.regions) {
		n := copy(q.regions, q.regions[q.head:])
		clear(q.regions[n:])
		q.regions = q.regions[:n]
		q.head = 0
	}
}
