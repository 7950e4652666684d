package mr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// expired returns a context that ends 20 ms from now.
func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// TestWaitContext: a wait for a held stream or an event behind it ends
// with the context; once the stream runs it returns nil, with a context
// and without.
func TestWaitContext(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	s := newStream(t, dev)
	e, err := dev.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	release := dev.Hold(s)
	defer release()
	if err := e.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := mr.WaitStream(expired(t), s); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitStream on a held stream: %v", err)
	}
	if err := mr.WaitEvent(expired(t), e); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitEvent behind a held stream: %v", err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mr.WaitStream(cancelled, s); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitStream with a cancelled context: %v", err)
	}
	release()
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := mr.WaitStream(ctx, s); err != nil {
		t.Errorf("WaitStream after release: %v", err)
	}
	if err := mr.WaitEvent(ctx, e); err != nil {
		t.Errorf("WaitEvent after release: %v", err)
	}
	if err := mr.WaitStream(context.Background(), s); err != nil {
		t.Errorf("WaitStream without a deadline: %v", err)
	}
	if err := mr.WaitStream(ctx, nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("WaitStream(nil): %v", err)
	}
	if err := mr.WaitEvent(ctx, nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("WaitEvent(nil): %v", err)
	}
}

// TestReapContext: a reap that waits for a held stream gives up with the
// context, leaving the bytes pending and the accounting exact; the next
// reap releases them.
func TestReapContext(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	s := newStream(t, dev)
	as, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	st := mr.NewStats(as, mr.StatsOptions{})
	p, err := st.Allocate(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	release := dev.Hold(s)
	defer release()
	if err := st.Deallocate(p, 1<<20, s); err != nil {
		t.Fatal(err)
	}
	for _, reap := range []struct {
		name string
		f    func(context.Context) (uint64, error)
	}{
		{"PendingFrees", as.Pending().ReapContext},
		{"Async", as.ReapContext},
		{"through an adaptor", st.ReapContext},
		{"ReclaimContext", func(ctx context.Context) (uint64, error) { return mr.ReclaimContext(ctx, st) }},
	} {
		n, err := reap.f(expired(t))
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a held stream = %d, %v", reap.name, n, err)
		}
		if got := as.Pending().Pending(); got != 1<<20 {
			t.Errorf("%s: %d bytes pending after giving up, want 1 MiB", reap.name, got)
		}
		if err := as.Pending().Check(); err != nil {
			t.Errorf("%s: %v", reap.name, err)
		}
	}
	release()
	n, err := mr.ReclaimContext(context.Background(), st)
	if n != 1<<20 || err != nil {
		t.Fatalf("ReclaimContext after release = %d, %v", n, err)
	}
	if as.Pending().Pending() != 0 || as.Pending().Outstanding() != 0 {
		t.Errorf("pending %d, outstanding %d after the reap", as.Pending().Pending(), as.Pending().Outstanding())
	}
}

// TestRetryAllocateContext: recovery that would wait for a held stream
// stops with the context; the error is both out of memory and the
// context's, the observer is not called, and nothing is lost: once the
// stream runs, the same request succeeds.
func TestRetryAllocateContext(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 128 << 20})[0]
	s1, s2 := newStream(t, dev), newStream(t, dev)
	// No internal dependencies: the driver's pool may not make s2 wait
	// for the free itself.
	as, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, DisableReuse: mr.ReuseAllowInternalDependencies})
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	// The hold is released from the retry callback of the second
	// request, so that request is refused at first whatever the timing,
	// and recovers once the free has run.
	var release func()
	var releaseOnRetry atomic.Bool
	r := mr.NewRetry(as, mr.RetryOptions{
		Attempts: 3,
		OnOutOfMemory: func(int, gpu.Stream, int, error) bool {
			if releaseOnRetry.Load() {
				release()
			}
			return true
		},
		OnFailure: func(rep mr.OutOfMemoryReport) {
			t.Errorf("observed a request whose caller gave up: %v", rep)
		},
	})
	p, err := r.Allocate(80<<20, s1)
	if err != nil {
		t.Fatal(err)
	}
	release = dev.Hold(s1)
	defer release()
	if err := r.Deallocate(p, 80<<20, s1); err != nil {
		t.Fatal(err)
	}
	// The free waits behind the hold: s2 cannot have the memory.
	_, err = r.AllocateContext(expired(t), 80<<20, s2)
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllocateContext behind a held free: %v", err)
	}
	if c := r.Counts(); c.OutOfMemory != 1 || c.Failed != 1 || c.Recovered != 0 {
		t.Errorf("counts %v", c)
	}
	if got := as.Pending().Pending(); got != 80<<20 {
		t.Errorf("%d bytes pending, want the held free's", got)
	}
	releaseOnRetry.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := r.AllocateContext(ctx, 80<<20, s2)
	if err != nil {
		t.Fatalf("AllocateContext once the free ran: %v", err)
	}
	if c := r.Counts(); c.OutOfMemory != 2 || c.Recovered != 1 || c.Failed != 1 {
		t.Errorf("counts %v, want 2 refusals, 1 recovered, 1 failed", c)
	}
	if err := r.Deallocate(q, 80<<20, s2); err != nil {
		t.Fatal(err)
	}
}

// TestDeallocateContext: Direct's and Managed's frees, and Pinned's
// FreeAfter, give up with the context while the stream is held, and free
// nothing; after it runs they free.
func TestDeallocateContext(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	s := newStream(t, dev)
	type ctxFree interface {
		mr.Resource
		mr.UsageReporter
		DeallocateContext(context.Context, gpu.DevicePtr, int, gpu.Stream) error
	}
	for _, r := range []ctxFree{mr.NewDirect(dev), mr.NewManaged(dev)} {
		p, err := r.Allocate(4096, s)
		if err != nil {
			t.Fatal(err)
		}
		release := dev.Hold(s)
		if err := r.DeallocateContext(expired(t), p, 4096, s); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v: DeallocateContext on a held stream: %v", r, err)
		}
		if u := r.Usage(); u.Used != 4096 {
			t.Errorf("%v: a free that gave up changed the usage", r)
		}
		release()
		if err := r.DeallocateContext(context.Background(), p, 4096, s); err != nil {
			t.Errorf("%v: DeallocateContext after release: %v", r, err)
		}
		if err := r.DeallocateContext(context.Background(), p, 4096, s); !errors.Is(err, mr.ErrDoubleFree) {
			t.Errorf("%v: second free: %v", r, err)
		}
	}

	pin := mr.NewPinned(dev)
	b, err := pin.Allocate(4096)
	if err != nil {
		t.Fatal(err)
	}
	release := dev.Hold(s)
	if err := pin.FreeAfterContext(expired(t), b, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("FreeAfterContext on a held stream: %v", err)
	}
	if u := pin.Usage(); u.Used != 4096 {
		t.Errorf("a FreeAfterContext that gave up freed: %v", u)
	}
	release()
	if err := pin.FreeAfterContext(context.Background(), b, s); err != nil {
		t.Errorf("FreeAfterContext after release: %v", err)
	}
	if u := pin.Usage(); u.Used != 0 {
		t.Errorf("after the free: %v", u)
	}
}
