// The current resource of each device, like RMM's per-device resource:
// code that needs device memory and was given no resource asks
// Current(dev).
//
// Until SetCurrent is called for a device, Current returns its default
// resource, created on first use and then always the same: an Async
// resource on the device's default pool if the device supports memory
// pools, else a Direct one. Async is the default because it is
// stream-ordered and never blocks the host, and on the default pool it
// owns nothing that would need closing; Direct, which synchronizes the
// stream on every free, is only the fallback for devices without pools.
//
// Invariants: each device has one slot, created once and never removed;
// a slot's cur and def only change by atomic stores, so Current never
// takes a lock and concurrent SetCurrent calls are linearizable (each
// returns what the one before it installed).

package mr

import (
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

type currentSlot struct {
	cur atomic.Pointer[Resource] // set by SetCurrent, or nil
	def atomic.Pointer[Resource] // the default, once made
}

var currents sync.Map // gpu.Device -> *currentSlot

func slotOf(dev gpu.Device) *currentSlot {
	if v, ok := currents.Load(dev); ok {
		return v.(*currentSlot)
	}
	v, _ := currents.LoadOrStore(dev, new(currentSlot))
	return v.(*currentSlot)
}

// Current returns dev's current resource: the last one SetCurrent
// installed, or the device's default resource (see the package's
// current.go: Async on the default pool where pools are supported, else
// Direct). A nil device has none: Current(nil) is nil. Safe for concurrent
// use.
func Current(dev gpu.Device) Resource {
	if dev == nil {
		return nil
	}
	sl := slotOf(dev)
	if r := sl.cur.Load(); r != nil {
		return *r
	}
	return sl.defaultResource(dev)
}

// SetCurrent makes r dev's current resource and returns the one it
// replaces (the default resource if none was set). A nil r restores the
// default. r must allocate on dev. With a nil device it does nothing and
// returns nil. Safe for concurrent use.
func SetCurrent(dev gpu.Device, r Resource) (previous Resource) {
	if dev == nil {
		return nil
	}
	sl := slotOf(dev)
	var np *Resource
	if r != nil {
		np = &r
	}
	if old := sl.cur.Swap(np); old != nil {
		return *old
	}
	return sl.defaultResource(dev)
}

func (sl *currentSlot) defaultResource(dev gpu.Device) Resource {
	if r := sl.def.Load(); r != nil {
		return *r
	}
	var r Resource
	if dev.Properties().MemoryPoolsSupported {
		if a, err := NewAsync(dev, AsyncOptions{}); err == nil {
			r = a
		}
	}
	if r == nil {
		r = NewDirect(dev)
	}
	// Another goroutine may have made one first; theirs wins, and ours
	// (on the default pool, owning nothing) is simply dropped.
	if sl.def.CompareAndSwap(nil, &r) {
		return r
	}
	return *sl.def.Load()
}
