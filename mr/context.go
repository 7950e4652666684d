// Waiting with a context: every call of this package that can block the
// host has a form that takes a context.Context and gives up when it ends.
//
// The driver's own waits (cuStreamSynchronize, cuEventSynchronize) cannot
// be interrupted, so a wait with a context that can end polls instead:
// it queries the stream or event (which never blocks), and between
// queries sleeps a little longer each time (from 10 µs up to 1 ms), so a
// short wait costs a few microseconds more than a synchronization and a
// long one a query per millisecond. A context that can never end (its
// Done is nil, as context.Background's is) waits with the driver's
// synchronization, exactly as the forms without a context do.
//
// Invariants: a wait that ends because its context did returns an error
// matching ctx.Err() (errors.Is) and changes nothing: no memory is freed
// or forgotten, every counter is as it was, and whatever was pending stays
// pending for the next call. The calls built on the waits keep the same
// promise (ReapContext, ReclaimContext, Retry.AllocateContext,
// Direct.DeallocateContext, Pinned.FreeAfterContext).

package mr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	firstPoll = 10 * time.Microsecond
	maxPoll   = time.Millisecond
)

// poll calls query until it returns anything but gpu.ErrNotReady, or ctx
// ends (then ctx.Err()).
func poll(ctx context.Context, query func() error) error {
	d := firstPoll
	var t *time.Timer
	for {
		err := query()
		if !errors.Is(err, gpu.ErrNotReady) {
			if t != nil {
				t.Stop()
			}
			return err
		}
		if t == nil {
			t = time.NewTimer(d)
		} else {
			t.Reset(d)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		d = min(2*d, maxPoll)
	}
}

// WaitStream blocks until the work enqueued on s so far has completed, or
// ctx ends. A context that can end makes it poll (see the file comment).
// It returns an error matching ctx.Err() if ctx ended first, and the
// stream's error otherwise (a sticky fault, a destroyed stream).
func WaitStream(ctx context.Context, s gpu.Stream) error {
	if s == nil {
		return fmt.Errorf("mr: wait for stream: nil stream: %w", gpu.ErrInvalidHandle)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mr: wait for stream %d: %w", s.ID(), err)
	}
	var err error
	if ctx.Done() == nil {
		err = s.Synchronize()
	} else {
		err = poll(ctx, s.Query)
	}
	if err != nil {
		return fmt.Errorf("mr: wait for stream %d: %w", s.ID(), err)
	}
	return nil
}

// WaitEvent blocks until e has completed, or ctx ends, as WaitStream.
func WaitEvent(ctx context.Context, e gpu.Event) error {
	if e == nil {
		return fmt.Errorf("mr: wait for event: nil event: %w", gpu.ErrInvalidHandle)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mr: wait for event: %w", err)
	}
	var err error
	if ctx.Done() == nil {
		err = e.Synchronize()
	} else {
		err = poll(ctx, e.Query)
	}
	if err != nil {
		return fmt.Errorf("mr: wait for event: %w", err)
	}
	return nil
}

// ContextReaper is implemented by Reapers whose waiting reap can be
// bounded by a context: ReapContext is Reap(true) that stops waiting when
// ctx ends, leaving everything it did not release pending, and returns the
// bytes it released with an error matching ctx.Err().
type ContextReaper interface {
	Reaper
	ReapContext(ctx context.Context) (reaped uint64, err error)
}

// reapContext reaps r waiting under ctx: through ReapContext where r has
// it; a Reaper without it is synchronized only if ctx can never end, and
// otherwise only queried (Reap(false)), since its wait could not be
// interrupted.
func reapContext(ctx context.Context, r Reaper) (uint64, error) {
	if cr, ok := r.(ContextReaper); ok {
		return cr.ReapContext(ctx)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return r.Reap(ctx.Done() == nil)
}

// ReapContext reaps the upstream's pending frees, waiting under ctx.
func (w passThrough) ReapContext(ctx context.Context) (uint64, error) {
	if r, ok := w.up.(Reaper); ok {
		return reapContext(ctx, r)
	}
	return 0, ctx.Err()
}

// ReapContext is Reap(true), stopping when ctx ends: what it has not
// released stays pending, and the error matches ctx.Err().
func (r *Async) ReapContext(ctx context.Context) (uint64, error) { return r.pending.ReapContext(ctx) }

// ReclaimContext is Reclaim(r, true) with its waits bounded by ctx: when
// ctx ends it stops (the reaps not done stay pending, nothing is released
// after) and returns what it reaped with an error matching ctx.Err(),
// joined with any other error met. A Reaper of the chain that does not
// implement ContextReaper is only queried unless ctx can never end.
func ReclaimContext(ctx context.Context, r Resource) (reaped uint64, err error) {
	var errs []error
	chain := Chain(r)
	for _, res := range chain {
		if _, ok := res.(forwarder); ok {
			continue
		}
		if rp, ok := res.(Reaper); ok {
			n, err := reapContext(ctx, rp)
			reaped += n
			if err != nil {
				errs = append(errs, fmt.Errorf("reap: %w", err))
			}
			if ctx.Err() != nil {
				return reaped, errors.Join(append(errs, ctx.Err())...)
			}
		}
	}
	for _, res := range chain {
		if _, ok := res.(forwarder); ok {
			continue
		}
		if rl, ok := res.(Releaser); ok {
			if err := rl.Release(); err != nil {
				errs = append(errs, fmt.Errorf("release: %w", err))
			}
		}
	}
	return reaped, errors.Join(errs...)
}

// DeallocateContext is Deallocate, with its wait for the freeing stream
// and the allocation's stream bounded by ctx: if ctx ends first, p is not
// freed and stays allocated (free it again later), and the error matches
// ctx.Err().
func (d *Direct) DeallocateContext(ctx context.Context, p gpu.DevicePtr, size int, s gpu.Stream) error {
	if err := d.core.drain(ctx, p, s); err != nil {
		return err
	}
	return d.core.deallocate(p, size, s)
}

// DeallocateContext is Deallocate, with its wait bounded by ctx, as
// Direct.DeallocateContext.
func (m *Managed) DeallocateContext(ctx context.Context, p gpu.DevicePtr, size int, s gpu.Stream) error {
	if err := m.core.drain(ctx, p, s); err != nil {
		return err
	}
	return m.core.deallocate(p, size, s)
}

// drain waits under ctx for the work enqueued so far on s and on p's
// allocation stream, so that the synchronizations of the free that
// follows find them complete. Bad arguments are left to deallocate, which
// refuses them with its own errors; a stream that cannot be waited on
// (destroyed) is left to it too.
func (c *syncCore) drain(ctx context.Context, p gpu.DevicePtr, s gpu.Stream) error {
	if s == nil || p == 0 {
		return nil
	}
	streams := []gpu.Stream{s}
	if r, ok := c.live.lookup(p); ok && r.v != nil && r.v.ID() != s.ID() {
		streams = append(streams, r.v)
	}
	for _, st := range streams {
		if gpu.Capturing(st) {
			return nil // deallocate refuses it
		}
		if err := WaitStream(ctx, st); err != nil && ctx.Err() != nil {
			return fmt.Errorf("%s: deallocate %#x: %w", c.name, uint64(p), err)
		}
	}
	return nil
}

// FreeAfterContext is FreeAfter with its wait for s bounded by ctx: if ctx
// ends first, b is not freed (free it later) and the error matches
// ctx.Err().
func (p *Pinned) FreeAfterContext(ctx context.Context, b []byte, s gpu.Stream) error {
	if err := checkStream("pinned", "free", p.dev, s); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	if err := WaitStream(ctx, s); err != nil {
		return fmt.Errorf("pinned: free: %w", err)
	}
	return p.Free(b)
}

// ReleaseContext gives back every cached block, waiting for the copies
// before their frees, which Release does not, with the wait bounded by
// ctx. It waits,
// without holding the pool's lock, for the frees of the blocks cached when
// it is called; if ctx ends first it releases nothing and returns an error
// matching ctx.Err(). Then it gives back every cached block whose free has
// completed (a block freed after the call began may stay cached) and
// returns the bytes released, with the errors of frees that failed (a
// stream's sticky fault), whose blocks stay cached.
func (p *HostPool) ReleaseContext(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("host pool: release: %w", err)
	}
	p.mu.Lock()
	var marks []hostMark
	for _, list := range p.free {
		for _, b := range list {
			marks = append(marks, b.done...)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, m := range marks {
		if err := WaitEvent(ctx, m.e); err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("host pool: release: %w", err)
			}
			if errors.Is(err, gpu.ErrDestroyed) {
				continue // the block was reused meanwhile and its mark given up
			}
			errs = append(errs, fmt.Errorf("wait for stream %d: %w", m.s.ID(), err))
		}
	}
	n, err := p.release()
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("host pool: release: %w", errors.Join(errs...))
	}
	return n, nil
}
