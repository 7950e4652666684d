package mr_test

// Pending-free accounting and the adaptors on the simulator: fault
// injection for each driver call their paths make (allocation, event
// creation and record, stream wait, free, query, synchronize), with the
// counters checked after every failure, and recovery from out-of-memory
// with frees really in flight.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func simDevices(t testing.TB, cfg sim.Config) []*sim.Device {
	t.Helper()
	b := sim.New(cfg)
	n, err := b.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	var out []*sim.Device
	for i := range n {
		d, err := b.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.(*sim.Device))
	}
	return out
}

func newStream(t testing.TB, d gpu.Device) gpu.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

var errInjected = gpu.ErrLaunchFailed

// TestPendingFreesSimFaults fails the synchronization (and the query) of a
// chosen stream on the simulator. FailNext counts the calls of one device,
// so the streams alternate between two devices: failing device 1's next
// call fails the first device-1 stream in reap order, after the device-0
// streams before it were reaped.
func TestPendingFreesSimFaults(t *testing.T) {
	for _, op := range []sim.Op{sim.OpStreamSynchronize, sim.OpStreamQuery} {
		t.Run(op.String(), func(t *testing.T) {
			devs := simDevices(t, sim.Config{Devices: 2})
			// IDs increase in creation order: d0 d0 d1 d0 d1.
			onDev := []int{0, 0, 1, 0, 1}
			var streams []gpu.Stream
			for _, i := range onDev {
				streams = append(streams, newStream(t, devs[i]))
			}
			var p mr.PendingFrees
			var total uint64
			sizes := []uint64{256, 512, 1024, 2048, 4096}
			for i, s := range streams {
				p.AddLive(sizes[i])
				if err := p.Add(s, sizes[i]); err != nil {
					t.Fatal(err)
				}
				total += sizes[i]
			}
			checkPending(t, &p, 0, total)

			wait := op == sim.OpStreamSynchronize
			devs[1].FailNext(op, 1, errInjected)
			n, err := p.Reap(wait)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Reap: %v, want the injected failure", err)
			}
			// Streams 0 and 1 were reaped; 2 failed; 3 and 4 not tried.
			if n != 256+512 {
				t.Fatalf("reaped %d, want %d", n, 256+512)
			}
			checkPending(t, &p, 0, total-n)
			for i, s := range streams {
				want := sizes[i]
				if i < 2 {
					want = 0
				}
				if got := pendingOf(&p, s); got != want {
					t.Errorf("stream %d: pending %d, want %d", i, got, want)
				}
			}
			n2, err := p.Reap(wait)
			if err != nil || n+n2 != total {
				t.Fatalf("second reap %d, %v", n2, err)
			}
			checkPending(t, &p, 0, 0)
		})
	}
}

// TestPendingFreesSimHeldStream: a query reap leaves a busy stream's bytes
// pending and takes the rest; once the stream is released they go too.
func TestPendingFreesSimHeldStream(t *testing.T) {
	d := simDevices(t, sim.Config{})[0]
	s1, s2 := newStream(t, d), newStream(t, d)
	var p mr.PendingFrees
	p.AddLive(1000)
	p.AddLive(3000)
	release := d.Hold(s1)
	p.Add(s1, 1000)
	p.Add(s2, 3000)
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Reap(false); n != 3000 || err != nil {
		t.Fatalf("Reap(false) with s1 held = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 1000)
	release()
	if n, err := p.Reap(true); n != 1000 || err != nil {
		t.Fatalf("Reap(true) = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 0)
}

// TestPendingFreesSimDestroyedStream: frees enqueued on a stream that is
// then destroyed are reaped by synchronizing the device, and a failing
// device synchronize keeps them pending.
func TestPendingFreesSimDestroyedStream(t *testing.T) {
	d := simDevices(t, sim.Config{})[0]
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	var p mr.PendingFrees
	p.AddLive(4096)
	p.Add(s, 4096)
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Reap(false); n != 0 || err != nil {
		t.Fatalf("Reap(false) = %d, %v", n, err)
	}
	d.FailNext(sim.OpCtxSynchronize, 1, errInjected)
	if n, err := p.Reap(true); n != 0 || !errors.Is(err, errInjected) {
		t.Fatalf("Reap(true) with failing device sync = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 4096)
	if n, err := p.Reap(true); n != 4096 || err != nil {
		t.Fatalf("Reap(true) = %d, %v", n, err)
	}
	checkPending(t, &p, 0, 0)
}

// asyncStack is Stats over Limit over Tracking over Async on a simulated
// device, with the model of what should be live.
type asyncStack struct {
	t     *testing.T
	dev   *sim.Device
	async *mr.Async
	track *mr.Tracking
	limit *mr.Limit
	stats *mr.Stats
	live  map[gpu.DevicePtr]int
	freed uint64 // bytes freed and not yet reaped
}

func newAsyncStack(t *testing.T, cfg sim.Config, opts mr.AsyncOptions) *asyncStack {
	d := simDevices(t, cfg)[0]
	a, err := mr.NewAsync(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	st := &asyncStack{t: t, dev: d, async: a, live: map[gpu.DevicePtr]int{}}
	st.track = mr.NewTracking(a, mr.TrackingOptions{})
	st.limit = mr.NewLimit(st.track, mr.NewBudget(1<<40))
	st.stats = mr.NewStats(st.limit, mr.StatsOptions{PerStream: true})
	return st
}

// check compares every counter with the model: nothing lost, nothing
// counted twice.
func (st *asyncStack) check(when string) {
	st.t.Helper()
	var liveBytes, charged uint64
	for _, n := range st.live {
		liveBytes += uint64(n)
		charged += uint64((n + 255) &^ 255)
	}
	pf := st.async.Pending()
	if err := pf.Check(); err != nil {
		st.t.Fatalf("%s: %v", when, err)
	}
	l, pend, nl, _ := pf.Counts()
	snap := st.stats.Snapshot()
	an, ab := st.async.Live()
	switch {
	case l != liveBytes || nl != uint64(len(st.live)):
		st.t.Fatalf("%s: pending accounting says %d live bytes in %d, model %d in %d", when, l, nl, liveBytes, len(st.live))
	case pend != st.freed:
		st.t.Fatalf("%s: %d pending bytes, model %d", when, pend, st.freed)
	case snap.Bytes.Current != liveBytes || snap.Allocations.Current != uint64(len(st.live)):
		st.t.Fatalf("%s: stats %+v, model %d bytes in %d", when, snap, liveBytes, len(st.live))
	case ab != liveBytes || an != len(st.live):
		st.t.Fatalf("%s: async holds %d bytes in %d, model %d in %d", when, ab, an, liveBytes, len(st.live))
	case st.limit.Used() != charged || st.limit.Budget().Used() != charged:
		st.t.Fatalf("%s: limit charged %d (budget %d), model %d", when, st.limit.Used(), st.limit.Budget().Used(), charged)
	case len(st.track.Live()) != len(st.live):
		st.t.Fatalf("%s: tracking holds %d allocations, model %d", when, len(st.track.Live()), len(st.live))
	}
}

// TestAsyncFaultAccounting injects one failure of each driver call that
// allocation, a cross-stream free and reaping make, runs the same scenario,
// and checks after every step, failed or not, that the pending-free
// accounting, the Stats adaptor and the resource agree with the model.
// Each failed step is then retried and must succeed.
func TestAsyncFaultAccounting(t *testing.T) {
	ops := []struct {
		op  sim.Op
		err error
	}{
		{sim.OpMallocAsync, errInjected},
		{sim.OpMallocAsync, gpu.ErrOutOfMemory},
		{sim.OpEventCreate, errInjected},
		{sim.OpEventRecord, errInjected},
		{sim.OpStreamWaitEvent, errInjected},
		{sim.OpFreeAsync, errInjected},
		{sim.OpStreamQuery, errInjected},
		{sim.OpStreamSynchronize, errInjected},
	}
	for _, fo := range ops {
		t.Run(fmt.Sprintf("%v/%v", fo.op, fo.err), func(t *testing.T) {
			st := newAsyncStack(t, sim.Config{}, mr.AsyncOptions{})
			s1, s2 := newStream(t, st.dev), newStream(t, st.dev)
			st.dev.FailNext(fo.op, 1, fo.err)
			failures := 0
			// run does one step; if it fails with the injected error,
			// the counters must be as before, and the step is retried.
			run := func(name string, step func() error) {
				t.Helper()
				err := step()
				if err != nil {
					if !errors.Is(err, fo.err) {
						t.Fatalf("%s: %v", name, err)
					}
					failures++
					st.check(name + " (failed)")
					if err := step(); err != nil {
						t.Fatalf("%s retried: %v", name, err)
					}
				}
				st.check(name)
			}
			var p, q gpu.DevicePtr
			alloc := func(ptr *gpu.DevicePtr, size int, s gpu.Stream) func() error {
				return func() error {
					x, err := st.stats.Allocate(size, s)
					if err == nil {
						*ptr = x
						st.live[x] = size
					}
					return err
				}
			}
			free := func(ptr *gpu.DevicePtr, size int, s gpu.Stream) func() error {
				return func() error {
					err := st.stats.Deallocate(*ptr, size, s)
					if err == nil {
						delete(st.live, *ptr)
						st.freed += uint64(size)
					}
					return err
				}
			}
			reap := func(wait bool) func() error {
				return func() error {
					n, err := st.async.Reap(wait)
					st.freed -= n
					return err
				}
			}
			var r gpu.DevicePtr
			run("allocate p on s1", alloc(&p, 1<<20, s1))
			run("allocate q on s1", alloc(&q, 3000, s1))
			run("free p on s2 (cross-stream)", free(&p, 1<<20, s2))
			run("free q on s1", free(&q, 3000, s1))
			if err := st.dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			run("query reap", reap(false))
			run("allocate r on s2", alloc(&r, 5000, s2))
			run("free r on s2", free(&r, 5000, s2))
			run("waiting reap", reap(true))
			if failures != 1 {
				t.Fatalf("the injected failure of %v happened %d times, want 1", fo.op, failures)
			}
			if st.freed != 0 || st.async.Pending().Outstanding() != 0 {
				t.Fatalf("left %d pending, outstanding %d", st.freed, st.async.Pending().Outstanding())
			}
			snap := st.stats.Snapshot()
			wantOOM := uint64(0)
			if errors.Is(fo.err, gpu.ErrOutOfMemory) {
				wantOOM = 1
			}
			if snap.Allocations.Total != 3 || snap.OutOfMemory != wantOOM {
				t.Fatalf("stats %+v", snap)
			}
		})
	}
}

// TestRetryRecoversPendingFrees: out of memory because a free is still in
// flight on a busy stream; Retry's first attempt only queries (the stream
// is still held), the callback lets the stream go, and the second attempt
// synchronizes, reaps and releases, after which the request fits. Every
// reuse policy of the pool is off, so the freed memory comes back only
// through Release, whatever the timing of the stream.
func TestRetryRecoversPendingFrees(t *testing.T) {
	const capacity = 64 << 20
	st := newAsyncStack(t, sim.Config{Capacity: capacity}, mr.AsyncOptions{OwnPool: true,
		DisableReuse: mr.ReuseAllowInternalDependencies | mr.ReuseFollowEventDependencies | mr.ReuseAllowOpportunistic})
	s1, s2 := newStream(t, st.dev), newStream(t, st.dev)
	p, err := st.stats.Allocate(48<<20, s1)
	if err != nil {
		t.Fatal(err)
	}
	release := st.dev.Hold(s1)
	defer release()
	if err := st.stats.Deallocate(p, 48<<20, s1); err != nil {
		t.Fatal(err)
	}
	// Without recovery the request fails: the 48 MiB are still reserved.
	if _, err := st.stats.Allocate(48<<20, s2); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("allocation with the free in flight: %v, want out of memory", err)
	}
	var attempts []int
	r := mr.NewRetry(st.stats, mr.RetryOptions{OnOutOfMemory: func(size int, s gpu.Stream, attempt int, err error) bool {
		attempts = append(attempts, attempt)
		release() // the long kernel ends
		return true
	}})
	q, err := r.Allocate(48<<20, s2)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	c := r.Counts()
	if c.Recovered != 1 || c.Retries != 2 || c.Reaped != 48<<20 || !slices.Equal(attempts, []int{1, 2}) {
		t.Fatalf("counts %+v, attempts %v", c, attempts)
	}
	if err := r.Deallocate(q, 48<<20, s2); err != nil {
		t.Fatal(err)
	}
	if n, err := st.async.Reap(true); err != nil || n != 48<<20 {
		t.Fatalf("final reap %d, %v", n, err)
	}
	if out := st.async.Pending().Outstanding(); out != 0 {
		t.Fatalf("outstanding %d", out)
	}
}

// TestAdaptorsOnDevice runs the whole adaptor stack over the async
// resource of the device the environment selects (the simulator by
// default, the GPU in the GPU script), from several goroutines on several
// streams, and checks that every counter returns to zero.
func TestAdaptorsOnDevice(t *testing.T) {
	dev := testdev.Device(t)
	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var stack mr.Resource = a
	var layers []mr.Resource
	for _, ac := range adaptorCases() {
		stack = ac.wrap(t, stack)
		layers = append(layers, stack)
	}
	const goroutines = 6
	n := 200
	if testing.Short() {
		n = 50
	}
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		s := newStream(t, dev)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []gpu.DevicePtr
			for i := range n {
				p, err := stack.Allocate(4096, s)
				if err != nil {
					errc <- err
					return
				}
				held = append(held, p)
				if len(held) == 4 {
					for _, q := range held {
						if err := stack.Deallocate(q, 4096, s); err != nil {
							errc <- err
							return
						}
					}
					held = held[:0]
				}
				if i%50 == 49 {
					if _, err := a.Reap(g%2 == 0); err != nil {
						errc <- err
						return
					}
				}
			}
			for _, q := range held {
				if err := stack.Deallocate(q, 4096, s); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if _, err := a.Reap(true); err != nil {
		t.Fatal(err)
	}
	if err := a.Pending().Check(); err != nil {
		t.Fatal(err)
	}
	if out := a.Pending().Outstanding(); out != 0 {
		t.Fatalf("outstanding after reaping everything: %d", out)
	}
	if snap := layers[0].(*mr.Stats).Snapshot(); snap.Bytes.Current != 0 || snap.Allocations.Total != goroutines*uint64(n) {
		t.Fatalf("stats %+v", snap)
	}
	if n, _ := a.Live(); n != 0 {
		t.Fatalf("async holds %d allocations", n)
	}
}

// TestLimitBudgetAcrossSimDevices: one budget shared by the async
// resources of two simulated devices; a request on one device fails when
// the other holds the budget, with the budget in the message, and fits
// once the other device's memory is freed.
func TestLimitBudgetAcrossSimDevices(t *testing.T) {
	devs := simDevices(t, sim.Config{Devices: 2})
	b := mr.NewBudget(3 << 20)
	var limits []*mr.Limit
	var streams []gpu.Stream
	for _, d := range devs {
		a, err := mr.NewAsync(d, mr.AsyncOptions{OwnPool: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		limits = append(limits, mr.NewLimit(a, b))
		streams = append(streams, newStream(t, d))
	}
	p0, err := limits[0].Allocate(2<<20, streams[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = limits[1].Allocate(2<<20, streams[1])
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) || oom.Limit != 3<<20 ||
		!strings.Contains(err.Error(), "over the budget of 3.0 MiB: 2.0 MiB in use, 2.0 MiB more do not fit") {
		t.Fatalf("device 1 over the shared budget: %v", err)
	}
	if b.Used() != 2<<20 || limits[1].Used() != 0 {
		t.Fatalf("budget %d, device 1 charged %d", b.Used(), limits[1].Used())
	}
	if err := limits[0].Deallocate(p0, 2<<20, streams[0]); err != nil {
		t.Fatal(err)
	}
	p1, err := limits[1].Allocate(2<<20, streams[1])
	if err != nil {
		t.Fatalf("device 1 after device 0 freed: %v", err)
	}
	if err := limits[1].Deallocate(p1, 2<<20, streams[1]); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 || b.Peak() != 2<<20 {
		t.Fatalf("budget used %d, peak %d", b.Used(), b.Peak())
	}
}
