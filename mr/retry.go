// Retry: an adaptor that recovers from out-of-memory and tries again.
//
// Memory that a program has freed may still be unavailable: its free is
// enqueued and has not run (pending frees), or a pool below keeps it cached
// for reuse. When the upstream refuses a request with ErrOutOfMemory,
// Retry, for a bounded number of attempts:
//
//  1. reaps the pending frees of every Reaper in the chain below it (and of
//     the extra ones in the options): the first attempt only queries the
//     streams and never blocks the host; later attempts synchronize them,
//     because by then the program cannot go on without that memory;
//  2. releases the cached memory of every Releaser in the chain below it
//     (and the extra ones), after reaping, so that memory whose free has
//     just been seen complete is released too (steps 1 and 2 are Reclaim);
//  3. calls the user's callback, if any, which may free memory of its own
//     (drop a cache, wait for a batch to finish) or say to stop;
//  4. asks the upstream again.
//
// When the attempts are used up, or the callback says stop, the last
// out-of-memory error is returned (with any error that recovery met,
// joined), so the caller still sees an *OutOfMemoryError. Errors other
// than out-of-memory are returned at once.
//
// Invariants: Retry hands out only what its upstream granted and counts
// nothing twice: a retried request that succeeds is one allocation. Like
// every adaptor it refuses bad frees: over an upstream that checks owners
// (owner.go) that upstream refuses them, exactly and changing nothing, and
// Retry keeps no table; over any other, a pointer table refuses them before
// they reach the upstream.

package mr

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// RetryOptions configure a Retry adaptor.
type RetryOptions struct {
	// Attempts is how many times a request refused for lack of memory is
	// retried after recovery; 0 means 3, and a negative value means no
	// retry (the adaptor only reports).
	Attempts int
	// OnOutOfMemory, if set, is called before each retry with the request,
	// the attempt (1 for the first retry) and the error that refused it.
	// It may free memory. Returning false stops retrying.
	OnOutOfMemory func(size int, s gpu.Stream, attempt int, err error) bool
	// OnFailure, if set, is called once for each request that is refused
	// for lack of memory after every retry (or at once, with no retry
	// left), before Allocate returns the error: the out-of-memory
	// observer. The report carries the statistics of the chain below the
	// adaptor, read after the last attempt, and its summary. It runs on
	// the allocating goroutine with no lock of the adaptor held.
	OnFailure func(OutOfMemoryReport)
	// Reapers and Releasers are reaped and released on out-of-memory in
	// addition to the resources in the chain below the adaptor (other
	// resources that hold memory of the same device).
	Reapers   []Reaper
	Releasers []Releaser
}

// RetryCounts says how often a Retry adaptor recovered.
type RetryCounts struct {
	// OutOfMemory counts requests the upstream refused at first.
	OutOfMemory uint64
	// Recovered counts those a retry then satisfied; Failed those it did
	// not.
	Recovered, Failed uint64
	// Retries counts retries over all requests.
	Retries uint64
	// Reaped is the bytes of pending frees that recovery released.
	Reaped uint64
}

// Retry recovers from out-of-memory by reaping, releasing and retrying. It
// is safe for concurrent use.
type Retry struct {
	passThrough
	dev      gpu.Device
	opts     RetryOptions
	attempts int
	owned
	live ptrTable[gpu.DevicePtr, struct{}] // unused if trusted

	oom, recovered, failed, retries, reaped atomic.Uint64
}

// NewRetry returns a Retry adaptor over upstream.
func NewRetry(upstream Resource, opts RetryOptions) *Retry {
	n := opts.Attempts
	switch {
	case n == 0:
		n = 3
	case n < 0:
		n = 0
	}
	return &Retry{passThrough: passThrough{upstream}, dev: upstream.Device(), opts: opts, attempts: n,
		owned: ownedOver(upstream)}
}

// Allocate allocates from the upstream, recovering and retrying on
// out-of-memory as the file comment describes.
func (r *Retry) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return r.allocate(nil, size, s, r.owner)
}

// AllocateOwned is Allocate for owner o (owner.go).
func (r *Retry) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	return r.allocate(nil, size, s, o)
}

// AllocateContext is Allocate with the waits of its recovery (the
// synchronizing reaps of the second and later attempts) bounded by ctx:
// when ctx ends, recovery stops, nothing more is retried, and the error
// matches both ErrOutOfMemory and ctx.Err(). Such a request is counted as
// failed but not observed (OnFailure): the caller gave up, the memory did
// not run out for good.
func (r *Retry) AllocateContext(ctx context.Context, size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return r.allocate(ctx, size, s, r.owner)
}

// allocate is Allocate, with recovery bounded by ctx if it is not nil.
func (r *Retry) allocate(ctx context.Context, size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	// An upstream that checks owners checks the arguments too, and
	// answers bad ones with the same errors, before anything changes.
	if !r.trusted() {
		if zero, err := checkAlloc("retry", r.dev, size, s); zero || err != nil {
			return 0, err
		}
	}
	p, err := r.upAllocate(size, s, o)
	if err != nil && errors.Is(err, ErrOutOfMemory) {
		r.oom.Add(1)
		var retries int
		p, retries, err = r.recover(ctx, size, s, o, err)
		if err != nil {
			err = fmt.Errorf("retry: %w", err)
			if ctx == nil || ctx.Err() == nil {
				r.observe(size, s, retries, err)
			}
			return 0, err
		}
	}
	if err != nil {
		return 0, fmt.Errorf("retry: %w", err)
	}
	if !r.trusted() {
		r.live.insert(p, size, struct{}{}, nil)
	}
	return p, nil
}

// upAllocate asks the upstream, for owner o if it checks owners.
func (r *Retry) upAllocate(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if r.trusted() {
		return r.oup.AllocateOwned(size, s, o)
	}
	return r.up.Allocate(size, s)
}

// recover reclaims and retries as the file comment says, and returns the
// retries it made.
func (r *Retry) recover(ctx context.Context, size int, s gpu.Stream, o Owner, err error) (p gpu.DevicePtr, retries int, _ error) {
	var recErrs []error
	for attempt := 1; attempt <= r.attempts; attempt++ {
		if ctx != nil && ctx.Err() != nil {
			recErrs = append(recErrs, ctx.Err())
			break
		}
		var rerr error
		if gpu.Capturing(s) {
			// The request's stream captures: what reclaim does on other
			// streams must not be forbidden by a global-mode capture
			// (capture.go), and it leaves capturing streams alone.
			gpu.RelaxCapture(r.dev, func() error { rerr = r.reclaim(ctx, attempt > 1); return nil })
		} else {
			rerr = r.reclaim(ctx, attempt > 1)
		}
		if rerr != nil {
			recErrs = append(recErrs, rerr)
		}
		if ctx != nil && ctx.Err() != nil {
			break
		}
		if r.opts.OnOutOfMemory != nil && !r.opts.OnOutOfMemory(size, s, attempt, err) {
			break
		}
		r.retries.Add(1)
		retries++
		p, err = r.upAllocate(size, s, o)
		if err == nil {
			r.recovered.Add(1)
			return p, retries, nil
		}
		if !errors.Is(err, ErrOutOfMemory) {
			break
		}
	}
	r.failed.Add(1)
	if len(recErrs) > 0 {
		return 0, retries, errors.Join(append([]error{err}, recErrs...)...)
	}
	return 0, retries, err
}

// reclaim reaps pending frees and releases cached memory below the
// adaptor (Reclaim; ReclaimContext when it waits under a context), then
// does the same for the extra Reapers and Releasers, and returns what
// went wrong.
func (r *Retry) reclaim(ctx context.Context, wait bool) error {
	var n uint64
	var err error
	if wait && ctx != nil {
		n, err = ReclaimContext(ctx, r.up)
	} else {
		n, err = Reclaim(r.up, wait)
	}
	r.reaped.Add(n)
	errs := []error{err}
	for _, rp := range r.opts.Reapers {
		var n uint64
		var err error
		if wait && ctx != nil {
			n, err = reapContext(ctx, rp)
		} else {
			n, err = rp.Reap(wait)
		}
		r.reaped.Add(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("reap: %w", err))
		}
	}
	for _, rl := range r.opts.Releasers {
		if err := rl.Release(); err != nil {
			errs = append(errs, fmt.Errorf("release: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("retry: reclaim: %w", err)
	}
	return nil
}

// Deallocate frees p through the upstream. Bad frees are refused with
// typed errors before they reach the upstream.
func (r *Retry) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	return r.deallocate(p, size, s, r.owner)
}

// DeallocateOwned is Deallocate for owner o (owner.go).
func (r *Retry) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	return r.deallocate(p, size, s, o)
}

func (r *Retry) deallocate(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if r.trusted() {
		if err := r.oup.DeallocateOwned(p, size, s, o); err != nil {
			return fmt.Errorf("retry: deallocate: %w", err)
		}
		return nil
	}
	if null, err := checkFree("retry", r.dev, p, size, s); null || err != nil {
		return err
	}
	if _, err := r.live.take(p, size, func(struct{}) error { return r.up.Deallocate(p, size, s) }); err != nil {
		return fmt.Errorf("retry: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (r *Retry) Device() gpu.Device { return r.dev }

// Counts returns how often the adaptor recovered.
func (r *Retry) Counts() RetryCounts {
	return RetryCounts{OutOfMemory: r.oom.Load(), Recovered: r.recovered.Load(), Failed: r.failed.Load(),
		Retries: r.retries.Load(), Reaped: r.reaped.Load()}
}
