package sim

import (
	"fmt"
	"github.com/streamalloc/streamalloc/gpu"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// flat is c as one run: each stream's component.
func flat(c clock) vclock {
	var out vclock
	for _, r := range c {
		out = mergeRuns(out, r, func(tick) bool { return true })
	}
	return out
}

func TestVClock(t *testing.T) {
	a := clock{{{1, 5}, {3, 2}}}
	never := func(id, seq uint64) bool { return false }
	if a.get(2) != 0 || a.get(3) != 2 || a.get(1) != 5 {
		t.Error("get")
	}
	for _, tc := range []struct {
		name  string
		w     clock
		x     tick
		self  uint64
		known func(id, seq uint64) bool
		want  vclock
		grew  bool
	}{
		{"pointwise max", clock{{{2, 7}, {3, 4}}}, tick{}, 0, never, vclock{{1, 5}, {2, 7}, {3, 4}}, true},
		{"over several runs", clock{{{2, 7}, {3, 4}}, {{2, 9}}}, tick{}, 0, never, vclock{{1, 5}, {2, 9}, {3, 4}}, true},
		{"nothing new", clock{{{1, 4}, {3, 2}}}, tick{3, 1}, 0, never, vclock{{1, 5}, {3, 2}}, false},
		{"the tick alone", nil, tick{2, 9}, 0, never, vclock{{1, 5}, {2, 9}, {3, 2}}, true},
		{"the tick raises a component", clock{{{3, 3}}}, tick{3, 6}, 0, never, vclock{{1, 5}, {3, 6}}, true},
		{"the tick first", nil, tick{0, 1}, 9, never, vclock{{0, 1}, {1, 5}, {3, 2}}, true},
		{"own stream left out", clock{{{4, 1}, {9, 8}}}, tick{9, 9}, 9, never, vclock{{1, 5}, {3, 2}, {4, 1}}, true},
		{"only the own stream: nothing new", clock{{{9, 8}}}, tick{9, 9}, 9, never, vclock{{1, 5}, {3, 2}}, false},
		{"what the host knows is dropped, from the old run too", clock{{{2, 7}, {4, 1}}}, tick{}, 0,
			func(id, seq uint64) bool { return id == 1 || id == 4 }, vclock{{2, 7}, {3, 2}}, true},
		{"what the host knows adds nothing", clock{{{4, 1}}}, tick{6, 2}, 0,
			func(id, seq uint64) bool { return id >= 4 }, vclock{{1, 5}, {3, 2}}, false},
	} {
		got, grew := a.joinPruned(tc.w, tc.x, tc.self, tc.known)
		if grew != tc.grew || !slices.Equal(flat(got), tc.want) {
			t.Errorf("%s: joinPruned = %v, %v; want %v, %v", tc.name, got, grew, tc.want, tc.grew)
		}
		if !grew && &got[0] != &a[0] {
			t.Errorf("%s: nothing added, but a new clock made", tc.name)
		}
	}
	if !slices.Equal(flat(a), vclock{{1, 5}, {3, 2}}) || len(a) != 1 {
		t.Errorf("joinPruned changed its receiver: %v", a)
	}
}

// A clock that one stream after another joins keeps O(log n) runs and
// every component, and each clock made on the way stays as it was.
func TestClockRuns(t *testing.T) {
	never := func(id, seq uint64) bool { return false }
	var c clock
	var kept []clock
	const n = 5000
	for i := range uint64(n) {
		next, grew := c.joinPruned(nil, tick{i + 1, i + 2}, 0, never)
		if !grew {
			t.Fatalf("stream %d added nothing", i+1)
		}
		c = next
		if i%1000 == 0 {
			kept = append(kept, c)
		}
	}
	if len(c) > 2*14 { // 2 log2(5000)
		t.Errorf("%d runs for %d components", len(c), n)
	}
	if got := flat(c); len(got) != n || got[0] != (tick{1, 2}) || got[n-1] != (tick{n, n + 1}) {
		t.Errorf("%d components, first %v, last %v", len(got), got[0], got[len(got)-1])
	}
	for k, old := range kept {
		if got := len(flat(old)); got != 1000*k+1 {
			t.Errorf("the clock kept after %d joins has %d components", 1000*k+1, got)
		}
	}
}

// FuzzAddrSpace checks the address-space allocator against a reference:
// returned ranges are aligned, inside the space, never overlap a live one,
// and releasing everything restores a single free range.
func FuzzAddrSpace(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 4, 255, 9})
	f.Add([]byte{0, 0, 0, 0, 128, 128, 128})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const base, size = 1 << 20, 64 << 20
		as := newAddrSpace(base, size)
		type rng struct{ base, size uint64 }
		var live []rng
		for i, op := range ops {
			if op >= 128 && len(live) > 0 {
				k := int(op) % len(live)
				as.release(live[k].base, live[k].size)
				live = slices.Delete(live, k, k+1)
				continue
			}
			n := uint64(op%32+1) * 256 << (op % 4 * 3)
			a := uint64(align)
			if n >= bigAlign {
				a = bigAlign
			}
			p, ok := as.alloc(n, a)
			if !ok {
				continue
			}
			if p%a != 0 || p < base || p+n > base+size {
				t.Fatalf("op %d: alloc(%d, %d) = %#x: misaligned or outside", i, n, a, p)
			}
			for _, r := range live {
				if p < r.base+r.size && r.base < p+n {
					t.Fatalf("op %d: [%#x,+%d) overlaps live [%#x,+%d)", i, p, n, r.base, r.size)
				}
			}
			live = append(live, rng{p, n})
		}
		for _, r := range live {
			as.release(r.base, r.size)
		}
		if len(as.free) != 1 || as.free[0] != (span{base, size}) {
			t.Fatalf("after releasing everything: %v", as.free)
		}
	})
}

func TestParsePTX(t *testing.T) {
	for _, c := range []struct {
		text string
		want map[string][]int
		bad  bool
	}{
		{"", nil, true},
		{".target sm_70 .entry x() {}", nil, true},
		{".version 8.0\n", map[string][]int{}, false},
		{".version 7.0\n.visible .entry a(\n\t.param .u64 p,\n\t.param .u32 n\n)\n{ ret; }\n.entry b() { }\n.entry c\n{ }",
			map[string][]int{"a": {8, 4}, "b": {}, "c": {}}, false},
		{".version 7.0 /* .entry hidden(.param .u64 x) */ // .entry alsohidden()\n.entry d(.param .align 8 .b64 x, .param .f32 y, .param .s64 z, .param .f64 w)",
			map[string][]int{"d": {8, 4, 8, 8}}, false},
		{".version 7.0\n.entry e(.param .u64 .ptr .global .align 16 p)", map[string][]int{"e": {8}}, false},
		{".version 7.0\n.entry f(.param .align 8 .b8 arr[16], .param .u32 n)", map[string][]int{"f": nil}, false},
		{".version 7.0\n.entry g(.param .u16 h)", map[string][]int{"g": nil}, false},
	} {
		got, err := parsePTX(c.text)
		if (err != nil) != c.bad {
			t.Errorf("parsePTX(%q): error %v, want bad %v", c.text, err, c.bad)
			continue
		}
		if c.bad {
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("parsePTX(%q) = %v, want %v", c.text, got, c.want)
		}
		for name, sizes := range c.want {
			g, ok := got[name]
			if !ok || !slices.Equal(g, sizes) || (g == nil) != (sizes == nil) {
				t.Errorf("parsePTX(%q)[%s] = %v (present %v), want %v", c.text, name, g, ok, sizes)
			}
		}
	}
}

// FuzzParsePTX: any text parses or fails cleanly, and every entry found
// is a name that appears after .entry in the text.
func FuzzParsePTX(f *testing.F) {
	f.Add(".version 7.0\n.entry a(.param .u64 p) {}")
	f.Add(".version 7.0 .entry b( .param .u32 x , .param .f64 y )")
	f.Add("/* .version */ .entry")
	f.Fuzz(func(t *testing.T, text string) {
		entries, err := parsePTX(text)
		if err != nil {
			return
		}
		for name, sizes := range entries {
			if name == "" || !strings.Contains(text, name) {
				t.Fatalf("entry %q not in the text", name)
			}
			for _, s := range sizes {
				if s != 4 && s != 8 {
					t.Fatalf("entry %q: parameter size %d", name, s)
				}
			}
		}
	})
}

// TestPoolModel runs random pool operations and checks the pool's
// accounting and layout after each against a reference (see poolModel).
func TestPoolModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 1))
			// Half the seeds use more streams than a block lists
			// frees of before it indexes them (depIndexFrom).
			streams := 3
			if seed%2 == 1 {
				streams = 2 * depIndexFrom
			}
			poolModel(t, streams, 300, rnd.IntN)
		})
	}
}

// FuzzPoolModel is TestPoolModel with the choices taken from the input.
func FuzzPoolModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 5, 6, 7, 8, 9, 0, 4, 0})
	f.Add([]byte{1, 200, 1, 100, 7, 0, 0, 2, 7, 1, 1, 8, 9, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		next := func(n int) int {
			if i >= len(data) {
				return 0
			}
			v := int(data[i])
			i++
			return v % n
		}
		poolModel(t, 1+next(2*depIndexFrom), min(len(data), 200), next)
	})
}

// poolModel runs, on the given number of streams, steps pool operations chosen by next(n) (in [0, n)) and
// checks after each: used is the sum of the live blocks (rounded to 256),
// reserved covers them in whole 2 MiB chunks, blocks tile their chunks and
// free neighbours are coalesced unless one's free is pending on a stream
// the other's is not, the free list holds exactly the free
// blocks, live blocks are disjoint, and the device charge equals what is
// reserved. At the end everything is freed and trimmed back to zero.
func poolModel(t *testing.T, streams, steps int, next func(int) int) {
	t.Helper()
	d := New(Config{Capacity: 64 << 20}).devices[0]
	var ss []*stream
	for range streams {
		gs, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, gs.(*stream))
	}
	p := d.defPool
	type live struct {
		p    uint64
		size uint64
	}
	var lives []live
	for step := range steps {
		switch r := next(10); {
		case r < 5:
			size := uint64(1 + next(3<<20))
			ptr, err := d.MallocAsync(int(size), ss[next(len(ss))])
			if err != nil {
				continue // out of memory is fine; checked below
			}
			lives = append(lives, live{uint64(ptr), size})
		case r < 8 && len(lives) > 0:
			k := next(len(lives))
			if err := d.FreeAsync(gpuPtr(lives[k].p), ss[next(len(ss))]); err != nil {
				t.Fatal(err)
			}
			lives = slices.Delete(lives, k, k+1)
		case r == 8:
			if err := ss[next(len(ss))].Synchronize(); err != nil {
				t.Fatal(err)
			}
		default:
			if err := p.SetAttribute(4, uint64(next(3))<<21); err != nil {
				t.Fatal(err)
			}
		}
		d.mu.Lock()
		var used uint64
		for _, l := range lives {
			used += roundUp(max(l.size, 1), poolAlign)
		}
		if p.used != used {
			t.Fatalf("step %d: used %d, want %d", step, p.used, used)
		}
		// Free neighbours whose frees completed since are merged at the
		// next allocation or release; merge them now. Then no two free
		// neighbours both wait for running frees on the same streams
		// (frees that complete while this runs make pairs coalescible
		// that were not: not checked).
		p.settleLocked()
		var reserved, inChunks uint64
		listed := map[*block]bool{}
		for x := p.free; x != nil; x = x.fnext {
			if !x.free || listed[x] || (x.fnext != nil && x.fnext.fprev != x) {
				t.Fatalf("step %d: free list corrupt", step)
			}
			listed[x] = true
		}
		nfree := 0
		for _, h := range p.heaps {
			reserved += uint64(h.mapped) * vmGranule
			if h.end%vmGranule != 0 || h.end > h.seg.size {
				t.Fatalf("heap range of %d bytes", h.end)
			}
			end := h.seg.base
			var last *block
			for b := h.first; b != nil; b = b.next {
				if b.addr != end || b.heap != h || (b.next != nil && b.free && b.next.free && !b.settled() && !b.next.settled() && sameStreams(b, b.next)) {
					t.Fatalf("step %d: heap blocks not contiguous or not coalesced", step)
				}
				seen := map[*stream]bool{}
				for i, f := range b.deps {
					if seen[f.s] || b.depOn(f.s) != i || (b.allDue && !f.due()) {
						t.Fatalf("step %d: a block's frees: two on one stream, the index wrong, or one pending though all are due", step)
					}
					seen[f.s] = true
				}
				if b.depAt != nil && len(b.depAt) != len(b.deps) || !b.free && (b.deps != nil || b.depAt != nil) {
					t.Fatalf("step %d: a block's frees and their index disagree, or an allocated block keeps frees", step)
				}
				if _, ok := p.apart[b]; b.next != nil && b.free && b.next.free && !ok {
					t.Fatalf("step %d: free neighbours kept apart, the first not noted for settleLocked", step)
				}
				end += b.size
				last = b
				if !b.free {
					inChunks += b.size
					if h.unmappedIn(b.addr-h.seg.base, b.addr-h.seg.base+b.size) != 0 {
						t.Fatalf("step %d: live block over unmapped pages", step)
					}
				} else {
					nfree++
					if !listed[b] {
						t.Fatalf("step %d: free block not listed", step)
					}
				}
			}
			if end != h.seg.base+h.end || last != h.last {
				t.Fatalf("blocks do not cover their heap")
			}
		}
		if nfree != len(listed) {
			t.Fatalf("step %d: %d free blocks, %d listed", step, nfree, len(listed))
		}
		if p.reserved != reserved || inChunks != used || d.committed != reserved || reserved > d.capacity {
			t.Fatalf("step %d: reserved %d (chunks %d), used in chunks %d of %d, committed %d",
				step, p.reserved, reserved, inChunks, used, d.committed)
		}
		slices.SortFunc(lives, func(a, b live) int { return int(int64(a.p - b.p)) })
		for i := 1; i < len(lives); i++ {
			if lives[i-1].p+lives[i-1].size > lives[i].p {
				t.Fatalf("live blocks overlap")
			}
		}
		d.mu.Unlock()
	}
	for _, l := range lives {
		if err := d.FreeAsync(gpuPtr(l.p), ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetAttribute(4, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.TrimTo(0); err != nil {
		t.Fatal(err)
	}
	if p.reserved != 0 || p.used != 0 || d.committed != 0 {
		t.Fatalf("after freeing and trimming everything: reserved %d used %d committed %d", p.reserved, p.used, d.committed)
	}
}

func gpuPtr(p uint64) gpu.DevicePtr { return gpu.DevicePtr(p) }
