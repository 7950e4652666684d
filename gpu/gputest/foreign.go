// Conformance of foreign handles: streams, events and pools made outside
// streamalloc, adopted, used for real work next to our own, and left to
// their owner (package gpu's section on foreign handles).

package gputest

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// Foreign makes and destroys raw handles the way code outside streamalloc
// does (cuStreamCreate, cuEventCreate, cuMemPoolCreate on the device's
// primary context). The simulator's Device implements it; on CUDA a test
// implements it over package cuda.
type Foreign interface {
	NewRawStream() (uintptr, error)
	DestroyRawStream(raw uintptr) error
	NewRawEvent(timing bool) (uintptr, error)
	DestroyRawEvent(raw uintptr) error
	NewRawMemPool() (uintptr, error)
	DestroyRawMemPool(raw uintptr) error
}

// RunAdoption runs the conformance suite of foreign handles on dev, whose
// foreign handles f makes, as subtests of t.
func RunAdoption(t *testing.T, dev gpu.Device, f Foreign) {
	t.Helper()
	for _, c := range []struct {
		name string
		fn   func(*testing.T, gpu.Device, Foreign)
	}{
		{"Stream", testAdoptStream},
		{"OwnHandles", testAdoptOwn},
		{"LegacyStream", testAdoptLegacy},
		{"PerThreadStream", testAdoptPerThread},
		{"Event", testAdoptEvent},
		{"MemPool", testAdoptMemPool},
		{"CurrentMemPool", testCurrentMemPool},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, dev, f) })
	}
}

// fillAndCheckAcross writes a pattern on from into memory allocated there,
// orders to on an event, and checks it there: the adopted stream does
// real, ordered work next to ours.
func fillAndCheckAcross(t *testing.T, dev gpu.Device, from, to gpu.Stream) {
	t.Helper()
	const n = 1 << 16
	k := load(t, dev)
	errs := newCounter(t, dev, to)
	must(t, to.Synchronize())
	e := newEvent(t, dev, false)
	p, err := dev.MallocAsync(4*n, from)
	must(t, err)
	must(t, k.Spin(from, 20*time.Millisecond))
	must(t, k.Fill(from, p, n, 11))
	must(t, e.Record(from))
	must(t, to.WaitEvent(e))
	must(t, k.Check(to, p, n, 11, errs.p))
	must(t, dev.FreeAsync(p, to))
	if got := errs.read(t, to); got != 0 {
		t.Fatalf("%d words wrong after the event wait", got)
	}
}

func adoptStream(t *testing.T, dev gpu.Device, raw uintptr) gpu.Stream {
	t.Helper()
	s, err := dev.AdoptStream(raw)
	must(t, err)
	return s
}

func testAdoptStream(t *testing.T, dev gpu.Device, f Foreign) {
	raw, err := f.NewRawStream()
	must(t, err)
	own := newStream(t, dev)
	a := adoptStream(t, dev, raw)
	if b := adoptStream(t, dev, raw); b != a {
		t.Fatalf("adopting %#x twice gave two streams (IDs %d, %d)", raw, a.ID(), b.ID())
	}
	if a.ID() == 0 || a.ID() == own.ID() {
		t.Fatalf("adopted stream ID %d (own stream %d): want a fresh non-zero ID", a.ID(), own.ID())
	}
	if got, ok := gpu.RawOf(a); !ok || got != raw {
		t.Fatalf("RawOf(adopted) = %#x, %v; want %#x", got, ok, raw)
	}
	if a.Device() != dev {
		t.Fatalf("adopted stream's device %v, want %v", a.Device(), dev)
	}
	fillAndCheckAcross(t, dev, a, own)
	fillAndCheckAcross(t, dev, own, a)
	must(t, a.Synchronize())
	must(t, a.Query())

	// Destroy forgets the wrapper only.
	must(t, a.Destroy())
	wantErr(t, "second Destroy of the wrapper", a.Destroy(), gpu.ErrDestroyed)
	wantErr(t, "Synchronize through a destroyed wrapper", a.Synchronize(), gpu.ErrDestroyed)
	_, err = dev.MallocAsync(256, a)
	wantErr(t, "MallocAsync on a destroyed wrapper", err, gpu.ErrDestroyed)
	c := adoptStream(t, dev, raw)
	if c == a || c.ID() == a.ID() {
		t.Fatalf("re-adoption after Destroy: same wrapper or ID %d", c.ID())
	}
	fillAndCheckAcross(t, dev, c, own) // the stream itself lives on
	must(t, c.Destroy())
	must(t, f.DestroyRawStream(raw)) // and is still its owner's to destroy
}

func testAdoptOwn(t *testing.T, dev gpu.Device, f Foreign) {
	s := newStream(t, dev)
	raw, ok := gpu.RawOf(s)
	if !ok {
		t.Fatalf("stream %T has no raw handle", s)
	}
	if a := adoptStream(t, dev, raw); a != s {
		t.Fatalf("adopting our own stream's handle %#x gave another stream (ID %d, want %d)", raw, a.ID(), s.ID())
	}
	e := newEvent(t, dev, false)
	raw, ok = gpu.RawOf(e)
	if !ok {
		t.Fatalf("event %T has no raw handle", e)
	}
	if a, err := dev.AdoptEvent(raw); err != nil || a != e {
		t.Fatalf("adopting our own event's handle: %v, %v; want the event itself", a, err)
	}
	def, err := dev.DefaultMemPool()
	must(t, err)
	raw, ok = gpu.RawOf(def)
	if !ok {
		t.Fatalf("pool %T has no raw handle", def)
	}
	if a, err := dev.AdoptMemPool(raw); err != nil || a != def {
		t.Fatalf("adopting the default pool's handle: %v, %v; want the default pool", a, err)
	}
	wantErr(t, "Destroy of the default pool adopted", def.Destroy(), gpu.ErrInvalidValue)
}

func testAdoptLegacy(t *testing.T, dev gpu.Device, f Foreign) {
	l := adoptStream(t, dev, gpu.StreamLegacy)
	if again := adoptStream(t, dev, gpu.StreamLegacy); again != l {
		t.Fatal("adopting the legacy stream twice gave two streams")
	}
	if raw, ok := gpu.RawOf(l); !ok || raw != 0 {
		t.Fatalf("RawOf(legacy) = %#x, %v; want 0", raw, ok)
	}
	own := newStream(t, dev)
	if l.ID() == 0 || l.ID() == own.ID() {
		t.Fatalf("legacy stream ID %d: want a fresh non-zero ID", l.ID())
	}
	fillAndCheckAcross(t, dev, l, own)
	fillAndCheckAcross(t, dev, own, l)
	must(t, l.Destroy())
	l2 := adoptStream(t, dev, gpu.StreamLegacy)
	if l2.ID() == l.ID() {
		t.Fatal("re-adopted legacy stream kept the forgotten wrapper's ID")
	}
	must(t, l2.Synchronize())
	must(t, l2.Destroy())
}

func testAdoptPerThread(t *testing.T, dev gpu.Device, f Foreign) {
	// One goroutine per OS thread, both locked for the whole test.
	type adopted struct {
		s   gpu.Stream
		err error
	}
	first, release := make(chan adopted), make(chan struct{})
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := dev.AdoptStream(gpu.StreamPerThread)
		first <- adopted{s, err}
		if err != nil {
			return
		}
		<-release
		done <- errors.Join(s.Synchronize(), s.Destroy())
	}()
	a := <-first
	must(t, a.err)
	var other adopted
	func() {
		runtime.LockOSThread() // a thread other than the first goroutine's
		defer runtime.UnlockOSThread()
		wantErr(t, "per-thread stream used on another thread", a.s.Synchronize(), gpu.ErrWrongThread)
		_, err := dev.MallocAsync(256, a.s)
		wantErr(t, "MallocAsync on another thread's per-thread stream", err, gpu.ErrWrongThread)
		other.s, other.err = dev.AdoptStream(gpu.StreamPerThread)
		must(t, other.err)
		if other.s == a.s || other.s.ID() == a.s.ID() {
			t.Errorf("two threads' per-thread streams share ID %d", a.s.ID())
		}
		if b := adoptStream(t, dev, gpu.StreamPerThread); b != other.s {
			t.Error("adopting the per-thread stream twice on one thread gave two streams")
		}
		own := newStream(t, dev)
		fillAndCheckAcross(t, dev, other.s, own)
		fillAndCheckAcross(t, dev, own, other.s)
		must(t, other.s.Destroy())
	}()
	close(release)
	must(t, <-done)
}

func testAdoptEvent(t *testing.T, dev gpu.Device, f Foreign) {
	_, err := dev.AdoptEvent(0)
	wantErr(t, "AdoptEvent(0)", err, gpu.ErrInvalidHandle)
	raw, err := f.NewRawEvent(false)
	must(t, err)
	e, err := dev.AdoptEvent(raw)
	must(t, err)
	if again, err := dev.AdoptEvent(raw); err != nil || again != e {
		t.Fatalf("adopting event %#x twice: %v, %v", raw, again, err)
	}
	if got, ok := gpu.RawOf(e); !ok || got != raw {
		t.Fatalf("RawOf(adopted event) = %#x, %v; want %#x", got, ok, raw)
	}
	// The adopted event orders two streams of ours.
	const n = 1 << 16
	s1, s2 := newStream(t, dev), newStream(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s2)
	must(t, s2.Synchronize())
	p, err := dev.MallocAsync(4*n, s1)
	must(t, err)
	must(t, k.Spin(s1, 20*time.Millisecond))
	must(t, k.Fill(s1, p, n, 5))
	must(t, e.Record(s1))
	must(t, s2.WaitEvent(e))
	must(t, k.Check(s2, p, n, 5, errs.p))
	must(t, dev.FreeAsync(p, s2))
	if got := errs.read(t, s2); got != 0 {
		t.Fatalf("%d words wrong after waiting on the adopted event", got)
	}
	must(t, e.Synchronize())
	must(t, e.Destroy())
	wantErr(t, "Record through a destroyed event wrapper", e.Record(s1), gpu.ErrDestroyed)
	e2, err := dev.AdoptEvent(raw)
	must(t, err)
	must(t, e2.Record(s1)) // the event itself lives on
	must(t, e2.Synchronize())
	must(t, e2.Destroy())
	must(t, f.DestroyRawEvent(raw))
}

func testAdoptMemPool(t *testing.T, dev gpu.Device, f Foreign) {
	_, err := dev.AdoptMemPool(0)
	wantErr(t, "AdoptMemPool(0)", err, gpu.ErrInvalidHandle)
	raw, err := f.NewRawMemPool()
	must(t, err)
	p, err := dev.AdoptMemPool(raw)
	must(t, err)
	if again, err := dev.AdoptMemPool(raw); err != nil || again != p {
		t.Fatalf("adopting pool %#x twice: %v, %v", raw, again, err)
	}
	s := newStream(t, dev)
	const size = 1 << 20
	ptr, err := dev.MallocFromPoolAsync(size, p, s)
	must(t, err)
	used, err := p.Attribute(gpu.PoolUsedMemCurrent)
	must(t, err)
	if used < size {
		t.Fatalf("adopted pool's used memory %d after a %d-byte allocation", used, size)
	}
	must(t, dev.FreeAsync(ptr, s))
	must(t, s.Synchronize())
	must(t, p.SetAttribute(gpu.PoolReleaseThreshold, 0))
	must(t, p.TrimTo(0))
	must(t, p.Destroy()) // forgets the wrapper
	_, err = p.Attribute(gpu.PoolUsedMemCurrent)
	wantErr(t, "Attribute through a destroyed pool wrapper", err, gpu.ErrDestroyed)
	_, err = dev.MallocFromPoolAsync(size, p, s)
	wantErr(t, "MallocFromPoolAsync from a destroyed pool wrapper", err, gpu.ErrDestroyed)
	p2, err := dev.AdoptMemPool(raw)
	must(t, err)
	ptr, err = dev.MallocFromPoolAsync(size, p2, s) // the pool itself lives on
	must(t, err)
	must(t, dev.FreeAsync(ptr, s))
	must(t, s.Synchronize())
	must(t, p2.Destroy())
	must(t, f.DestroyRawMemPool(raw))
}

func testCurrentMemPool(t *testing.T, dev gpu.Device, f Foreign) {
	def, err := dev.DefaultMemPool()
	must(t, err)
	cur, err := dev.CurrentMemPool()
	must(t, err)
	if cur != def {
		t.Fatalf("current pool %v before any change, want the default pool", cur)
	}
	raw, err := f.NewRawMemPool()
	must(t, err)
	p, err := dev.AdoptMemPool(raw)
	must(t, err)
	must(t, dev.SetCurrentMemPool(p))
	t.Cleanup(func() {
		must(t, dev.SetCurrentMemPool(def))
		must(t, p.Destroy())
		must(t, f.DestroyRawMemPool(raw))
	})
	if cur, err = dev.CurrentMemPool(); err != nil || cur != p {
		t.Fatalf("current pool after SetCurrentMemPool: %v, %v; want the adopted pool", cur, err)
	}
	s := newStream(t, dev)
	const size = 1 << 20
	ptr, err := dev.MallocAsync(size, s)
	must(t, err)
	used, err := p.Attribute(gpu.PoolUsedMemCurrent)
	must(t, err)
	if used < size {
		t.Errorf("MallocAsync did not draw from the current pool (its used memory is %d)", used)
	}
	must(t, dev.FreeAsync(ptr, s))
	must(t, s.Synchronize())
}
