package sim_test

import (
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// policy sets a pool's three reuse policies.
func (f *fixture) policy(p gpu.MemPool, events, opportunistic, internal bool) {
	f.t.Helper()
	b := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	f.must(p.SetAttribute(gpu.PoolReuseFollowEventDependencies, b(events)))
	f.must(p.SetAttribute(gpu.PoolReuseAllowOpportunistic, b(opportunistic)))
	f.must(p.SetAttribute(gpu.PoolReuseAllowInternalDependencies, b(internal)))
	f.must(p.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
}

func TestPoolReuseRules(t *testing.T) {
	const size = 1 << 20
	type setup struct {
		events, opportunistic, internal bool
	}
	for _, c := range []struct {
		name   string
		policy setup
		// how the free on S1 relates to the allocation on S2
		order     string // "none", "event", "completed"
		wantReuse bool
		wantDep   bool // the allocation is ordered after the free (by the pool or otherwise)
	}{
		{"same stream always", setup{false, false, false}, "same", true, true},
		{"unordered, no internal dependencies", setup{true, true, false}, "none", false, false},
		// The simulator grows the pool rather than serialize two streams;
		// TestPoolInsertedDependencyWaits covers the inserted wait.
		{"unordered, internal dependencies, room to grow", setup{true, true, true}, "none", false, false},
		{"event-ordered, follow events", setup{true, false, false}, "event", true, true},
		{"event-ordered, not following events", setup{false, false, false}, "event", false, true},
		{"completed, opportunistic", setup{false, true, false}, "completed", true, true},
		{"completed, not opportunistic", setup{false, false, false}, "completed", false, false},
		{"host synchronized, any policy", setup{false, false, false}, "synced", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, sim.Config{})
			pool, err := f.dev.NewMemPool()
			f.must(err)
			f.policy(pool, c.policy.events, c.policy.opportunistic, c.policy.internal)
			s1, s2 := f.stream(), f.stream()
			if c.order == "same" {
				s2 = s1
			}
			// Another block keeps the chunk alive and makes the freed one
			// the only candidate.
			keep, err := f.dev.MallocFromPoolAsync(size, pool, s1)
			f.must(err)
			p, err := f.dev.MallocFromPoolAsync(size, pool, s1)
			f.must(err)
			var release func()
			if c.order == "none" || c.order == "same" {
				release = f.sd.Hold(s1) // the free stays pending
			}
			f.must(f.dev.FreeAsync(p, s1))
			free := f.sd.LastOp(s1)
			switch c.order {
			case "event":
				release = f.sd.Hold(s1)
				e := f.event(false)
				f.must(e.Record(s1))
				f.must(s2.WaitEvent(e))
			case "completed":
				for !f.sd.Completed(free) { // completes; the host does not observe it
					time.Sleep(time.Millisecond)
				}
			case "synced":
				f.must(s1.Synchronize())
			}
			q, err := f.dev.MallocFromPoolAsync(size, pool, s2)
			f.must(err)
			alloc := f.sd.LastOp(s2)
			if reused := q == p; reused != c.wantReuse {
				t.Errorf("reused = %v, want %v", reused, c.wantReuse)
			}
			if dep := f.sd.HappensBefore(free, alloc); dep != c.wantDep {
				t.Errorf("free happens before the allocation = %v, want %v", dep, c.wantDep)
			}
			if release != nil {
				release()
			}
			f.must(f.dev.FreeAsync(q, s2))
			f.must(f.dev.FreeAsync(keep, s1))
			f.must(f.dev.Synchronize())
			if used := f.attr(pool, gpu.PoolUsedMemCurrent); used != 0 {
				t.Errorf("used %d after freeing everything", used)
			}
		})
	}
}

func TestPoolInsertedDependencyWaits(t *testing.T) {
	// No room to grow: S2 must reuse S1's pending free and wait for it.
	f := newFixture(t, sim.Config{Capacity: 2 << 20})
	s1, s2 := f.stream(), f.stream()
	p := f.mallocAsync(2<<20, s1)
	release := f.sd.Hold(s1)
	f.must(f.dev.FreeAsync(p, s1))
	q := f.mallocAsync(2<<20, s2)
	if q != p {
		t.Fatalf("got %#x, want the pending block %#x", uint64(q), uint64(p))
	}
	f.must(f.dev.MemsetD8Async(q, 1, 16, s2))
	time.Sleep(20 * time.Millisecond)
	wantErr(t, "S2 before S1's free ran", s2.Query(), gpu.ErrNotReady)
	release()
	f.must(s2.Synchronize())

	// With internal dependencies off, the same situation is out of memory.
	f.must(f.dev.FreeAsync(q, s2))
	pool := f.defaultPool()
	f.must(pool.SetAttribute(gpu.PoolReuseAllowInternalDependencies, 0))
	f.must(pool.SetAttribute(gpu.PoolReuseAllowOpportunistic, 0))
	release = f.sd.Hold(s2)
	_, err := f.dev.MallocAsync(2<<20, s1)
	wantErr(t, "no dependency allowed and no room", err, gpu.ErrOutOfMemory)
	release()
}

func TestPoolReleaseThreshold(t *testing.T) {
	f := newFixture(t, sim.Config{})
	pool := f.defaultPool()
	// Default threshold 0: everything idle goes back at a synchronize.
	p := f.mallocAsync(3<<20, f.s)
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32<<20 {
		t.Errorf("reserved %d for 3 MiB, want 32 MiB (the pool's granule)", r)
	}
	if u := f.attr(pool, gpu.PoolUsedMemCurrent); u != 3<<20 {
		t.Errorf("used %d, want 3 MiB", u)
	}
	f.must(f.dev.FreeAsync(p, f.s))
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32<<20 {
		t.Errorf("reserved %d before any synchronize, want 32 MiB kept", r)
	}
	f.must(f.s.Synchronize())
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 0 {
		t.Errorf("reserved %d after synchronize with threshold 0, want 0", r)
	}

	// Threshold 64 MiB: three 32 MiB chunks, one is released.
	f.must(pool.SetAttribute(gpu.PoolReleaseThreshold, 64<<20))
	s2, s3 := f.stream(), f.stream()
	a, b, c := f.mallocAsync(32<<20, f.s), f.mallocAsync(32<<20, s2), f.mallocAsync(32<<20, s3)
	for _, x := range []struct {
		p gpu.DevicePtr
		s gpu.Stream
	}{{a, f.s}, {b, s2}, {c, s3}} {
		f.must(f.dev.FreeAsync(x.p, x.s))
	}
	e := f.event(false)
	f.must(e.Record(s3))
	f.must(e.Synchronize()) // an event synchronize is a release point too
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 64<<20 {
		t.Errorf("reserved %d after synchronize, want the 64 MiB threshold", r)
	}
	if h := f.attr(pool, gpu.PoolReservedMemHigh); h != 96<<20 {
		t.Errorf("reserved high %d, want 96 MiB", h)
	}
	f.must(f.dev.Synchronize()) // every free has run (the threshold still holds 64 MiB)
	f.must(pool.TrimTo(32 << 20))
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32<<20 {
		t.Errorf("reserved %d after TrimTo(32 MiB)", r)
	}
	f.must(pool.SetAttribute(gpu.PoolReservedMemHigh, 0))
	if h := f.attr(pool, gpu.PoolReservedMemHigh); h != 32<<20 {
		t.Errorf("reserved high %d after reset, want the current 32 MiB", h)
	}
	wantErr(t, "set reserved current", pool.SetAttribute(gpu.PoolReservedMemCurrent, 0), gpu.ErrInvalidValue)
	wantErr(t, "set used current", pool.SetAttribute(gpu.PoolUsedMemCurrent, 0), gpu.ErrInvalidValue)

	// Trim keeps memory whose free has not completed.
	release := f.sd.Hold(f.s)
	p = f.mallocAsync(1<<20, f.s)
	f.must(f.dev.FreeAsync(p, f.s))
	f.must(pool.TrimTo(0))
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32<<20 {
		t.Errorf("reserved %d: trimmed a chunk whose free is pending", r)
	}
	release()
	f.must(f.dev.Synchronize())
	f.must(pool.TrimTo(0))
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 0 {
		t.Errorf("reserved %d after the free completed and TrimTo(0)", r)
	}
}

func TestPoolDestroyWithLiveAllocations(t *testing.T) {
	f := newFixture(t, sim.Config{})
	pool, err := f.dev.NewMemPool()
	f.must(err)
	p, err := f.dev.MallocFromPoolAsync(5<<20, pool, f.s)
	f.must(err)
	before := f.free()
	f.must(pool.Destroy())
	_, err = pool.Attribute(gpu.PoolUsedMemCurrent)
	wantErr(t, "attribute of a destroyed pool", err, gpu.ErrDestroyed)
	f.must(f.dev.MemsetD8Async(p, 1, 5<<20, f.s)) // still mapped
	f.must(f.dev.FreeAsync(p, f.s))
	f.must(f.s.Synchronize())
	if after := f.free(); after != before+32<<20 {
		t.Errorf("free %d after the last block of a destroyed pool, want %d", after, before+32<<20)
	}
}

// Eight blocks freed in scrambled order coalesce into their chunk: a
// 32 MiB request on the freeing stream gets the chunk back, whether the
// frees have run or are still waiting behind other work; a request on
// another stream, which the running frees are not ordered before, makes
// the pool grow instead. (As on an H100, driver 580.)
func TestPoolCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name        string
		busy, other bool // hold the freeing stream; allocate on another
		reused      bool
	}{
		{"frees done", false, false, true},
		{"frees running", true, false, true},
		{"frees running, other stream", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, sim.Config{})
			pool := f.defaultPool()
			f.must(pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
			f.must(pool.SetAttribute(gpu.PoolReuseAllowInternalDependencies, 0))
			var ps []gpu.DevicePtr
			for range 8 {
				ps = append(ps, f.mallocAsync(4<<20, f.s)) // 8 x 4 MiB = one 32 MiB chunk
			}
			if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32<<20 {
				t.Fatalf("reserved %d, want one 32 MiB chunk", r)
			}
			release := func() {}
			if tc.busy {
				release = f.sd.Hold(f.s)
			}
			defer release()
			for _, i := range []int{1, 3, 0, 2, 7, 5, 6, 4} {
				f.must(f.dev.FreeAsync(ps[i], f.s))
			}
			if !tc.busy {
				f.must(f.s.Synchronize())
			}
			s := f.s
			if tc.other {
				s = f.stream()
			}
			big := f.mallocAsync(32<<20, s) // needs all eight coalesced
			want := uint64(32 << 20)
			if !tc.reused {
				want = 64 << 20
			}
			if got := big == ps[0]; got != tc.reused || f.attr(pool, gpu.PoolReservedMemCurrent) != want {
				t.Errorf("32 MiB allocation at %#x (chunk at %#x), reserved %d; want reuse %v, %d reserved",
					uint64(big), uint64(ps[0]), f.attr(pool, gpu.PoolReservedMemCurrent), tc.reused, want)
			}
			release()
			f.must(f.dev.FreeAsync(big, s))
			f.must(f.dev.Synchronize())
		})
	}
}

// A block freed on a stream still busy stays apart from the free rest of
// its chunk, so another stream allocates from the rest at once (as the
// driver does on an H100); once the free completes, the chunk is whole
// again.
func TestPoolPendingFreeKeepsNeighboursUsable(t *testing.T) {
	f := newFixture(t, sim.Config{})
	pool := f.defaultPool()
	f.must(pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
	s2 := f.stream()
	a := f.mallocAsync(1<<20, f.s)
	f.must(f.s.Synchronize())
	release := f.sd.Hold(s2)
	f.must(f.dev.FreeAsync(a, s2))
	b, c := f.mallocAsync(1<<20, f.s), f.mallocAsync(1<<20, f.s)
	if b != a+1<<20 || c != a+2<<20 || f.attr(pool, gpu.PoolReservedMemCurrent) != 32<<20 {
		t.Errorf("after freeing %#x on a busy stream: %#x, %#x, reserved %d; want the next two MiB of one 32 MiB chunk",
			uint64(a), uint64(b), uint64(c), f.attr(pool, gpu.PoolReservedMemCurrent))
	}
	release()
	f.must(f.dev.FreeAsync(b, f.s))
	f.must(f.dev.FreeAsync(c, f.s))
	f.must(f.dev.Synchronize())
	if big := f.mallocAsync(32<<20, f.s); big != a || f.attr(pool, gpu.PoolReservedMemCurrent) != 32<<20 {
		t.Errorf("32 MiB allocation at %#x (chunk at %#x), reserved %d: the chunk is not whole again",
			uint64(big), uint64(a), f.attr(pool, gpu.PoolReservedMemCurrent))
	} else {
		f.must(f.dev.FreeAsync(big, f.s))
	}
	f.must(f.s.Synchronize())
}

// A free is due, and the pool model treats it as complete, once nothing
// that takes time comes before it on its stream: on the card such a free
// completes microseconds after it is enqueued, and the model must not
// depend on how soon a simulator goroutine gets to it (replays would vary
// from run to run). Each case runs many times: without the rule, whether
// the free had run yet was a race with the next call.
func TestPoolDueFrees(t *testing.T) {
	const size = 4 << 20
	for _, tc := range []struct {
		name   string
		before string // what S1 runs before the free: "nothing", "finished kernel", "held"
		reused bool   // another stream reuses the freed block at once
	}{
		{"nothing before the free", "nothing", true},
		{"a finished memset before the free", "finished memset", true},
		{"a held stream", "held", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 100 {
				f := newFixture(t, sim.Config{})
				pool, err := f.dev.NewMemPool()
				f.must(err)
				f.policy(pool, true, true, false)
				s1, s2 := f.stream(), f.stream()
				keep, err := f.dev.MallocFromPoolAsync(size, pool, s1)
				f.must(err)
				p, err := f.dev.MallocFromPoolAsync(size, pool, s1)
				f.must(err)
				release := func() {}
				switch tc.before {
				case "finished memset":
					f.must(f.dev.MemsetD8Async(p, 1, size, s1))
					memset := f.sd.LastOp(s1)
					for !f.sd.Completed(memset) {
						time.Sleep(10 * time.Microsecond)
					}
				case "held":
					release = f.sd.Hold(s1)
				}
				f.must(f.dev.FreeAsync(p, s1))
				free := f.sd.LastOp(s1)
				q, err := f.dev.MallocFromPoolAsync(size, pool, s2)
				f.must(err)
				alloc := f.sd.LastOp(s2)
				if reused := q == p; reused != tc.reused {
					t.Fatalf("run %d: reused = %v, want %v", i, reused, tc.reused)
				}
				if tc.reused && !f.sd.HappensBefore(free, alloc) {
					t.Fatalf("run %d: the reusing allocation is not ordered after the free", i)
				}
				release()
				f.must(f.dev.FreeAsync(q, s2))
				f.must(f.dev.FreeAsync(keep, s1))
				f.must(f.dev.Synchronize())
			}
		})
	}

	// Neighbours freed on two idle streams coalesce at once: a request of
	// both on a third stream is served from them without growing.
	for i := range 100 {
		f := newFixture(t, sim.Config{})
		pool, err := f.dev.NewMemPool()
		f.must(err)
		f.policy(pool, true, true, false)
		s1, s2, s3 := f.stream(), f.stream(), f.stream()
		var ps []gpu.DevicePtr
		for range 8 {
			p, err := f.dev.MallocFromPoolAsync(size, pool, s1)
			f.must(err)
			ps = append(ps, p)
		}
		for j, p := range ps {
			s := s1
			if j%2 == 1 {
				s = s2
			}
			f.must(f.dev.FreeAsync(p, s))
		}
		big, err := f.dev.MallocFromPoolAsync(32<<20, pool, s3)
		f.must(err)
		if r := f.attr(pool, gpu.PoolReservedMemCurrent); big != ps[0] || r != 32<<20 {
			t.Fatalf("run %d: 32 MiB at %#x (chunk at %#x), reserved %d: the frees of two idle streams did not coalesce",
				i, uint64(big), uint64(ps[0]), r)
		}
		f.must(f.dev.FreeAsync(big, s3))
		f.must(f.dev.Synchronize())
	}
}

// A growth the device cannot hold even after the pool gives back its idle
// granules is refused, and those granules are still given back, as when
// the refusal came from mapping a new range: a request that needs a new
// range refused at a full device moves the memory the pool held idle
// (reserved drops to what is live) and leaves room for the next request.
// Neither request fits: 32 MiB live and one of 100 MiB (mapped up to the
// page past it) or 128 MiB are more than the 128 MiB device.
func TestPoolRefusedGrowthMovesIdleMemory(t *testing.T) {
	const mib = 1 << 20
	f := newFixture(t, sim.Config{Capacity: 128 * mib})
	pool := f.defaultPool()
	f.policy(pool, true, true, true)
	s := f.stream()
	a := f.mallocAsync(96*mib, s)
	f.mallocAsync(32*mib, s) // the range, 128 MiB, is full
	f.must(f.dev.FreeAsync(a, s))
	f.must(s.Synchronize())
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 128*mib {
		t.Fatalf("reserved %d MiB before the refused growth", r/mib)
	}
	for i, size := range []int{128 * mib, 100 * mib} {
		_, err := f.dev.MallocAsync(size, s)
		wantErr(t, "a growth past the device", err, gpu.ErrOutOfMemory)
		if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 32*mib {
			t.Errorf("refusal %d: reserved %d MiB, want the 32 MiB still live", i, r/mib)
		}
		if u := f.attr(pool, gpu.PoolUsedMemCurrent); u != 32*mib {
			t.Errorf("refusal %d: used %d MiB", i, u/mib)
		}
	}
	f.mallocAsync(96*mib, s)
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r != 128*mib {
		t.Errorf("reserved %d MiB after a request that fits", r/mib)
	}
}
