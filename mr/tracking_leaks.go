// Allocations that the garbage collector found dropped: an owner (a
// buf.Buffer) that became unreachable while its memory was still
// allocated, and whose safety net freed it. Such a free is correct but a
// leak in the program all the same (the memory was held until the next
// collection, and the code that should have closed it did not), so
// Tracking keeps a record of them for the leak report.
//
// Invariants: leakedCount counts every MarkLeaked that found its pointer
// live; leaked holds the last maxLeaked of them, oldest first, each with
// the stack that allocated it. MarkLeaked changes nothing else: the free
// that follows goes through Deallocate as any other.

package mr

import (
	"bufio"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// maxLeaked bounds the leaked allocations a Tracking adaptor remembers.
const maxLeaked = 64

// trackingLeaks is the record of collected allocations of one Tracking.
type trackingLeaks struct {
	mu     sync.Mutex
	count  uint64
	leaked []Allocation // the last maxLeaked, oldest first
}

// Lookup returns the live allocation at p, with the stack that made it.
func (t *Tracking) Lookup(p gpu.DevicePtr) (Allocation, bool) {
	r, ok := t.live.lookup(p)
	if !ok {
		return Allocation{}, false
	}
	return Allocation{Ptr: p, Size: r.size, Stream: r.v.stream, Seq: r.v.seq, Stack: r.v.stack.pcs,
		Labels: r.v.stack.labels.Map()}, true
}

// MarkLeaked records that the live allocation at p was dropped by its
// owner without a free and is about to be freed by a safety net (buf
// calls it when the garbage collector collects an open buffer). It returns
// the allocation, with its stack, and false if p is not live here. The
// leak report lists the last such allocations.
func (t *Tracking) MarkLeaked(p gpu.DevicePtr) (Allocation, bool) {
	a, ok := t.Lookup(p)
	if !ok {
		return a, false
	}
	t.leaks.mu.Lock()
	t.leaks.count++
	if len(t.leaks.leaked) == maxLeaked {
		copy(t.leaks.leaked, t.leaks.leaked[1:])
		t.leaks.leaked = t.leaks.leaked[:maxLeaked-1]
	}
	t.leaks.leaked = append(t.leaks.leaked, a)
	t.leaks.mu.Unlock()
	return a, true
}

// Leaked returns how many allocations MarkLeaked recorded, and the last
// of them (at most 64), oldest first.
func (t *Tracking) Leaked() (count uint64, last []Allocation) {
	t.leaks.mu.Lock()
	defer t.leaks.mu.Unlock()
	return t.leaks.count, append([]Allocation(nil), t.leaks.leaked...)
}

// writeLeaked writes the section of the leak report about allocations the
// garbage collector freed for their owners.
func (t *Tracking) writeLeaked(bw *bufio.Writer) {
	n, last := t.Leaked()
	if n == 0 {
		return
	}
	fmt.Fprintf(bw, "\n%s dropped by their owners without a free and freed by the garbage collector",
		plural(n, "allocation was", "allocations were"))
	if uint64(len(last)) < n {
		fmt.Fprintf(bw, "; the last %d", len(last))
	}
	bw.WriteString(":\n")
	for _, a := range last {
		fmt.Fprintf(bw, "\n%s at %#x (stream %d, allocation #%d), allocated at:\n",
			FormatBytes(uint64(a.Size)), uint64(a.Ptr), a.Stream, a.Seq)
		for _, f := range trimFrames(a.Frames()) {
			fmt.Fprintf(bw, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		}
	}
}
