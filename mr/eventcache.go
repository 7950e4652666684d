// eventCache: a resource's cache of events (gpu.EventCache), and order,
// which uses one to make one stream run after another without blocking the
// host.

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// eventCache is a gpu.EventCache with the ordering resources need.
type eventCache struct {
	gpu.EventCache
}

// newEventCache is the event cache of a resource on dev.
func newEventCache(dev gpu.Device) eventCache {
	return eventCache{gpu.EventCache{Device: dev}}
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
	if err := captureOrderable(waiter, signaler); err != nil {
		return err
	}
	e, err := c.Get()
	if err != nil {
		return err
	}
	if err := e.Record(signaler); err != nil {
		c.Put(e)
		if errors.Is(err, gpu.ErrDestroyed) {
			if err := synchronizeDevice(c.Device); err != nil {
				return fmt.Errorf("synchronize after destroyed stream %d: %w", signaler.ID(), err)
			}
			return nil
		}
		return fmt.Errorf("record event on stream %d: %w", signaler.ID(), err)
	}
	if err := waiter.WaitEvent(e); err != nil {
		// The event may still be pending; it is reusable anyway since
		// nothing waits on it.
		c.Put(e)
		return fmt.Errorf("stream %d wait on stream %d: %w", waiter.ID(), signaler.ID(), err)
	}
	c.Put(e)
	return nil
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
		if gpu.Capturing(c) {
			continue // querying it would invalidate its capture
		}
		if err := c.Query(); !errors.Is(err, gpu.ErrDestroyed) {
			return c, func() {}, nil
		}
	}
	if err := synchronizeDevice(dev); err != nil {
		return nil, nil, fmt.Errorf("synchronize after destroyed streams: %w", err)
	}
	if s, err = dev.NewStream(); err != nil {
		return nil, nil, fmt.Errorf("new stream: %w", err)
	}
	return s, func() { s.Destroy() }, nil
}
