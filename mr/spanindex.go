// spanIndex: which of a resource's upstream spans (chunks, superblocks)
// holds an address.
//
// Lookups happen on every free that is not served from the calling
// stream's own lists and must not take a lock that other streams contend
// for, while spans are added and removed when a resource grows or
// releases. So the index is copy-on-write: readers load an immutable
// value through an atomic pointer and search it; writers, serialized by
// mu, build a new one and publish it.
//
// A single sorted slice would cost O(spans) to copy on every add, and a
// pool whose ten thousand streams each grow once would spend quadratic
// time there. So the value is a few sorted runs (levels) whose sizes
// differ by at least a factor of two, as in a log-structured merge tree:
// an add makes a run of one span and merges it with the runs no larger
// than twice it, so a span is copied O(log spans) times over its life,
// and a lookup binary-searches each run (at most about log2(spans) of
// them). Removals rebuild one merged run and come in batches (a release
// removes every span it frees in one call).
//
// Invariants: each run of the published value is sorted by base, no two
// spans of the value overlap, runs are ordered from largest to smallest
// with each at least twice the next; a published value is never modified.

package mr

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

type span[T any] struct {
	base gpu.DevicePtr
	size int
	v    T
}

// spanRuns is one published value of a spanIndex.
type spanRuns[T any] struct {
	runs [][]span[T]
	n    int
}

type spanIndex[T any] struct {
	mu  sync.Mutex
	cur atomic.Pointer[spanRuns[T]]
}

// find returns the value of the span holding p.
func (x *spanIndex[T]) find(p gpu.DevicePtr) (v T, base gpu.DevicePtr, ok bool) {
	r := x.cur.Load()
	if r == nil {
		return v, 0, false
	}
	for _, s := range r.runs {
		// The last span whose base is <= p.
		i, _ := slices.BinarySearchFunc(s, p, func(e span[T], p gpu.DevicePtr) int {
			if e.base <= p {
				return -1
			}
			return 1
		})
		if i == 0 {
			continue
		}
		e := &s[i-1]
		if uint64(p-e.base) < uint64(e.size) {
			return e.v, e.base, true
		}
	}
	return v, 0, false
}

// add publishes a span; it must not overlap the others (upstream memory
// never does).
func (x *spanIndex[T]) add(base gpu.DevicePtr, size int, v T) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var old [][]span[T]
	n := 0
	if r := x.cur.Load(); r != nil {
		old, n = r.runs, r.n
	}
	run := []span[T]{{base: base, size: size, v: v}}
	k := len(old)
	for k > 0 && len(old[k-1]) <= 2*len(run) {
		run = mergeSpans(old[k-1], run)
		k--
	}
	runs := make([][]span[T], 0, k+1)
	runs = append(append(runs, old[:k]...), run)
	x.cur.Store(&spanRuns[T]{runs: runs, n: n + 1})
}

// mergeSpans returns the sorted union of two sorted runs, in a new slice.
func mergeSpans[T any](a, b []span[T]) []span[T] {
	out := make([]span[T], 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].base < b[0].base {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// remove unpublishes the spans whose bases are in bases.
func (x *spanIndex[T]) remove(bases map[gpu.DevicePtr]bool) {
	if len(bases) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.cur.Load()
	if r == nil {
		return
	}
	s := make([]span[T], 0, r.n)
	for _, run := range r.runs {
		for _, e := range run {
			if !bases[e.base] {
				s = append(s, e)
			}
		}
	}
	slices.SortFunc(s, func(a, b span[T]) int { return cmp.Compare(a.base, b.base) })
	next := &spanRuns[T]{n: len(s)}
	if len(s) > 0 {
		next.runs = [][]span[T]{s}
	}
	x.cur.Store(next)
}

// len is the number of published spans.
func (x *spanIndex[T]) len() int {
	if r := x.cur.Load(); r != nil {
		return r.n
	}
	return 0
}

// visit calls fn with every published span in order of base, allocating
// nothing: a merge of the runs, each step taking the smallest head.
func (x *spanIndex[T]) visit(fn func(e *span[T])) {
	r := x.cur.Load()
	if r == nil {
		return
	}
	var pos [64]int // runs are at most about log2(spans): far fewer
	runs := r.runs[:min(len(r.runs), len(pos))]
	for {
		best := -1
		for i, run := range runs {
			if pos[i] < len(run) && (best < 0 || run[pos[i]].base < runs[best][pos[best]].base) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		fn(&runs[best][pos[best]])
		pos[best]++
	}
}

// all returns the published spans sorted by base, in a new slice.
func (x *spanIndex[T]) all() []span[T] {
	r := x.cur.Load()
	if r == nil {
		return nil
	}
	var s []span[T]
	for _, run := range r.runs {
		s = mergeSpans(s, run)
	}
	return s
}
