package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// linearPending is the search the byPend trees replace: the best fitting
// pending block whose frees are all on s, the oldest free among equal
// sizes, by a walk of every free block.
func linearPending(p *memPool, s *stream, need uint64) *block {
	var best *block
	for x := p.free; x != nil; x = x.fnext {
		only := len(x.deps) > 0
		for _, f := range x.deps {
			only = only && f.s == s
		}
		if x.pending && x.size >= need && only &&
			(best == nil || x.size < best.size || x.size == best.size && (x.freed < best.freed || x.freed == best.freed && x.addr < best.addr)) {
			best = x
		}
	}
	return best
}

// linearScan is the search bySize replaces, by a walk of every free block.
func linearScan(p *memPool, s *stream, need uint64) (best, wait *block) {
	tail := p.tail()
	for x := p.free; x != nil; x = x.fnext {
		if x.size < need || x == tail {
			continue
		}
		ok, w, _ := p.usable(x, s)
		switch {
		case !ok:
		case len(w) == 0:
			if best == nil || x.size < best.size || x.size == best.size && x.addr < best.addr {
				best = x
			}
		default:
			if wait == nil || x.size < wait.size || x.size == wait.size && x.addr < wait.addr {
				wait = x
			}
		}
	}
	return best, wait
}

// treeOps drives a driver pool through the operations that next yields
// (each a number below 100 and a size between 256 B and 16 MiB; ok false
// ends the run) on four streams under the reuse policies pol (events,
// opportunistic, internal dependencies), and checks before each allocation
// that the trees give the blocks a walk of every free block would, and
// that they hold exactly the free blocks, the pending ones listed; before
// every operation, that the indexes keep their invariants (checkTrees). It
// returns how many searches it checked.
func treeOps(t *testing.T, pol [3]bool, next func() (op, size int, ok bool)) int {
	t.Helper()
	d, err := New(Config{Capacity: 512 << 20}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	gp, err := d.NewMemPool()
	if err != nil {
		t.Fatal(err)
	}
	p := gp.(*memPool)
	b2u := map[bool]uint64{false: 0, true: 1}
	for a, v := range map[gpu.PoolAttr]uint64{gpu.PoolReuseFollowEventDependencies: b2u[pol[0]],
		gpu.PoolReuseAllowOpportunistic: b2u[pol[1]], gpu.PoolReuseAllowInternalDependencies: b2u[pol[2]],
		gpu.PoolReleaseThreshold: 64 << 20} {
		if err := p.SetAttribute(a, v); err != nil {
			t.Fatal(err)
		}
	}
	var ss []*stream
	for range 4 {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s.(*stream))
	}
	type held struct {
		ptr  gpu.DevicePtr
		size int
	}
	var live []held
	checked := 0
	for step := 0; ; step++ {
		p.dev.mu.Lock()
		err := checkTrees(p)
		p.dev.mu.Unlock()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		op, size, ok := next()
		if !ok {
			return checked
		}
		s := ss[op%len(ss)]
		switch r := op % 100; {
		case r < 3:
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		case r < 6:
			e, err := d.NewEvent(false)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Record(ss[(op/4)%len(ss)]); err != nil {
				t.Fatal(err)
			}
			if err := s.WaitEvent(e); err != nil {
				t.Fatal(err)
			}
			e.Destroy()
		case r < 50 && len(live) > 0:
			i := size % len(live)
			if err := d.FreeAsync(live[i].ptr, s); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			p.dev.mu.Lock()
			s.mu.Lock()
			s.nextDepsLocked()
			need := roundUp(uint64(size), poolAlign)
			var got *block
			if tr := p.pendTree(s, false); tr != nil {
				tr.ascend(need, func(x *block) bool { got = x; return false })
			}
			if want := linearPending(p, s, need); got != want {
				t.Errorf("step %d: pending block %p, a walk finds %p", step, got, want)
			}
			// Frees complete on the device's workers meanwhile, which
			// may change what a stream may use without a wait: a step
			// whose walks before and after disagree is not compared.
			best0, wait0 := linearScan(p, s, need)
			c := p.scanLocked(s, need, false)
			p.scanWaitLocked(s, need, &c)
			if best, wait := linearScan(p, s, need); best == best0 && wait == wait0 && (c.best != best || c.wait != wait) {
				t.Errorf("step %d: blocks %p and %p behind waits, a walk finds %p and %p", step, c.best, c.wait, best, wait)
			}
			n, pend := 0, 0
			for x := p.free; x != nil; x = x.fnext {
				n++
				if x.pending {
					pend++
				}
			}
			inTree, inList := 0, 0
			p.bySize.ascend(0, func(*block) bool { inTree++; return true })
			for x := p.pend; x != nil; x = x.pnext {
				inList++
			}
			s.mu.Unlock()
			p.dev.mu.Unlock()
			if inTree != n || inList != pend {
				t.Fatalf("step %d: %d free blocks, %d in bySize; %d pending, %d listed", step, n, inTree, pend, inList)
			}
			checked++
			q, err := d.MallocFromPoolAsync(size, p, s)
			if err != nil {
				continue // out of memory: the model refuses as the walk did
			}
			live = append(live, held{q, size})
		}
	}
}

// The trees of a driver pool's free blocks give the blocks a walk of
// every free block would, through random allocations and frees on four
// streams (frees often on another stream than the allocation's), event
// waits and synchronizations, under three sets of reuse policies.
func TestPoolTreesMatchLinearScan(t *testing.T) {
	for _, pol := range []struct {
		name string
		pol  [3]bool
	}{{"all", [3]bool{true, true, true}}, {"none", [3]bool{}}, {"internal", [3]bool{false, false, true}}} {
		t.Run(pol.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 11))
			n := 0
			checked := treeOps(t, pol.pol, func() (int, int, bool) {
				n++
				size := 256 << rng.IntN(16)
				return rng.IntN(1 << 20), size + rng.IntN(size), n <= 3000
			})
			if checked < 1000 {
				t.Errorf("only %d searches checked", checked)
			}
		})
	}
}

// FuzzPoolTrees runs treeOps on operations read from the input, three
// bytes each: the operation (and its streams), the size's power of two and
// a part of it; the first byte picks the reuse policies.
func FuzzPoolTrees(f *testing.F) {
	f.Add([]byte{7, 60, 4, 1, 70, 9, 200, 20, 3, 77, 99, 12, 5, 10, 1, 0, 64, 8, 8, 2, 90, 2, 3})
	f.Add([]byte{0, 80, 12, 200, 81, 12, 100, 10, 0, 0, 60, 14, 1, 2, 3, 4, 99, 9, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 3*512 {
			return
		}
		pol := [3]bool{in[0]&1 != 0, in[0]&2 != 0, in[0]&4 != 0}
		in = in[1:]
		treeOps(t, pol, func() (int, int, bool) {
			if len(in) < 3 {
				return 0, 0, false
			}
			size := 256 << (in[1] % 17)
			op, size := int(in[0]), size+int(in[2])*size/256
			in = in[3:]
			return op, size, true
		})
	})
}

// checkTrees reports the first broken invariant of p's indexes (the file
// comment of pooltree.go): each tree in its order with its priorities a
// heap, bySize holding exactly the listed free blocks, each stream's byPend
// tree exactly the listed pending blocks whose one free is on it (and no
// tree empty), the list of pending blocks exactly the listed pending ones.
func checkTrees(p *memPool) error {
	walk := func(t *blockTree) ([]*block, error) {
		var out []*block
		var rec func(n *block, lim uint64) error
		rec = func(n *block, lim uint64) error {
			if n == nil {
				return nil
			}
			ln := t.links(n)
			if ln.prio > lim {
				return fmt.Errorf("block %#x: priority above its parent's", n.addr)
			}
			if err := rec(ln.l, ln.prio); err != nil {
				return err
			}
			if k := len(out); k > 0 && !t.less(out[k-1], n) {
				return fmt.Errorf("block %#x: out of order after %#x", n.addr, out[k-1].addr)
			}
			out = append(out, n)
			return rec(ln.r, ln.prio)
		}
		err := rec(t.root, ^uint64(0))
		return out, err
	}
	listed := map[*block]bool{}
	pendOf := map[*block]*stream{}
	pending := 0
	for x := p.free; x != nil; x = x.fnext {
		listed[x] = true
		if x.pending {
			pending++
			if len(x.deps) == 1 {
				pendOf[x] = x.deps[0].s
			}
		}
	}
	all, err := walk(&p.bySize)
	if err != nil {
		return fmt.Errorf("bySize: %w", err)
	}
	if len(all) != len(listed) {
		return fmt.Errorf("bySize holds %d blocks, the free list %d", len(all), len(listed))
	}
	for _, x := range all {
		if !listed[x] {
			return fmt.Errorf("bySize holds block %#x, not in the free list", x.addr)
		}
	}
	inPend := 0
	for s, t := range p.byPend {
		xs, err := walk(t)
		if err != nil {
			return fmt.Errorf("byPend of stream %d: %w", s.id, err)
		}
		if len(xs) == 0 {
			return fmt.Errorf("byPend of stream %d: empty tree kept", s.id)
		}
		for _, x := range xs {
			if pendOf[x] != s || x.pendOf != s {
				return fmt.Errorf("byPend of stream %d holds block %#x, not a pending block of its frees", s.id, x.addr)
			}
		}
		inPend += len(xs)
	}
	if inPend != len(pendOf) {
		return fmt.Errorf("byPend trees hold %d blocks, %d listed blocks are pending on one stream", inPend, len(pendOf))
	}
	n := 0
	for x := p.pend; x != nil; x = x.pnext {
		if !listed[x] || !x.pending || !x.inPend || x.pnext != nil && x.pnext.pprev != x {
			return fmt.Errorf("pending list: block %#x listed %v, pending %v", x.addr, listed[x], x.pending)
		}
		n++
	}
	if n != pending {
		return fmt.Errorf("pending list holds %d blocks, %d listed blocks are pending", n, pending)
	}
	return nil
}
