// The driver's stream-ordered pool, as the instrumented device sees it.
//
// A resource built on the driver's pool (mr.Async, and so a Pool over it)
// gives memory back with cuMemFreeAsync and gets it with cuMemAllocAsync;
// the driver may hand memory freed on one stream to an allocation on
// another, and when it does, the allocation is ordered after the free: by
// the event waits that the caller made (follow event dependencies), because
// the free has completed (opportunistic reuse), or by a wait it inserts
// (internal dependencies). That is the driver's contract whatever its
// policies; what it does to keep it is invisible to the caller. The
// sanitizer sees only the resource on top: a Pool chunk freed on A and
// handed by the driver to B's growth while A still runs later work looked
// like memory reused before its free was ordered.
//
// So the instrumented device models the driver's rule. It remembers the
// size of every allocation made through MallocAsync and MallocFromPoolAsync,
// and at a FreeAsync of one, the clock of the freeing stream (everything
// ordered before the free). When the driver hands out memory that overlaps
// such a freed range, the allocating stream's clock joins the free's: the
// allocation is ordered after the free, and so after whatever the free was
// ordered after, the resource's own frees of blocks of that memory
// included. If the resource gave the memory back without ordering its own
// frees first (a missing event wait in a Pool's release), the free's clock
// lacks them and the reuse is still reported. Freed ranges are bounded by
// Options.MaxFreed, oldest first out, like the sanitizer's own.
//
// Allocations made during a graph capture are graph memory, not the pool's,
// and are not modelled.

package sanitize

import (
	"github.com/streamalloc/streamalloc/gpu"
)

// driverPool is the sanitizer's model of the driver's pools; guarded by
// Sanitizer.mu.
type driverPool struct {
	live  map[gpu.DevicePtr]int // size of each live pool allocation
	freed index                 // freed ranges, each with its free's clock
	fifo  freedQueue            // the ranges in freed, oldest first
}

// driverAllocated notes that the driver handed [p, p+n) to s: s is ordered
// after the free of every freed range it overlaps.
func (z *Sanitizer) driverAllocated(p gpu.DevicePtr, n int, s gpu.Stream) {
	if p == 0 || gpu.CaptureID(s) != 0 {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	dp := &z.drv
	if dp.live == nil {
		dp.live = make(map[gpu.DevicePtr]int)
	}
	dp.live[p] = n
	over := dp.freed.overlapping(p, max(n, 1), nil)
	if len(over) == 0 {
		return
	}
	ss := z.stream(s)
	z.joinHost(ss)
	for _, r := range over {
		ss.clock.join(r.freeClock)
		dp.freed.remove(r)
		r.dead = true
		// The parts the allocation does not cover stay freed.
		end := r.base + gpu.DevicePtr(r.size)
		if r.base < p {
			z.driverFreedRange(r.base, int(p-r.base), r.freeClock)
		}
		if nend := p + gpu.DevicePtr(max(n, 1)); end > nend {
			z.driverFreedRange(nend, int(end-nend), r.freeClock)
		}
	}
}

// driverFreed notes a free of p on s that the driver accepted.
func (z *Sanitizer) driverFreed(p gpu.DevicePtr, s gpu.Stream) {
	if gpu.CaptureID(s) != 0 {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	n, ok := z.drv.live[p]
	if !ok {
		return // not the pool's (cuMemAlloc memory), or never seen
	}
	delete(z.drv.live, p)
	ss := z.stream(s)
	z.joinHost(ss)
	z.driverFreedRange(p, n, ss.clock.clone())
}

// driverFreedRange remembers [base, base+n) as freed with clock c, and
// forgets the oldest ranges beyond MaxFreed; z.mu is held.
func (z *Sanitizer) driverFreedRange(base gpu.DevicePtr, n int, c clock) {
	dp := &z.drv
	r := &region{base: base, size: n, freeClock: c}
	dp.freed.insert(r)
	dp.fifo.push(r)
	dp.fifo.evict(&dp.freed, z.maxFreed)
}

// MallocAsync allocates from the stream's current pool, with the stream
// unwrapped, and tells the sanitizer what the driver handed out.
func (d *Device) MallocAsync(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := d.Device.MallocAsync(size, unwrapStream(s))
	if err == nil {
		d.z.driverAllocated(p, size, s)
	}
	return p, err
}

// MallocFromPoolAsync allocates from pool, with the stream unwrapped, and
// tells the sanitizer what the driver handed out.
func (d *Device) MallocFromPoolAsync(size int, pool gpu.MemPool, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := d.Device.MallocFromPoolAsync(size, pool, unwrapStream(s))
	if err == nil {
		d.z.driverAllocated(p, size, s)
	}
	return p, err
}

// FreeAsync frees p in stream order, with the stream unwrapped, and tells
// the sanitizer.
func (d *Device) FreeAsync(p gpu.DevicePtr, s gpu.Stream) error {
	if err := d.Device.FreeAsync(p, unwrapStream(s)); err != nil {
		return err
	}
	d.z.driverFreed(p, s)
	return nil
}
