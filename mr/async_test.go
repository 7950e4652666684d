package mr_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestAsyncOptions(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	def, err := dev.DefaultMemPool()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		opts  mr.AsyncOptions
		attrs map[gpu.PoolAttr]uint64
	}{
		{"default pool untouched", mr.AsyncOptions{}, map[gpu.PoolAttr]uint64{
			gpu.PoolReleaseThreshold: 0, gpu.PoolReuseAllowOpportunistic: 1,
			gpu.PoolReuseFollowEventDependencies: 1, gpu.PoolReuseAllowInternalDependencies: 1}},
		{"own pool keeps everything", mr.AsyncOptions{OwnPool: true, ReleaseThreshold: math.MaxUint64}, map[gpu.PoolAttr]uint64{
			gpu.PoolReleaseThreshold: math.MaxUint64}},
		{"reuse policies off", mr.AsyncOptions{OwnPool: true,
			DisableReuse: mr.ReuseAllowOpportunistic | mr.ReuseAllowInternalDependencies}, map[gpu.PoolAttr]uint64{
			gpu.PoolReuseAllowOpportunistic: 0, gpu.PoolReuseAllowInternalDependencies: 0,
			gpu.PoolReuseFollowEventDependencies: 1}},
		{"initial pool", mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 64 << 20, InitialPoolSize: 32 << 20},
			map[gpu.PoolAttr]uint64{gpu.PoolReleaseThreshold: 64 << 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := mr.NewAsync(dev, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if (r.Pool() == def) == c.opts.OwnPool {
				t.Errorf("OwnPool %v but Pool() == default pool is %v", c.opts.OwnPool, r.Pool() == def)
			}
			for a, want := range c.attrs {
				if got, err := r.Attribute(a); err != nil || got != want {
					t.Errorf("attribute %d = %d, %v; want %d", a, got, err, want)
				}
			}
			if c.opts.InitialPoolSize != 0 {
				if u := r.Usage(); u.Reserved < uint64(c.opts.InitialPoolSize) || u.Used != 0 {
					t.Errorf("initial pool: usage %+v, want at least %d reserved and nothing used", u, c.opts.InitialPoolSize)
				}
			}
		})
	}
	if _, err := mr.NewAsync(dev, mr.AsyncOptions{InitialPoolSize: -1}); !errors.Is(err, mr.ErrInvalidSize) {
		t.Errorf("negative initial pool: %v", err)
	}
	if _, err := mr.NewAsync(nil, mr.AsyncOptions{}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil device: %v", err)
	}
	if _, err := mr.NewAsync(noPools{dev}, mr.AsyncOptions{}); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("device without pools: %v", err)
	}
}

// noPools is a device that says it has no memory pools.
type noPools struct{ gpu.Device }

func (d noPools) Properties() gpu.Properties {
	p := d.Device.Properties()
	p.MemoryPoolsSupported = false
	return p
}

func TestAsyncUsageTrimAndClose(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(3<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Used < 3<<20 || u.Reserved < u.Used || u.PeakUsed < u.Used {
		t.Errorf("usage with 3 MiB live: %+v", u)
	}
	if n, b := r.Live(); n != 1 || b != 3<<20 {
		t.Errorf("Live() = %d, %d", n, b)
	}
	if err := r.Close(); err == nil {
		t.Fatal("Close with a live allocation on an own pool succeeded")
	}
	if _, err := r.Allocate(10, s); !errors.Is(err, mr.ErrClosed) {
		t.Errorf("Allocate after Close: %v, want ErrClosed", err)
	}
	if err := r.Deallocate(p, 3<<20, s); err != nil {
		t.Fatalf("Deallocate after Close: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Used != 0 || u.Reserved == 0 {
		t.Errorf("after free with an infinite threshold: %+v, want memory kept and none used", u)
	}
	if err := r.ResetPeaks(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.PeakUsed != 0 {
		t.Errorf("after ResetPeaks: %+v", u)
	}
	if err := r.Trim(0); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != 0 {
		t.Errorf("after Trim(0): %+v", u)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close after everything was freed: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestAsyncFailures injects driver failures into allocation and free: the
// errors are typed and a failed free leaves the pointer live.
func TestAsyncFailures(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	r, err := mr.NewAsync(dev, mr.AsyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev.FailNext(sim.OpMallocAsync, 1, gpu.ErrOutOfMemory)
	var oe *mr.OutOfMemoryError
	if _, err := r.Allocate(1000, s1); !errors.As(err, &oe) || oe.Resource != "async" {
		t.Fatalf("injected OOM: %v", err)
	}
	p, err := r.Allocate(1000, s1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		op sim.Op
		s  gpu.Stream
	}{{sim.OpFreeAsync, s1}, {sim.OpEventRecord, s2}, {sim.OpStreamWaitEvent, s2}} {
		dev.FailNext(f.op, 1, gpu.ErrLaunchFailed)
		if err := r.Deallocate(p, 1000, f.s); !errors.Is(err, gpu.ErrLaunchFailed) {
			t.Fatalf("free with %v failing: %v", f.op, err)
		}
		if n, _ := r.Live(); n != 1 {
			t.Fatalf("failed free (%v) dropped the pointer", f.op)
		}
	}
	if err := r.Deallocate(p, 1000, s2); err != nil {
		t.Fatal(err)
	}
}

// TestAsyncEventsAreCached checks that cross-stream frees reuse events:
// once one event exists, creating more fails, and frees still work.
func TestAsyncEventsAreCached(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	r, err := mr.NewAsync(dev, mr.AsyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p, err := r.Allocate(4096, s1)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Deallocate(p, 4096, s2); err != nil {
			t.Fatalf("cross-stream free %d: %v", i, err)
		}
		if i == 0 {
			dev.FailNext(sim.OpEventCreate, 1000, gpu.ErrOutOfMemory)
		}
	}
	dev.FailNext(sim.OpEventCreate, 0, nil)
}

// TestAsyncDestroyedAllocationStream frees on s2 memory allocated on a
// stream that was destroyed since: no event can be recorded there, so the
// resource falls back to synchronizing the device.
func TestAsyncDestroyedAllocationStream(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	r, err := mr.NewAsync(dev, mr.AsyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s1, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	s2 := resStream(t, dev)
	p, err := r.Allocate(8192, s1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.MemsetD8Async(p, 7, 8192, s1); err != nil {
		t.Fatal(err)
	}
	write := dev.LastOp(s1)
	if err := s1.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(p, 8192, s2); err != nil {
		t.Fatal(err)
	}
	q, err := r.Allocate(8192, s2)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.MemsetD8Async(q, 9, 8192, s2); err != nil {
		t.Fatal(err)
	}
	if !dev.HappensBefore(write, dev.LastOp(s2)) {
		t.Error("reuse on s2 not ordered after the destroyed stream's write")
	}
	if err := r.Deallocate(q, 8192, s2); err != nil {
		t.Fatal(err)
	}
}

// TestAsyncPendingFrees checks the pending-free accounting hook.
func TestAsyncPendingFrees(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	var pf mr.PendingFrees
	r, err := mr.NewAsync(dev, mr.AsyncOptions{Pending: &pf})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(1000, s1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.Allocate(3000, s2)
	if err != nil {
		t.Fatal(err)
	}
	if pf.Outstanding() != 4000 || pf.Pending() != 0 {
		t.Fatalf("two live: outstanding %d, pending %d", pf.Outstanding(), pf.Pending())
	}
	release := dev.Hold(s2)
	if err := r.Deallocate(p, 1000, s1); err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(q, 3000, s2); err != nil {
		t.Fatal(err)
	}
	if pf.Outstanding() != 4000 || pf.Pending() != 4000 {
		t.Fatalf("two freed: outstanding %d, pending %d", pf.Outstanding(), pf.Pending())
	}
	if err := s1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n, err := pf.Reap(false); err != nil || n != 1000 {
		t.Fatalf("reap with s2 held: %d, %v; want 1000", n, err)
	}
	release()
	if n, err := pf.Reap(true); err != nil || n != 3000 {
		t.Fatalf("reap after release: %d, %v; want 3000", n, err)
	}
	if err := pf.Check(); err != nil {
		t.Fatal(err)
	}
}

func ExampleAsync() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s1, _ := dev.NewStream()
	s2, _ := dev.NewStream()
	defer s1.Destroy()
	defer s2.Destroy()

	r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 64 << 20})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	p, _ := r.Allocate(1<<20, s1)
	dev.MemsetD8Async(p, 0, 1<<20, s1)
	// Freed on another stream: s2 first waits on an event recorded on s1.
	r.Deallocate(p, 1<<20, s2)
	s2.Synchronize()
	fmt.Println(r.Usage().Used)
	// Output: 0
}

// TestAsyncReturnWait frees on a consumer stream s2, still busy, a buffer
// allocated on the producer stream s1. With the return wait, s1's next
// work follows s2's work enqueued before the free, and s1 gets the buffer
// back at once; without it, s1 runs independently of s2 and the pool
// grows instead. Either way the free follows s1's use of the buffer.
func TestAsyncReturnWait(t *testing.T) {
	const n = 1 << 20
	for _, tc := range []struct {
		name         string
		noReturnWait bool
	}{
		{"default", false},
		{"NoReturnWait", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			s1, s2 := resStream(t, dev), resStream(t, dev)
			r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, NoReturnWait: tc.noReturnWait})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			p, err := r.Allocate(n, s1)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.MemsetD8Async(p, 1, n, s1); err != nil {
				t.Fatal(err)
			}
			produce := dev.LastOp(s1)
			release := dev.Hold(s2) // the consumer's work, still running
			defer release()
			consume := dev.LastOp(s2)
			if err := r.Deallocate(p, n, s2); err != nil {
				t.Fatal(err)
			}
			free := dev.LastOp(s2)
			q, err := r.Allocate(n, s1)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.MemsetD8Async(q, 2, n, s1); err != nil {
				t.Fatal(err)
			}
			next := dev.LastOp(s1)
			if !dev.HappensBefore(produce, free) {
				t.Error("the free on s2 is not ordered after s1's use of the buffer")
			}
			want := !tc.noReturnWait
			if got := dev.HappensBefore(consume, next); got != want {
				t.Errorf("s1's next work ordered after s2's work before the free: %v, want %v", got, want)
			}
			if got := q == p; got != want {
				t.Errorf("s1 got the freed buffer back at once: %v (%#x, then %#x), want %v", got, p, q, want)
			}
			release()
			if err := r.Deallocate(q, n, s1); err != nil {
				t.Fatal(err)
			}
		})
	}
}
