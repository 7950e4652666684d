package sanitize_test

import (
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/sanitize"
)

// hbModel is the reference for the sanitizer's happens-before relation:
// an explicit graph of operations, each with edges to the operations it
// is ordered after (the previous one on its stream, the record an event
// wait waits on, everything the host has seen complete), and reachability
// by search. It has none of the sanitizer's cleverness (no clocks, no
// epochs), so the two agreeing on random programs is good evidence that
// the clocks are right.
type hbModel struct {
	preds [][]int // preds[n]: the nodes n is directly after
	last  map[int]int
	host  []int // nodes the host has seen complete
}

func (m *hbModel) node(stream int, extra ...int) int {
	n := len(m.preds)
	var p []int
	if l, ok := m.last[stream]; ok {
		p = append(p, l)
	}
	p = append(p, m.host...)
	p = append(p, extra...)
	m.preds = append(m.preds, p)
	m.last[stream] = n
	return n
}

// hb reports whether a happens before b (a != b).
func (m *hbModel) hb(a, b int) bool {
	seen := make([]bool, len(m.preds))
	stack := []int{b}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, p := range m.preds[n] {
			if p == a {
				return true
			}
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return false
}

type modelRegion struct {
	base      gpu.DevicePtr
	allocNode int
	allocS    int
	live      bool
	freeNode  int
	lastWrite int // -1: none
	reads     map[int]int
}

// FuzzSanitizerModel runs random programs of allocations, frees, uses,
// event records and waits, and host synchronizations on three streams, and
// checks that the sanitizer reports exactly the hazards the model finds.
func FuzzSanitizerModel(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 0, 1, 2, 0, 2, 3, 0, 1, 4, 1, 5, 0, 1})
	f.Add([]byte{0, 1, 3, 0, 1, 0, 6, 0, 2, 0, 2, 1, 0, 7, 0, 0, 2})
	f.Add([]byte{0, 0, 2, 0, 0, 1, 1, 0, 2, 2, 0, 0, 3, 0, 0, 4, 1, 2, 1, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			data = data[:400]
		}
		var got []sanitize.Kind
		z := sanitize.New(sanitize.Options{
			OnReport:   func(r *sanitize.Report) { got = append(got, r.Kind) },
			StackDepth: -1,
		})
		up := newFakeRes()
		res := z.Resource(up)
		streams := []*fakeStream{newFakeStream(), newFakeStream(), newFakeStream()}
		for _, s := range streams {
			s.busy = true // no free is ever known complete but by the host
		}
		events := []*fakeEvent{{}, {}}
		eventNode := []int{-1, -1}
		m := &hbModel{last: map[int]int{}}
		var regions []*modelRegion
		var want []sanitize.Kind

		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		for len(data) > 0 {
			op := next() % 8
			si := next() % len(streams)
			s := streams[si]
			switch op {
			case 0: // allocate, reusing a freed address when asked
				var reuse *modelRegion
				if k := next(); k%2 == 1 {
					for _, r := range regions {
						if !r.live && r.freeNode >= 0 {
							reuse = r
							break
						}
					}
				}
				if reuse != nil {
					up.reuse = append(up.reuse, reuse.base)
				}
				p, err := res.Allocate(256, s)
				must(t, err)
				n := m.node(si)
				if reuse != nil {
					if !m.hb(reuse.freeNode, n) {
						want = append(want, sanitize.ReuseBeforeFree)
					}
					reuse.freeNode = -1 // superseded
				}
				regions = append(regions, &modelRegion{base: p, allocNode: n, allocS: si, live: true, lastWrite: -1, reads: map[int]int{}})
			case 1, 2: // use (read or write)
				if len(regions) == 0 {
					continue
				}
				r := regions[next()%len(regions)]
				if !r.live && r.freeNode < 0 {
					continue // reused: the address belongs to another region
				}
				a := buf.Read
				if op == 2 {
					a = buf.Write
				}
				must(t, z.Use(r.base, 256, s, a))
				n := m.node(si)
				if !r.live {
					want = append(want, sanitize.UseAfterFree)
					continue
				}
				if !m.hb(r.allocNode, n) {
					want = append(want, sanitize.UseBeforeAlloc)
				}
				if r.lastWrite >= 0 && !m.hb(r.lastWrite, n) {
					want = append(want, sanitize.Race)
				}
				if a == buf.Write {
					for _, rs := range sortedKeys(r.reads) {
						if rd := r.reads[rs]; !m.hb(rd, n) {
							want = append(want, sanitize.Race)
						}
					}
					r.lastWrite, r.reads = n, map[int]int{}
				} else {
					r.reads[si] = n
				}
			case 3: // free
				var r *modelRegion
				for _, c := range regions {
					if c.live {
						r = c
						if next()%2 == 0 {
							break
						}
					}
				}
				if r == nil {
					continue
				}
				must(t, res.Deallocate(r.base, 256, s))
				var extra []int
				if r.allocS != si {
					// The resource orders the free after the
					// allocation's stream.
					extra = append(extra, m.last[r.allocS])
				}
				n := m.node(si, extra...)
				var kinds int
				if !m.hb(r.allocNode, n) {
					kinds++
				}
				if r.lastWrite >= 0 && !m.hb(r.lastWrite, n) {
					kinds++
				}
				for _, rs := range sortedKeys(r.reads) {
					if !m.hb(r.reads[rs], n) {
						kinds++
					}
				}
				for range kinds {
					want = append(want, sanitize.FreeBeforeUse)
				}
				r.live, r.freeNode = false, n
			case 4: // record an event
				ei := next() % len(events)
				must(t, z.RecordEvent(events[ei], s))
				eventNode[ei] = m.node(si)
			case 5: // wait on an event
				ei := next() % len(events)
				must(t, z.WaitEvent(s, events[ei]))
				if eventNode[ei] >= 0 {
					m.node(si, eventNode[ei])
				}
			case 6: // the host synchronizes a stream
				must(t, z.Synchronize(s))
				if l, ok := m.last[si]; ok {
					m.host = append(m.host, l)
				}
			case 7: // the host synchronizes an event
				ei := next() % len(events)
				must(t, z.SynchronizeEvent(events[ei]))
				if eventNode[ei] >= 0 {
					m.host = append(m.host, eventNode[ei])
				}
			}
		}
		// Reports of one operation come in a fixed order in both; compare
		// as multisets per program to keep the model simple.
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("sanitizer reported %v, model expects %v", got, want)
		}
	})
}

func sortedKeys(m map[int]int) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
