package mr_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// checkPending fails the test if the accounting invariants do not hold or
// the totals differ from what the test expects.
func checkPending(t testing.TB, p *mr.PendingFrees, wantLive, wantPending uint64) {
	t.Helper()
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	live, pending, _, _ := p.Counts()
	if live != wantLive || pending != wantPending || p.Outstanding() != wantLive+wantPending {
		t.Fatalf("live %d pending %d outstanding %d, want live %d pending %d",
			live, pending, p.Outstanding(), wantLive, wantPending)
	}
	var sum uint64
	for _, sp := range p.Streams() {
		sum += sp.Bytes
	}
	if sum != pending {
		t.Fatalf("per-stream tallies sum to %d, pending is %d", sum, pending)
	}
}

func pendingOf(p *mr.PendingFrees, s gpu.Stream) uint64 {
	for _, sp := range p.Streams() {
		if sp.Stream == s.ID() {
			return sp.Bytes
		}
	}
	return 0
}

func TestPendingFreesBasic(t *testing.T) {
	d := &fakeDevice{}
	s1, s2 := newFakeStream(d), newFakeStream(d)
	var p mr.PendingFrees
	checkPending(t, &p, 0, 0)

	p.AddLive(100)
	p.AddLive(200)
	p.AddLive(300)
	checkPending(t, &p, 600, 0)
	if err := p.Add(s1, 100); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(s2, 200); err != nil {
		t.Fatal(err)
	}
	checkPending(t, &p, 300, 300)

	// s1 still busy: a query reap releases only s2.
	s1.setReady(false)
	n, err := p.Reap(false)
	if err != nil || n != 200 {
		t.Fatalf("Reap(false) = %d, %v; want 200, nil", n, err)
	}
	checkPending(t, &p, 300, 100)
	if got := pendingOf(&p, s1); got != 100 {
		t.Fatalf("s1 pending %d, want 100", got)
	}

	// A waiting reap synchronizes s1.
	n, err = p.Reap(true)
	if err != nil || n != 100 {
		t.Fatalf("Reap(true) = %d, %v; want 100, nil", n, err)
	}
	checkPending(t, &p, 300, 0)

	// Nothing pending: a reap releases nothing.
	if n, err := p.Reap(true); err != nil || n != 0 {
		t.Fatalf("empty Reap = %d, %v", n, err)
	}
	if err := p.RemoveLive(300); err != nil {
		t.Fatal(err)
	}
	checkPending(t, &p, 0, 0)
}

func TestPendingFreesBadInput(t *testing.T) {
	d := &fakeDevice{}
	s := newFakeStream(d)
	var p mr.PendingFrees
	p.AddLive(64)
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"add nil stream", func() error { return p.Add(nil, 64) }, gpu.ErrInvalidHandle},
		{"add more than live", func() error { return p.Add(s, 65) }, mr.ErrAccounting},
		{"remove more than live", func() error { return p.RemoveLive(65) }, mr.ErrAccounting},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			checkPending(t, &p, 64, 0)
		})
	}
	// Moving the one live allocation leaves no allocation to move again,
	// even of size zero.
	if err := p.Add(s, 64); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(s, 0); !errors.Is(err, mr.ErrAccounting) {
		t.Fatalf("second Add = %v, want ErrAccounting", err)
	}
	checkPending(t, &p, 0, 64)
}

// TestPendingFreesSyncFailure fails the check of one chosen stream and
// verifies, after every step, that that stream and every later one stay
// pending with their exact tallies, the earlier ones are released, and the
// next reap releases the rest.
func TestPendingFreesSyncFailure(t *testing.T) {
	errBoom := fmt.Errorf("injected: %w", gpu.ErrLaunchFailed)
	for _, wait := range []bool{true, false} {
		for failAt := 0; failAt < 5; failAt++ {
			t.Run(fmt.Sprintf("wait=%v/fail=%d", wait, failAt), func(t *testing.T) {
				d := &fakeDevice{}
				var p mr.PendingFrees
				streams := make([]*fakeStream, 5)
				var total uint64
				for i := range streams {
					streams[i] = newFakeStream(d)
					n := uint64(256 * (i + 1))
					p.AddLive(n)
					if err := p.Add(streams[i], n); err != nil {
						t.Fatal(err)
					}
					total += n
				}
				checkPending(t, &p, 0, total)
				streams[failAt].fail(errBoom)

				n, err := p.Reap(wait)
				if !errors.Is(err, gpu.ErrLaunchFailed) {
					t.Fatalf("Reap error %v, want ErrLaunchFailed", err)
				}
				var want uint64
				for i := 0; i < failAt; i++ {
					want += uint64(256 * (i + 1))
				}
				if n != want {
					t.Fatalf("reaped %d, want %d", n, want)
				}
				checkPending(t, &p, 0, total-want)
				for i, s := range streams {
					wantS := uint64(256 * (i + 1))
					if i < failAt {
						wantS = 0
					}
					if got := pendingOf(&p, s); got != wantS {
						t.Fatalf("stream %d pending %d, want %d", i, got, wantS)
					}
				}
				// Streams after the failing one were not asked.
				for i := failAt + 1; i < len(streams); i++ {
					if streams[i].calls != 0 {
						t.Fatalf("stream %d checked %d times after failure", i, streams[i].calls)
					}
				}

				n2, err := p.Reap(wait)
				if err != nil || n+n2 != total {
					t.Fatalf("retry Reap = %d, %v; want %d", n2, err, total-n)
				}
				checkPending(t, &p, 0, 0)
			})
		}
	}
}

// TestPendingFreesLastingFailure: a stream that keeps failing (a sticky
// fault) blocks the streams after it only once; the next reap checks it
// last.
func TestPendingFreesLastingFailure(t *testing.T) {
	d := &fakeDevice{}
	bad, good := newFakeStream(d), newFakeStream(d) // bad has the lower ID
	var p mr.PendingFrees
	p.AddLive(256)
	p.AddLive(512)
	p.Add(bad, 256)
	p.Add(good, 512)
	bad.fail(gpu.ErrLaunchFailed, gpu.ErrLaunchFailed, gpu.ErrLaunchFailed)
	if n, err := p.Reap(true); n != 0 || !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("first reap = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 768)
	if n, err := p.Reap(true); n != 512 || !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("second reap = %d, %v; want the good stream's 512 and the bad one's error", n, err)
	}
	checkPending(t, &p, 0, 256)
	if got := pendingOf(&p, bad); got != 256 {
		t.Fatalf("bad stream pending %d", got)
	}
	p.Reap(true) // the third failure
	if n, err := p.Reap(true); n != 256 || err != nil {
		t.Fatalf("after the fault cleared: %d, %v", n, err)
	}
	checkPending(t, &p, 0, 0)
}

func TestPendingFreesDestroyedStream(t *testing.T) {
	d := &fakeDevice{}
	s := newFakeStream(d)
	var p mr.PendingFrees
	p.AddLive(512)
	if err := p.Add(s, 512); err != nil {
		t.Fatal(err)
	}
	s.Destroy()

	// A query cannot learn anything about a destroyed stream.
	if n, err := p.Reap(false); n != 0 || err != nil {
		t.Fatalf("Reap(false) = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 512)

	// Waiting synchronizes the device; if that fails, the bytes stay.
	d.syncErr = gpu.ErrLaunchFailed
	if n, err := p.Reap(true); n != 0 || !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("Reap(true) with failing device = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 512)
	d.syncErr = nil
	if n, err := p.Reap(true); n != 512 || err != nil {
		t.Fatalf("Reap(true) = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 0)
	if d.syncs != 2 {
		t.Fatalf("device synchronized %d times, want 2", d.syncs)
	}
}

// TestPendingFreesEntriesRecycled checks that idle streams are dropped and
// that Add does not allocate in steady state.
func TestPendingFreesEntriesRecycled(t *testing.T) {
	d := &fakeDevice{}
	var p mr.PendingFrees
	for range 100 {
		s := newFakeStream(d)
		p.AddLive(256)
		if err := p.Add(s, 256); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reap(true); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		p.Reap(true)
	}
	if got := len(p.Streams()); got != 0 {
		t.Fatalf("%d streams listed after reaping everything", got)
	}
	checkPending(t, &p, 0, 0)

	s := newFakeStream(d)
	p.AddLive(256)
	p.Add(s, 256)
	p.Reap(true)
	allocs := testing.AllocsPerRun(1000, func() {
		p.AddLive(256)
		if err := p.Add(s, 256); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reap(true); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("steady-state AddLive+Add+Reap allocates %v times", allocs)
	}
}

// TestPendingFreesStress races frees on many streams against query and
// waiting reaps whose checks fail now and then, checking the invariants
// after every step and, at the end, that every freed byte was released
// exactly once.
func TestPendingFreesStress(t *testing.T) {
	const (
		freers  = 8
		reapers = 4
	)
	steps := 2000
	if testing.Short() {
		steps = 300
	}
	d := &fakeDevice{}
	streams := make([]*fakeStream, 6)
	for i := range streams {
		streams[i] = newFakeStream(d)
	}
	var (
		p         mr.PendingFrees
		freed     atomic.Uint64 // bytes moved to pending
		reaped    atomic.Uint64 // bytes reaps reported
		stillLive atomic.Uint64 // bytes left live at the end
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		errc      = make(chan error, freers+reapers)
	)
	for g := range freers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var mine []uint64
			for range steps {
				n := uint64(rng.IntN(64)+1) * 256
				p.AddLive(n)
				mine = append(mine, n)
				if rng.IntN(3) > 0 {
					i := rng.IntN(len(mine))
					m := mine[i]
					mine = slices.Delete(mine, i, i+1)
					if err := p.Add(streams[rng.IntN(len(streams))], m); err != nil {
						errc <- err
						return
					}
					freed.Add(m)
				}
				if err := p.Check(); err != nil {
					errc <- err
					return
				}
			}
			for _, m := range mine {
				stillLive.Add(m)
			}
		}()
	}
	var reapWG sync.WaitGroup
	for g := range reapers {
		reapWG.Add(1)
		go func() {
			defer reapWG.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := streams[rng.IntN(len(streams))]
				switch rng.IntN(4) {
				case 0:
					s.fail(gpu.ErrLaunchFailed)
				case 1:
					s.setReady(rng.IntN(2) == 0)
				}
				n, err := p.Reap(rng.IntN(2) == 0)
				reaped.Add(n)
				if err != nil && !errors.Is(err, gpu.ErrLaunchFailed) {
					errc <- err
					return
				}
				if err := p.Check(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	reapWG.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	// Drain: injected failures may still be queued on some streams.
	for _, s := range streams {
		s.mu.Lock()
		s.failNext = nil
		s.mu.Unlock()
	}
	n, err := p.Reap(true)
	if err != nil {
		t.Fatal(err)
	}
	reaped.Add(n)
	checkPending(t, &p, stillLive.Load(), 0)
	if reaped.Load() != freed.Load() {
		t.Fatalf("reaps released %d bytes, %d were freed", reaped.Load(), freed.Load())
	}
}

// FuzzPendingFrees runs operation sequences against a reference model: a
// list of pending frees per stream, released in stream order up to the
// first stream whose check fails.
func FuzzPendingFrees(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 0, 0, 16, 17, 18, 40, 41, 64, 65, 66, 90})
	f.Fuzz(func(t *testing.T, ops []byte) {
		d := &fakeDevice{}
		streams := []*fakeStream{newFakeStream(d), newFakeStream(d), newFakeStream(d)}
		var p mr.PendingFrees
		var live []uint64
		modelPending := make([]uint64, len(streams))
		modelFailed := make([]bool, len(streams))
		var modelLive uint64
		for i, op := range ops {
			arg := int(op >> 3)
			switch op & 7 {
			case 0, 1: // allocate
				n := uint64(arg+1) * 256
				p.AddLive(n)
				live = append(live, n)
				modelLive += n
			case 2, 3: // free on a stream
				if len(live) == 0 {
					if err := p.Add(streams[arg%3], 256); !errors.Is(err, mr.ErrAccounting) {
						t.Fatalf("op %d: Add with nothing live = %v", i, err)
					}
					continue
				}
				n := live[arg%len(live)]
				live = slices.Delete(live, arg%len(live), arg%len(live)+1)
				if err := p.Add(streams[arg%3], n); err != nil {
					t.Fatal(err)
				}
				modelLive -= n
				modelPending[arg%3] += n
			case 4: // make a stream busy or idle
				streams[arg%3].setReady(arg&4 == 0)
			case 5: // fail a stream's next check
				streams[arg%3].fail(gpu.ErrLaunchFailed)
			case 6, 7: // reap
				wait := op&1 == 1
				var want uint64
				wantErr := false
				// Streams were made in ID order; those whose last
				// check failed go last.
				var order []int
				for _, failed := range []bool{false, true} {
					for j := range streams {
						if modelFailed[j] == failed {
							order = append(order, j)
						}
					}
				}
				for _, j := range order {
					s := streams[j]
					if modelPending[j] == 0 {
						continue
					}
					if len(s.failNext) > 0 {
						wantErr = true
						modelFailed[j] = true
						break
					}
					modelFailed[j] = false
					if wait || s.ready {
						want += modelPending[j]
						modelPending[j] = 0
					}
				}
				n, err := p.Reap(wait)
				if n != want || (err != nil) != wantErr {
					t.Fatalf("op %d: Reap(%v) = %d, %v; model says %d, error %v", i, wait, n, err, want, wantErr)
				}
			}
			var pend uint64
			for j, s := range streams {
				if got := pendingOf(&p, s); got != modelPending[j] {
					t.Fatalf("op %d: stream %d pending %d, model %d", i, j, got, modelPending[j])
				}
				pend += modelPending[j]
			}
			checkPending(t, &p, modelLive, pend)
		}
	})
}

func BenchmarkPendingFreesAdd(b *testing.B) {
	d := &fakeDevice{}
	s := newFakeStream(d)
	var p mr.PendingFrees
	b.ReportAllocs()
	for b.Loop() {
		p.AddLive(256)
		p.Add(s, 256)
	}
}

func BenchmarkPendingFreesAddParallel(b *testing.B) {
	d := &fakeDevice{}
	var p mr.PendingFrees
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := newFakeStream(d)
		for pb.Next() {
			p.AddLive(256)
			p.Add(s, 256)
		}
	})
}
