// Per-device event cache for block-use tracking.
//
// A buffer's tracking state holds at most one event per slot (the last
// write, one read per stream). An event leaves the cache when a slot takes
// it and returns when the slot is overwritten or the buffer closes, so in
// the steady state no event is created per use. Handing an event back while
// waits on it may still be pending is safe: a wait captures the record that
// was current when the wait was enqueued, and re-recording moves the event
// without touching waits already enqueued.
//
// Invariants: every event in free belongs to dev, is not destroyed and is
// owned by no slot; at most maxFreeEvents are kept, extra ones are
// destroyed. Caches live as long as the process (one per device ever used
// with buf), like the driver's primary contexts.

package buf

import (
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

const maxFreeEvents = 256

type eventCache struct {
	dev  gpu.Device
	mu   sync.Mutex
	free []gpu.Event
}

var caches sync.Map // gpu.Device -> *eventCache

func cacheFor(dev gpu.Device) *eventCache {
	if c, ok := caches.Load(dev); ok {
		return c.(*eventCache)
	}
	c, _ := caches.LoadOrStore(dev, &eventCache{dev: dev})
	return c.(*eventCache)
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
	if e == nil {
		return
	}
	c.mu.Lock()
	if len(c.free) < maxFreeEvents {
		c.free = append(c.free, e)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	e.Destroy()
}
