package sanitize_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The recommended stack, Pool over Async, gives no report on correct code
// when the driver's pool reuses memory on its own (opportunistic reuse of
// completed frees and inserted dependencies, the defaults): the pool gives
// chunks back to the driver (a low ReleaseThreshold makes it do so often)
// and the driver hands them to another stream's growth. The sanitizer,
// through its instrumented device, sees the driver-level frees and
// allocations and models the driver's rule that reused memory is ordered
// after its free. Every buffer is filled by a kernel and checked before its
// free, so a reuse the driver did not order would also corrupt data; and
// every driver allocation that reuses memory freed on another stream is
// checked against the simulator's own happens-before relation (reuseOrder):
// none may be unordered, so the sanitizer's silence is not bought by
// missing a hazard. Each set of the driver pool's policies is run. (TestDriverReuseAfterCompletedFree
// is the false report itself, as simply as it happens.)
func TestPoolOverDriverPoolClean(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      mr.AsyncOptions
		threshold int
	}{
		{"default pool", mr.AsyncOptions{}, 4 << 20},
		{"own pool, opportunistic only", mr.AsyncOptions{OwnPool: true, DisableReuse: mr.ReuseAllowInternalDependencies}, 4 << 20},
		{"own pool, all policies", mr.AsyncOptions{OwnPool: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reps []*sanitize.Report
			z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reps = append(reps, r) }, StackDepth: -1})
			raw, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
			must(t, err)
			order := newReuseOrder(raw, raw.(*sim.Device))
			dev := z.Device(order)
			a, err := mr.NewAsync(dev, tc.opts)
			must(t, err)
			pool, err := mr.NewPool(a, mr.PoolOptions{ReleaseThreshold: tc.threshold})
			must(t, err)
			res := z.Resource(pool)
			k, err := kernels.Load(dev)
			must(t, err)
			streams := make([]gpu.Stream, 4)
			for i := range streams {
				streams[i], err = dev.NewStream()
				must(t, err)
			}
			errs, err := buf.NewVector[uint32](res, 1, streams[0])
			must(t, err)
			must(t, errs.Memset(0))
			type live struct {
				v    *buf.Vector[uint32]
				seed uint32
			}
			var bufs []live
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			pick := func() gpu.Stream { return streams[rng.IntN(len(streams))] }
			// A stream that frees often runs a long kernel right after
			// (for a few steps), so that memory the driver reuses was
			// often freed on a stream that is still busy.
			sd := raw.(*sim.Device)
			release, held := func() {}, 0
			for i := range 400 {
				if held > 0 {
					if held--; held == 0 {
						release()
					}
				}
				switch op := rng.IntN(10); {
				case op < 4 || len(bufs) == 0:
					n := (256 << 10) << rng.IntN(4) // 1 to 8 MiB: chunks of their own
					s := pick()
					v, err := buf.NewVector[uint32](res, n/4, s)
					must(t, err)
					seed := uint32(i) << 16
					must(t, v.Use(s, buf.Write, func() error { return k.Fill(s, v.Ptr(), v.Len(), seed) }))
					bufs = append(bufs, live{v, seed})
				case op < 6:
					b := bufs[rng.IntN(len(bufs))]
					s := pick()
					must(t, buf.UseAll(s, []buf.Operand{{Buf: b.v.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
						func() error { return k.Check(s, b.v.Ptr(), b.v.Len(), b.seed, errs.Ptr()) }))
				default:
					j := rng.IntN(len(bufs))
					s := pick()
					must(t, bufs[j].v.CloseOn(s))
					bufs = append(bufs[:j], bufs[j+1:]...)
					if held == 0 && rng.IntN(2) == 0 {
						release, held = sd.Hold(sanitize.Unwrap(s)), 1+rng.IntN(4)
					}
				}
			}
			release()
			for _, b := range bufs {
				must(t, b.v.CloseOn(pick()))
			}
			out := make([]uint32, 1)
			must(t, errs.CopyToHost(out))
			must(t, errs.Close())
			must(t, dev.Synchronize())
			for i, r := range reps {
				if i < 3 {
					t.Errorf("report: %s", r.Detail())
				}
			}
			if len(reps) > 0 {
				t.Errorf("%d reports on correct code", len(reps))
			}
			if out[0] != 0 {
				t.Errorf("%d words corrupted", out[0])
			}
			order.mu.Lock()
			checked, unordered := order.checked, order.unordered
			order.mu.Unlock()
			t.Logf("%d driver reuses across streams checked against the simulator's happens-before", checked)
			if checked == 0 || unordered != 0 {
				t.Errorf("%d of %d driver reuses across streams not ordered after their free", unordered, checked)
			}
			if st := pool.Stats(); st.Releases == 0 {
				t.Errorf("the pool gave nothing back to the driver: %+v", st)
			}
			must(t, pool.Close())
			must(t, a.Close())
			must(t, dev.Synchronize())
			for _, s := range streams {
				must(t, s.Destroy())
			}
		})
	}
}

// The false report, as simply as it happens: a pool chunk freed on A is
// given back to the driver, A then runs a long kernel, and B's growth gets
// the same memory from the driver at once, because the free itself has
// completed (opportunistic reuse). B is ordered after the free by the
// driver; the sanitizer used to require A to be idle, and reported the
// reuse. Without opportunistic reuse (and internal dependencies) the
// driver must grow instead, and nothing is reported either.
func TestDriverReuseAfterCompletedFree(t *testing.T) {
	for _, tc := range []struct {
		name    string
		disable mr.ReusePolicy
		reused  bool
	}{
		{"opportunistic", 0, true},
		{"events only", mr.ReuseAllowOpportunistic | mr.ReuseAllowInternalDependencies, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reps []*sanitize.Report
			z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reps = append(reps, r) }})
			raw, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
			must(t, err)
			sd := raw.(*sim.Device)
			dev := z.Device(raw)
			a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 30, DisableReuse: tc.disable})
			must(t, err)
			pool, err := mr.NewPool(a, mr.PoolOptions{ReleaseThreshold: 1})
			must(t, err)
			res := z.Resource(pool)
			sa, err := dev.NewStream()
			must(t, err)
			sb, err := dev.NewStream()
			must(t, err)
			const n = 8 << 20
			p, err := res.Allocate(n, sa)
			must(t, err)
			must(t, res.Deallocate(p, n, sa)) // the chunk goes back to the driver, on A
			release := sd.Hold(sanitize.Unwrap(sa))
			q, err := res.Allocate(n, sb)
			must(t, err)
			release()
			if (q == p) != tc.reused {
				t.Errorf("B got %#x, A freed %#x: reused %v, want %v", uint64(q), uint64(p), q == p, tc.reused)
			}
			must(t, res.Deallocate(q, n, sb))
			must(t, dev.Synchronize())
			for _, r := range reps {
				t.Errorf("report: %s", r.Detail())
			}
			must(t, pool.Close())
			must(t, a.Close())
		})
	}
}

// rehoming is a suballocator over the driver's pool that frees on a home
// stream of its own. With ordered unset it is broken: the home is not
// ordered after the stream the caller freed on (a Pool that released a
// chunk without waiting on the streams that freed its blocks would do
// this); with ordered set, the home waits on an event recorded on the
// caller's stream first, as a correct one does.
type rehoming struct {
	dev     gpu.Device
	home    gpu.Stream
	ordered bool
}

func (r *rehoming) Device() gpu.Device { return r.dev }
func (r *rehoming) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	return r.dev.MallocAsync(n, s)
}
func (r *rehoming) Deallocate(p gpu.DevicePtr, n int, s gpu.Stream) error {
	if r.ordered {
		e, err := r.dev.NewEvent(false)
		if err != nil {
			return err
		}
		if err := e.Record(s); err != nil {
			return err
		}
		if err := r.home.WaitEvent(e); err != nil {
			return err
		}
	}
	return r.dev.FreeAsync(p, r.home)
}

// Modelling the driver's reuse hides no hazard of the resource above it: a
// free that the resource gives the driver on a stream not ordered after
// the caller's free is still reported when the driver hands the memory to
// another stream (the driver-level free's clock lacks the caller's free);
// with the free ordered, the same reuse is clean.
func TestDriverReuseKeepsHazards(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		var reps []*sanitize.Report
		z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reps = append(reps, r) }})
		raw, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
		must(t, err)
		sd := raw.(*sim.Device)
		dev := z.Device(raw)
		sf, _ := dev.NewStream()
		home, _ := dev.NewStream()
		sb, _ := dev.NewStream()
		res := z.Resource(&rehoming{dev: dev, home: home, ordered: ordered})
		const n = 1 << 20
		p, err := res.Allocate(n, sf)
		must(t, err)
		must(t, res.Deallocate(p, n, sf))
		release := sd.Hold(sanitize.Unwrap(sf)) // the freeing stream stays busy
		// Let the driver-level free complete, without the host knowing
		// (Completed orders nothing): the driver may then reuse it.
		for last := sd.LastOp(sanitize.Unwrap(home)); !sd.Completed(last); {
			time.Sleep(time.Millisecond)
		}
		q, err := res.Allocate(n, sb)
		release()
		must(t, err)
		must(t, dev.Synchronize())
		if q != p {
			t.Fatalf("ordered=%v: the driver did not reuse the memory (%#x, then %#x)", ordered, uint64(p), uint64(q))
		}
		reuse := 0
		for _, r := range reps {
			if errors.Is(r, sanitize.ReuseBeforeFree) {
				reuse++
			}
		}
		if !ordered && reuse != 1 {
			t.Errorf("unordered free: %d reuse reports of %d, want 1", reuse, len(reps))
		}
		if ordered && len(reps) > 0 {
			t.Errorf("ordered free: %d reports, first %s", len(reps), reps[0].Detail())
		}
	}
}
