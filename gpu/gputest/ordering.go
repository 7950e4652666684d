// Conformance: stream order, events, cross-stream frees, queries, timing.

package gputest

import (
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// testEventOrdersStreams: a buffer written on S1 and read on S2 after an
// event wait. S1 is kept busy first, so that without the wait S2 would
// read before the write.
func testEventOrdersStreams(t *testing.T, dev gpu.Device) {
	const n = 1 << 18
	s1, s2 := newStream(t, dev), newStream(t, dev)
	e := newEvent(t, dev, false)
	k := load(t, dev)
	errs := newCounter(t, dev, s2)
	must(t, s2.Synchronize())
	p, err := dev.Malloc(4 * n)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	must(t, dev.MemsetD8Async(p, 0, 4*n, s1))
	must(t, k.Spin(s1, 50*time.Millisecond))
	must(t, k.Fill(s1, p, n, 7))
	must(t, e.Record(s1))
	must(t, s2.WaitEvent(e))
	must(t, k.Check(s2, p, n, 7, errs.p))
	host := make([]byte, 4*n)
	must(t, dev.CopyDtoHAsync(host, p, s2))
	if got := errs.read(t, s2); got != 0 {
		t.Fatalf("S2 saw %d words not yet written by S1", got)
	}
	checkPattern(t, "read on S2", host, 7)
	must(t, e.Query()) // S2 synchronized past its wait, so the event completed
}

// testAllocS1FreeS2Reuse is the cross-stream free ordered by events:
// memory allocated on S1 and used there is freed on S2 after an event
// wait; afterwards S1 (ordered after the free by another event) allocates
// again and gets reused memory, so the pool does not grow.
func testAllocS1FreeS2Reuse(t *testing.T, dev gpu.Device) {
	const size = 4 << 20
	const n = size / 4
	s1, s2 := newStream(t, dev), newStream(t, dev)
	used, freed := newEvent(t, dev, false), newEvent(t, dev, false)
	k := load(t, dev)
	errs := newCounter(t, dev, s1)
	pool, err := dev.NewMemPool()
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	must(t, pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))

	var highAfterFirst uint64
	for i := range 20 {
		p, err := dev.MallocFromPoolAsync(size, pool, s1)
		must(t, err)
		must(t, k.Fill(s1, p, n, uint32(i)))
		must(t, k.Check(s1, p, n, uint32(i), errs.p))
		must(t, used.Record(s1))
		must(t, s2.WaitEvent(used))
		must(t, dev.FreeAsync(p, s2))
		must(t, freed.Record(s2))
		must(t, s1.WaitEvent(freed))
		if i == 0 {
			must(t, s1.Synchronize())
			highAfterFirst, err = pool.Attribute(gpu.PoolReservedMemHigh)
			must(t, err)
		}
	}
	if got := errs.read(t, s1); got != 0 {
		t.Fatalf("%d mismatched words", got)
	}
	must(t, s2.Synchronize())
	high, err := pool.Attribute(gpu.PoolReservedMemHigh)
	must(t, err)
	if high != highAfterFirst || high < size {
		t.Fatalf("reserved high-water %d after 20 rounds, %d after the first: freed memory was not reused", high, highAfterFirst)
	}
	used0, err := pool.Attribute(gpu.PoolUsedMemCurrent)
	must(t, err)
	if used0 != 0 {
		t.Fatalf("used memory %d after all frees, want 0", used0)
	}
}

func testPoolAttributes(t *testing.T, dev gpu.Device) {
	const size = 8 << 20
	s := newStream(t, dev)
	pool, err := dev.NewMemPool()
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	if pool.Device() != dev {
		t.Error("pool.Device() is not the device")
	}
	attr := func(a gpu.PoolAttr) uint64 {
		t.Helper()
		v, err := pool.Attribute(a)
		must(t, err)
		return v
	}
	must(t, pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
	if got := attr(gpu.PoolReleaseThreshold); got != ^uint64(0) {
		t.Errorf("release threshold reads %d after setting max", got)
	}
	for _, a := range []gpu.PoolAttr{gpu.PoolReuseFollowEventDependencies, gpu.PoolReuseAllowOpportunistic, gpu.PoolReuseAllowInternalDependencies} {
		old := attr(a)
		must(t, pool.SetAttribute(a, 0))
		if got := attr(a); got != 0 {
			t.Errorf("reuse policy %d reads %d after setting 0", a, got)
		}
		must(t, pool.SetAttribute(a, 1))
		if got := attr(a); got != 1 {
			t.Errorf("reuse policy %d reads %d after setting 1", a, got)
		}
		must(t, pool.SetAttribute(a, old))
	}

	p, err := dev.MallocFromPoolAsync(size, pool, s)
	must(t, err)
	must(t, dev.MemsetD8Async(p, 1, size, s))
	must(t, s.Synchronize())
	used, reserved := attr(gpu.PoolUsedMemCurrent), attr(gpu.PoolReservedMemCurrent)
	if used < size || reserved < used {
		t.Fatalf("while allocated: used %d, reserved %d; want size %d <= used <= reserved", used, reserved, size)
	}
	if attr(gpu.PoolUsedMemHigh) < used || attr(gpu.PoolReservedMemHigh) < reserved {
		t.Fatal("high-water marks below current values")
	}

	must(t, dev.FreeAsync(p, s))
	must(t, s.Synchronize())
	if got := attr(gpu.PoolUsedMemCurrent); got != 0 {
		t.Errorf("used %d after free, want 0", got)
	}
	if got := attr(gpu.PoolReservedMemCurrent); got < size {
		t.Errorf("reserved %d after free and sync with a high release threshold, want >= %d", got, size)
	}

	// The memory stays in the pool: allocating again does not grow it.
	before := attr(gpu.PoolReservedMemCurrent)
	p, err = dev.MallocFromPoolAsync(size, pool, s)
	must(t, err)
	must(t, dev.FreeAsync(p, s))
	must(t, s.Synchronize())
	if got := attr(gpu.PoolReservedMemCurrent); got != before {
		t.Errorf("reserved went from %d to %d on reuse", before, got)
	}

	must(t, pool.TrimTo(0))
	if got := attr(gpu.PoolReservedMemCurrent); got != 0 {
		t.Errorf("reserved %d after TrimTo(0), want 0", got)
	}
	must(t, pool.SetAttribute(gpu.PoolReservedMemHigh, 0))
	must(t, pool.SetAttribute(gpu.PoolUsedMemHigh, 0))
	if r, u := attr(gpu.PoolReservedMemHigh), attr(gpu.PoolUsedMemHigh); r != 0 || u != 0 {
		t.Errorf("high-water marks %d, %d after reset with nothing reserved, want 0, 0", r, u)
	}

	_, err = pool.Attribute(gpu.PoolAttr(99))
	wantErr(t, "Attribute(99)", err, gpu.ErrInvalidValue)
	wantErr(t, "SetAttribute(ReservedMemHigh, 1)", pool.SetAttribute(gpu.PoolReservedMemHigh, 1), gpu.ErrInvalidValue)

	def, err := dev.DefaultMemPool()
	must(t, err)
	wantErr(t, "destroy the default pool", def.Destroy(), gpu.ErrInvalidValue)
}

func testQueryNotReady(t *testing.T, dev gpu.Device) {
	s := newStream(t, dev)
	e := newEvent(t, dev, false)
	k := load(t, dev)
	must(t, e.Query()) // never recorded: complete
	must(t, s.Query()) // nothing enqueued: complete
	must(t, k.Spin(s, 300*time.Millisecond))
	must(t, e.Record(s))
	wantErr(t, "stream Query while a kernel runs", s.Query(), gpu.ErrNotReady)
	wantErr(t, "event Query while a kernel runs", e.Query(), gpu.ErrNotReady)
	must(t, e.Synchronize())
	must(t, e.Query())
	must(t, s.Synchronize())
	must(t, s.Query())
}

func testTimingEvents(t *testing.T, dev gpu.Device) {
	const spin = 50 * time.Millisecond
	s := newStream(t, dev)
	k := load(t, dev)
	start, stop := newEvent(t, dev, true), newEvent(t, dev, true)
	must(t, start.Record(s))
	must(t, k.Spin(s, spin))
	must(t, stop.Record(s))
	must(t, stop.Synchronize())
	d, err := stop.ElapsedSince(start)
	must(t, err)
	if d < spin*9/10 || d > 5*time.Second {
		t.Errorf("elapsed %v around a %v kernel", d, spin)
	}

	// Not complete yet: not ready.
	must(t, k.Spin(s, 300*time.Millisecond))
	must(t, stop.Record(s))
	_, err = stop.ElapsedSince(start)
	wantErr(t, "ElapsedSince before completion", err, gpu.ErrNotReady)
	must(t, s.Synchronize())

	// Events without timing cannot measure.
	plain := newEvent(t, dev, false)
	must(t, plain.Record(s))
	must(t, plain.Synchronize())
	_, err = plain.ElapsedSince(start)
	wantErr(t, "ElapsedSince on a non-timing event", err, gpu.ErrInvalidHandle)
}

func testStreams(t *testing.T, dev gpu.Device) {
	seen := map[uint64]bool{}
	for range 4 {
		s := newStream(t, dev)
		if s.ID() == 0 || seen[s.ID()] {
			t.Fatalf("stream ID %d is zero or repeated", s.ID())
		}
		seen[s.ID()] = true
		if s.Device() != dev {
			t.Fatal("stream.Device() is not the device")
		}
	}
	// Destroy lets enqueued work finish.
	k := load(t, dev)
	s, err := dev.NewStream()
	must(t, err)
	e := newEvent(t, dev, false)
	must(t, k.Spin(s, 20*time.Millisecond))
	must(t, e.Record(s))
	must(t, s.Destroy())
	must(t, e.Synchronize())
	must(t, dev.Synchronize())
}
