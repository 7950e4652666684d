// EventCache: events of one device kept for reuse.
//
// Ordering one stream after another takes an event: record it on the
// first, make the second wait on it. Creating an event is a driver call
// that can cost as much as the work it orders, so code that orders streams
// often (resources, buffers) takes events from a cache and hands them back.
// Handing an event back right after a wait was enqueued on it is safe: a
// wait captures the work the event stood for when the wait was enqueued,
// and re-recording the event later moves it without changing waits already
// enqueued (CUDA's semantics, which the simulator models).
//
// Invariants: every event in the cache belongs to Device, is not destroyed
// and is used by nobody; at most Max are kept, extra ones are destroyed on
// Put. After Close the cache keeps nothing: Get creates an event and Put
// destroys it, so its owner's late operations keep working.

package gpu

import (
	"errors"
	"fmt"
	"sync"
)

// DefaultEventCacheMax is the number of events an EventCache keeps when
// its Max is 0.
const DefaultEventCacheMax = 64

// EventCache keeps non-timing events of Device for reuse. Its zero value
// with Device set is ready to use. It is safe for concurrent use.
type EventCache struct {
	Device Device
	Max    int // events kept at most; 0 means DefaultEventCacheMax

	mu     sync.Mutex
	free   []Event
	closed bool
}

// Get returns a cached event, or a new one if none is cached.
func (c *EventCache) Get() (Event, error) {
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return e, nil
	}
	c.mu.Unlock()
	e, err := c.Device.NewEvent(false)
	if err != nil {
		return nil, fmt.Errorf("new event: %w", err)
	}
	return e, nil
}

// Put hands e back for reuse; nil is ignored. An event beyond Max, or put
// after Close, is destroyed.
func (c *EventCache) Put(e Event) {
	if e == nil {
		return
	}
	limit := c.Max
	if limit <= 0 {
		limit = DefaultEventCacheMax
	}
	c.mu.Lock()
	if !c.closed && len(c.free) < limit {
		c.free = append(c.free, e)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	e.Destroy()
}

// Close destroys the cached events; events in use are destroyed when they
// are put back.
func (c *EventCache) Close() error {
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
