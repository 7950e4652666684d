// eventCache: a resource's cache of events (gpu.EventCache), and
// orderAfter, which makes one stream run after another with an event,
// without blocking the host: how memory changes home between streams in
// every resource of this package (streamtable.go).

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
	_, err = orderAfter(c.Device, e, waiter, signaler)
	c.Put(e)
	return err
}

// orderAfter makes work enqueued on waiter from now on run after all work
// enqueued on signaler so far, by recording e, which the caller owns, on
// signaler and making waiter wait on it. e is reusable as soon as
// orderAfter returns, whatever it returns: a wait captures the event as it
// was when enqueued, and a failed record or wait leaves nothing waiting on
// it. If signaler was destroyed, it synchronizes dev instead, the only way
// left to be ordered after that stream's remaining work; waited reports
// whether waiter waited on e.
func orderAfter(dev gpu.Device, e gpu.Event, waiter, signaler gpu.Stream) (waited bool, err error) {
	if err := e.Record(signaler); err != nil {
		if errors.Is(err, gpu.ErrDestroyed) {
			if err := synchronizeDevice(dev); err != nil {
				return false, fmt.Errorf("synchronize after destroyed stream %d: %w", signaler.ID(), err)
			}
			return false, nil
		}
		return false, fmt.Errorf("record event on stream %d: %w", signaler.ID(), err)
	}
	if err := waiter.WaitEvent(e); err != nil {
		return false, fmt.Errorf("stream %d wait on stream %d: %w", waiter.ID(), signaler.ID(), err)
	}
	return true, nil
}

// usableStream returns the first of candidates that can still take work
// (streamDestroyed), for work that must be enqueued somewhere, like freeing
// memory upstream. If none can, it synchronizes the device, so the
// destroyed streams' remaining work is done, and returns a new stream;
// done destroys it (after its work). Resources call it on rare paths
// (Release), never per operation.
func usableStream(dev gpu.Device, candidates []gpu.Stream) (s gpu.Stream, done func(), err error) {
	for _, c := range candidates {
		if gpu.Capturing(c) {
			continue // querying it would invalidate its capture
		}
		if !streamDestroyed(c) {
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

// streamDestroyed reports whether s was destroyed: its capture status (or,
// on a backend without capture, its Query) answers ErrDestroyed; any other
// answer means it can take work. The capture status is asked first because
// it observes nothing: a Query that finds the stream idle orders the host
// after its work, which on the simulator joins the stream's clock into the
// host's, and a Release that frees memory on each of thousands of streams
// would grow the host's clock once per stream (each stream then holding a
// copy of it as long as the number of streams).
func streamDestroyed(s gpu.Stream) bool {
	if cs, ok := s.(gpu.CaptureStream); ok {
		_, err := cs.CaptureStatus()
		return errors.Is(err, gpu.ErrDestroyed)
	}
	return errors.Is(s.Query(), gpu.ErrDestroyed)
}
