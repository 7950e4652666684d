// Adopted streams: the resource serves streams made by code outside
// streamalloc (the legacy and per-thread default streams, which every
// backend can adopt without help), alone and next to streams of ours, and
// survives a wrapper being forgotten and the handle adopted again.

package mrtest

import (
	"runtime"

	"github.com/streamalloc/streamalloc/gpu"
)

// adopt adopts raw; the wrapper is forgotten at the end of the subtest,
// after finish, like the streams of e.stream.
func (e *env) adopt(raw uintptr) gpu.Stream {
	e.t.Helper()
	s, err := e.dev.AdoptStream(raw)
	if err != nil {
		e.t.Fatalf("AdoptStream(%#x): %v", raw, err)
	}
	e.t.Cleanup(func() {
		s.Synchronize()
		s.Destroy()
	})
	return s
}

// crossPairs allocates on from, writes, orders to after the write, checks
// and frees on to, and allocates again on from and overwrites at once:
// with the free unordered, to's check sees the overwrite (counter c).
func (e *env) crossPairs(from, to gpu.Stream, c int) {
	ev, err := e.dev.NewEvent(false)
	if err != nil {
		e.t.Fatal(err)
	}
	defer ev.Destroy()
	n := min(max(1<<20, e.opts.MinSize), e.opts.MaxSize)
	for i := range 8 {
		p := e.alloc(n, from)
		e.fill(from, p, n, uint32(i))
		if err := ev.Record(from); err != nil {
			e.t.Fatal(err)
		}
		if err := to.WaitEvent(ev); err != nil {
			e.t.Fatal(err)
		}
		e.check(to, p, n, uint32(i), c)
		e.free(p, n, to)
		q := e.alloc(n, from)
		e.fill(from, q, n, ^uint32(i))
		e.check(from, q, n, ^uint32(i), c+1)
		e.free(q, n, from)
	}
	if got := e.readCounter(c, to); got != 0 {
		e.t.Errorf("%d words read on the freeing stream were overwritten before its free", got)
	}
	if got := e.readCounter(c+1, from); got != 0 {
		e.t.Errorf("%d words of the allocating stream's memory changed", got)
	}
}

func testAdoptedStreams(e *env) {
	legacy := e.adopt(gpu.StreamLegacy)
	if again := e.adopt(gpu.StreamLegacy); again != legacy {
		e.t.Fatalf("adopting the legacy stream twice gave two streams (IDs %d, %d)", legacy.ID(), again.ID())
	}
	own := e.stream()

	// Alone, then on either side of a cross-stream free.
	n := min(max(64<<10, e.opts.MinSize), e.opts.MaxSize)
	p := e.alloc(n, legacy)
	e.fill(legacy, p, n, 3)
	e.check(legacy, p, n, 3, 0)
	e.free(p, n, legacy)
	e.crossPairs(own, legacy, 1)
	e.crossPairs(legacy, own, 3)

	// A forgotten wrapper, then the same handle adopted again: a fresh
	// stream ID to the resource, and the stream still works.
	old := legacy.ID()
	if err := legacy.Destroy(); err != nil {
		e.t.Fatalf("Destroy of the adopted legacy stream: %v", err)
	}
	again := e.adopt(gpu.StreamLegacy)
	if again.ID() == old {
		e.t.Fatalf("re-adopted legacy stream kept ID %d", old)
	}
	e.crossPairs(again, own, 5)

	// The per-thread default stream, on one locked thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pt := e.adopt(gpu.StreamPerThread)
	q := e.alloc(n, pt)
	e.fill(pt, q, n, 9)
	e.check(pt, q, n, 9, 7)
	e.free(q, n, pt)
	e.crossPairs(own, pt, 8)
	if got := e.readCounter(7, pt); got != 0 {
		e.t.Errorf("%d bad words on the per-thread stream", got)
	}
	if got := e.readCounter(0, again); got != 0 {
		e.t.Errorf("%d bad words on the legacy stream", got)
	}
}
