// Per-device event cache for block-use tracking.
//
// A buffer's tracking state holds at most one event per slot (the last
// write, one read per stream). An event leaves the cache (a
// gpu.EventCache) when a slot takes it and returns when the slot is
// overwritten or the buffer closes, so in the steady state no event is
// created per use. Handing an event back while waits on it may still be
// pending is safe: a wait captures the record that was current when the
// wait was enqueued.
//
// Invariants: one cache per device ever used with buf, living as long as
// the process, like the driver's primary contexts; it keeps at most
// maxFreeEvents events.

package buf

import (
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

const maxFreeEvents = 256

var caches sync.Map // gpu.Device -> *gpu.EventCache

func cacheFor(dev gpu.Device) *gpu.EventCache {
	if c, ok := caches.Load(dev); ok {
		return c.(*gpu.EventCache)
	}
	c, _ := caches.LoadOrStore(dev, &gpu.EventCache{Device: dev, Max: maxFreeEvents})
	return c.(*gpu.EventCache)
}
