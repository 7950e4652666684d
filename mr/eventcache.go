// eventCache: a per-resource cache of non-timing events, used to order one
// stream after another (record on the first, wait on the second).
//
// Creating an event is a driver call that can cost as much as the
// allocation it would order, so resources never create one per operation:
// they take one from the cache, record it, make the other stream wait on
// it, and put it back at once. Putting it back right after WaitEvent is
// safe because a wait captures the work the event stood for when the wait
// was enqueued; re-recording the event later moves it without changing
// waits already enqueued (CUDA's semantics, which the simulator models).
//
// Invariants: every event in free belongs to dev, is not destroyed, and is
// used by nobody; at most maxCachedEvents are kept, extra ones are
// destroyed on put. After close the cache keeps nothing: get creates an
// event and put destroys it, so a resource's frees keep working after its
// Close.

package mr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

const maxCachedEvents = 64

type eventCache struct {
	dev    gpu.Device
	mu     sync.Mutex
	free   []gpu.Event
	closed bool
}

func (c *eventCache) get() (gpu.Event, error) {
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	e, err := c.dev.NewEvent(false)
	if err != nil {
		return nil, fmt.Errorf("new event: %w", err)
	}
	return e, nil
}

func (c *eventCache) put(e gpu.Event) {
	c.mu.Lock()
	if !c.closed && len(c.free) < maxCachedEvents {
		c.free = append(c.free, e)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	e.Destroy()
}

// order makes work enqueued on waiter from now on run after all work
// enqueued on signaler so far, without blocking the host. It does nothing
// if they are the same stream. If signaler was destroyed (its remaining
// work still runs, but no event can be recorded on it any more), it falls
// back to synchronizing the device, the only way left to be ordered after
// that work.
func (c *eventCache) order(waiter, signaler gpu.Stream) error {
	if waiter.ID() == signaler.ID() {
		return nil
	}
	e, err := c.get()
	if err != nil {
		return err
	}
	if err := e.Record(signaler); err != nil {
		c.put(e)
		if errors.Is(err, gpu.ErrDestroyed) {
			if err := c.dev.Synchronize(); err != nil {
				return fmt.Errorf("synchronize after destroyed stream %d: %w", signaler.ID(), err)
			}
			return nil
		}
		return fmt.Errorf("record event on stream %d: %w", signaler.ID(), err)
	}
	if err := waiter.WaitEvent(e); err != nil {
		// The event may still be pending; it is reusable anyway since
		// nothing waits on it.
		c.put(e)
		return fmt.Errorf("stream %d wait on stream %d: %w", waiter.ID(), signaler.ID(), err)
	}
	c.put(e)
	return nil
}

// close destroys the cached events; events in use are destroyed when put.
func (c *eventCache) close() error {
	c.mu.Lock()
	free := c.free
	c.free, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, e := range free {
		if err := e.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// usableStream returns the first of candidates that can still take work
// (Query answers ErrDestroyed for a destroyed stream; any other answer
// means it can), for work that must be enqueued somewhere, like freeing
// memory upstream. If none can, it synchronizes the device, so the
// destroyed streams' remaining work is done, and returns a new stream;
// done destroys it (after its work). Resources call it on rare paths
// (Release), never per operation.
func usableStream(dev gpu.Device, candidates []gpu.Stream) (s gpu.Stream, done func(), err error) {
	for _, c := range candidates {
		if err := c.Query(); !errors.Is(err, gpu.ErrDestroyed) {
			return c, func() {}, nil
		}
	}
	if err := dev.Synchronize(); err != nil {
		return nil, nil, fmt.Errorf("synchronize after destroyed streams: %w", err)
	}
	if s, err = dev.NewStream(); err != nil {
		return nil, nil, fmt.Errorf("new stream: %w", err)
	}
	return s, func() { s.Destroy() }, nil
}
