package mr_test

// Every driver call on every path of every resource and adaptor, failed in
// turn. A scenario (faultScenario) builds a stack on a simulated device and
// walks its paths: growth, growth with chunks already present, cross-stream
// frees and the absorption of their blocks, a steal, a release and a reap
// with blocks still pending, a device synchronization, Close (which
// destroys a resource's own driver pool and its cached events) and the
// destruction of the streams. A dry run counts the driver calls it makes;
// then for every k the scenario runs again on a fresh device whose k-th
// driver call fails (sim.FailCall). After every step, failed or not, the
// stack's accounting must agree with a model of what is live; a failed
// step must fail with the injected error and succeed when retried; and at
// the end everything is freed, nothing is reserved, and the device has
// all its memory back.

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// errFault is what the injected call fails with: a driver code that none
// of these paths meets otherwise.
var errFault = gpu.ErrLaunchFailed

// faultStack builds a stack on dev and returns its top and a closer. view,
// if set, is the device the stack and its streams are made on (the
// sanitizer's instrumented one).
type faultStack struct {
	name  string
	view  func(gpu.Device) gpu.Device
	build func(dev gpu.Device) (mr.Resource, func() error, error)
	ops   []sim.Op // driver calls the scenario must make (so must fail) on this stack
}

func faultStacks() []faultStack {
	z := sanitize.New(sanitize.Options{StackDepth: -1})
	asyncOwn := func(dev gpu.Device) (*mr.Async, error) {
		return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 64 << 20})
	}
	poolOver := func(up mr.Resource, closeUp func() error) (mr.Resource, func() error, error) {
		p, err := mr.NewPool(up, mr.PoolOptions{ChunkSize: 4 << 20})
		if err != nil {
			closeUp()
			return nil, nil, err
		}
		return p, func() error { return errors.Join(p.Close(), closeUp()) }, nil
	}
	recommended := func(dev gpu.Device) (mr.Resource, func() error, error) {
		a, err := asyncOwn(dev)
		if err != nil {
			return nil, nil, err
		}
		return poolOver(a, a.Close)
	}
	common := []sim.Op{sim.OpStreamCreate, sim.OpEventCreate, sim.OpEventRecord, sim.OpStreamWaitEvent, sim.OpCtxSynchronize, sim.OpEventDestroy, sim.OpStreamDestroy}
	ownPool := append([]sim.Op{sim.OpMemPoolCreate, sim.OpMemPoolSetAttribute, sim.OpMallocFromPoolAsync, sim.OpFreeAsync, sim.OpMemPoolDestroy}, common...)
	return []faultStack{
		{name: "pool over async (own pool)", build: recommended, ops: ownPool},
		{name: "pool over async (default pool)", ops: append([]sim.Op{sim.OpDeviceGetDefaultMemPool, sim.OpMallocAsync, sim.OpFreeAsync}, common...), build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := mr.NewAsync(dev, mr.AsyncOptions{})
			if err != nil {
				return nil, nil, err
			}
			return poolOver(a, a.Close)
		}},
		{name: "pool over direct", ops: append([]sim.Op{sim.OpMalloc, sim.OpFree, sim.OpStreamSynchronize}, common...), build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			return poolOver(mr.NewDirect(dev), func() error { return nil })
		}},
		{name: "async (own pool)", ops: append([]sim.Op{sim.OpMemPoolGetAttribute, sim.OpMemPoolTrimTo, sim.OpStreamQuery}, ownPool...), build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := asyncOwn(dev)
			if err != nil {
				return nil, nil, err
			}
			return a, a.Close, nil
		}},
		{name: "arena over direct", ops: append([]sim.Op{sim.OpMalloc, sim.OpFree, sim.OpStreamIsCapturing}, common...), build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 2 << 20})
			if err != nil {
				return nil, nil, err
			}
			return a, a.Close, nil
		}},
		{name: "binning over async", ops: append([]sim.Op{sim.OpStreamIsCapturing}, ownPool...), build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			a, err := asyncOwn(dev)
			if err != nil {
				return nil, nil, err
			}
			b, err := mr.NewBinning(a, mr.BinningOptions{MinSize: 256, MaxSize: 512 << 10, BlocksPerChunk: 4})
			if err != nil {
				a.Close()
				return nil, nil, err
			}
			return b, func() error { return errors.Join(b.Release(), a.Close()) }, nil
		}},
		{name: "adaptors over the pool", ops: ownPool, build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			p, closeP, err := recommended(dev)
			if err != nil {
				return nil, nil, err
			}
			var top mr.Resource = mr.NewLimit(p, mr.NewBudget(1<<30))
			top = mr.NewRetry(top, mr.RetryOptions{})
			top = mr.NewStats(top, mr.StatsOptions{PerStream: true})
			top = mr.NewTracking(top, mr.TrackingOptions{})
			top = mr.NewLogging(top, io.Discard, mr.LoggingOptions{})
			return top, closeP, nil
		}},
		{name: "aligned over the pool", ops: ownPool, build: func(dev gpu.Device) (mr.Resource, func() error, error) {
			p, closeP, err := recommended(dev)
			if err != nil {
				return nil, nil, err
			}
			a, err := mr.NewAligned(p, 4096)
			if err != nil {
				closeP()
				return nil, nil, err
			}
			return a, closeP, nil
		}},
		{name: "sanitizer over the pool, instrumented device", ops: ownPool, view: func(dev gpu.Device) gpu.Device { return z.Device(dev) },
			build: func(dev gpu.Device) (mr.Resource, func() error, error) {
				p, closeP, err := recommended(dev)
				if err != nil {
					return nil, nil, err
				}
				return z.Resource(p), closeP, nil
			}},
	}
}

// faultRun is one run of the scenario on a fresh device.
type faultRun struct {
	t     *testing.T
	dev   *sim.Device
	top   mr.Resource
	close func() error
	live  map[gpu.DevicePtr]int // the model: what the stack handed out
	fails int                   // steps that failed
}

// step runs f; if it fails, the error must be the injected one, the
// accounting must be intact, and f is run again, which must succeed.
func (r *faultRun) step(name string, f func() error) {
	r.t.Helper()
	if err := f(); err != nil {
		if !errors.Is(err, errFault) {
			r.t.Fatalf("%s: %v, want the injected %v", name, err, errFault)
		}
		r.fails++
		r.check(name + " (failed)")
		if err := f(); err != nil {
			r.t.Fatalf("%s, again: %v", name, err)
		}
	}
	r.check(name)
}

// check compares the stack's accounting with the model.
func (r *faultRun) check(when string) {
	r.t.Helper()
	if r.top == nil {
		return
	}
	var want uint64
	for _, n := range r.live {
		want += uint64(n)
	}
	if u, ok := r.top.(mr.UsageReporter); ok {
		if got := u.Usage(); got.Used != want {
			r.t.Fatalf("%s: %s: usage %+v, the model %d bytes", when, r.name(), got, want)
		}
	}
	for _, x := range mr.Chain(r.top) {
		if pf, ok := x.(*mr.Async); ok {
			if err := pf.Pending().Check(); err != nil {
				r.t.Fatalf("%s: async: %v", when, err)
			}
		}
	}
}

func (r *faultRun) name() string { return fmt.Sprintf("%T", r.top) }

func (r *faultRun) alloc(p *gpu.DevicePtr, n int, s *gpu.Stream) func() error {
	return func() error {
		q, err := r.top.Allocate(n, *s)
		if err == nil {
			*p = q
			r.live[q] = n
		}
		return err
	}
}

func (r *faultRun) free(p *gpu.DevicePtr, n int, s *gpu.Stream) func() error {
	return func() error {
		err := r.top.Deallocate(*p, n, *s)
		if err == nil {
			delete(r.live, *p)
		}
		return err
	}
}

// faultScenario walks the stack's paths; see the file comment.
func faultScenario(t *testing.T, fs faultStack, inject sim.Injector) (calls []sim.Call, r *faultRun) {
	t.Helper()
	raw, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	dev := raw.(*sim.Device)
	var view gpu.Device = dev
	if fs.view != nil {
		view = fs.view(dev)
	}
	r = &faultRun{t: t, dev: dev, live: map[gpu.DevicePtr]int{}}
	dev.SetInjector(func(c sim.Call) error {
		calls = append(calls, c)
		if inject != nil {
			return inject(c)
		}
		return nil
	})
	var s1, s2, s3 gpu.Stream
	newStream := func(s *gpu.Stream) func() error {
		return func() error {
			x, err := view.NewStream()
			if err == nil {
				*s = x
			}
			return err
		}
	}
	r.step("stream 1", newStream(&s1))
	r.step("stream 2", newStream(&s2))
	r.step("stream 3", newStream(&s3))
	r.step("build", func() error {
		top, closer, err := fs.build(view)
		if err == nil {
			r.top, r.close = top, closer
		}
		return err
	})
	// For the Pool (chunks of 4 MiB): a and g share a chunk, b grows a small
	// chunk and c a big one with those present; a and g freed on 2 leave
	// their chunk idle with pending blocks and not 1's working chunk, so
	// 3's request steals it (waiting on 1 and 2); c freed on 3 is pending
	// in its chunk when the release gives it back.
	var a, b, c, d, e, g gpu.DevicePtr
	r.step("allocate a on 1 (growth)", r.alloc(&a, 3<<19, &s1))
	r.step("allocate g on 1", r.alloc(&g, 3<<19, &s1))
	r.step("allocate b on 1 (growth with chunks present)", r.alloc(&b, 100<<10, &s1))
	r.step("allocate c on 1 (a big growth)", r.alloc(&c, 5<<20, &s1))
	r.step("free a on 2 (cross-stream)", r.free(&a, 3<<19, &s2))
	r.step("free g on 2 (cross-stream)", r.free(&g, 3<<19, &s2))
	r.step("allocate d on 3 (steals a chunk with pending blocks)", r.alloc(&d, 3<<20, &s3))
	r.step("free b on 1", r.free(&b, 100<<10, &s1))
	r.step("free c on 3 (cross-stream)", r.free(&c, 5<<20, &s3))
	r.step("release with blocks pending", func() error { _, err := mr.Reclaim(r.top, false); return err })
	r.step("allocate e on 2", r.alloc(&e, 1<<20, &s2))
	r.step("free d on 3", r.free(&d, 3<<20, &s3))
	r.step("free e on 1 (cross-stream)", r.free(&e, 1<<20, &s1))
	r.step("synchronize the device", view.Synchronize)
	r.step("reclaim, waiting", func() error { _, err := mr.Reclaim(r.top, true); return err })
	if u, ok := r.top.(mr.UsageReporter); ok && u.Usage().Reserved != 0 {
		t.Fatalf("after everything was freed and reclaimed: %+v", u.Usage())
	}
	r.step("close", func() error { return r.close() })
	r.step("synchronize again", view.Synchronize)
	for i, s := range []*gpu.Stream{&s1, &s2, &s3} {
		r.step(fmt.Sprintf("destroy stream %d", i+1), (*s).Destroy)
	}
	dev.SetInjector(nil)
	if len(r.live) != 0 {
		t.Fatalf("%d allocations left in the model", len(r.live))
	}
	if free, total, err := dev.MemGetInfo(); err != nil || free != total {
		t.Fatalf("the device has %d of %d bytes free at the end (%v)", free, total, err)
	}
	return calls, r
}

// TestFaultEveryCall fails each driver call of the scenario in turn, for
// every stack.
func TestFaultEveryCall(t *testing.T) {
	for _, fs := range faultStacks() {
		t.Run(fs.name, func(t *testing.T) {
			calls, dry := faultScenario(t, fs, nil)
			ops := map[sim.Op]bool{}
			for _, c := range calls {
				ops[c.Op] = true
			}
			var missing []sim.Op
			for _, op := range fs.ops {
				if !ops[op] {
					missing = append(missing, op)
				}
			}
			if len(missing) > 0 {
				t.Errorf("the scenario makes no call of %v", missing)
			}
			for _, x := range mr.Chain(dry.top) {
				if p, ok := x.(*mr.Pool); ok {
					if st := p.Stats(); st.Steals == 0 || st.Waits < 2 || st.Releases == 0 {
						t.Errorf("the scenario took the pool through no steal, wait or release: %+v", st)
					}
				}
			}
			failed := 0
			for k := 1; k <= len(calls); k++ {
				ok := t.Run(fmt.Sprintf("call %d", k), func(t *testing.T) {
					_, r := faultScenario(t, fs, sim.FailCall(k, errFault))
					failed += r.fails
				})
				if !ok {
					break
				}
			}
			t.Logf("%d driver calls, each failed in turn: %d steps failed and were retried", len(calls), failed)
			if failed == 0 {
				t.Errorf("no failure reached a step")
			}
		})
	}
}
