// Host-located pools: the driver's stream-ordered allocator over
// page-locked host memory (cuMemPoolCreate at the host), as the model
// keeps it.
//
// A host pool holds blocks of Go memory charged, like MallocHost's,
// against Config.HostCapacity. A request is rounded up to a whole page
// (hostPoolPage) and served by a free block of exactly that size if one
// is ready for the stream, else by a new block. A free enqueues a free
// operation on its stream; the block is ready at once for the next request
// on that stream (stream order covers it), and for a request on another
// stream once the free has completed, which the new owner acquires (the
// race detector then orders it after the work before the free). The model
// never inserts a wait between streams, and releases idle blocks only at
// TrimTo and Destroy (the driver also releases above the release threshold
// at synchronizations; the threshold is kept and reported, not applied).
//
// Invariants, under Device.mu: every block is live (in live, by first
// byte) or free (in free); reserved is the sum of the block sizes, used
// the sum of the live requests' sizes; d.pinned includes reserved; a
// destroyed pool has no free blocks and leaves d.hostPools with its last
// live block.

package sim

import (
	"fmt"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// hostPoolPage is the granularity of a host pool's blocks.
const hostPoolPage = 4 << 10

type hostMemPool struct {
	dev       *Device
	destroyed bool
	threshold uint64
	free      []hostPoolBlock
	live      map[*byte]hostPoolLive

	poolMarks
}

type hostPoolBlock struct {
	mem  []byte // the whole block
	done *op    // the free; nil if never allocated
}

type hostPoolLive struct {
	mem []byte
	n   int
}

var (
	_ gpu.MemPool      = (*hostMemPool)(nil)
	_ gpu.HostMemPools = (*Device)(nil)
)

func (p *hostMemPool) Device() gpu.Device { return p.dev }

// NewHostMemPool creates a pool of page-locked host memory at loc, the
// host or NUMA node 0.
func (d *Device) NewHostMemPool(loc gpu.Location) (gpu.MemPool, error) {
	const call = "cuMemPoolCreate"
	if loc.Kind != gpu.LocationHost && loc.Kind != gpu.LocationHostNUMA {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "%v is not on the host", loc)
	}
	if _, err := d.checkLocation(call, loc); err != nil {
		return nil, err
	}
	if err := d.inject(OpMemPoolCreate); err != nil {
		return nil, err
	}
	p := &hostMemPool{dev: d, live: make(map[*byte]hostPoolLive)}
	d.mu.Lock()
	d.hostPools = append(d.hostPools, p)
	d.mu.Unlock()
	return p, nil
}

func (d *Device) hostPool(call string, gp gpu.MemPool) (*hostMemPool, error) {
	p, ok := gp.(*hostMemPool)
	switch {
	case gp == nil || (ok && p == nil):
		return nil, wrap(call, fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	case !ok:
		return nil, driverErrf(call, gpu.ErrInvalidValue, "pool %T is not located on the host", gp)
	case p.dev != d:
		return nil, wrap(call, fmt.Errorf("pool of %v used on %v: %w", p.dev, d, gpu.ErrWrongDevice))
	}
	return p, nil
}

// MallocHostFromPoolAsync is cuMemAllocFromPoolAsync from a host-located
// pool.
func (d *Device) MallocHostFromPoolAsync(n int, gp gpu.MemPool, gs gpu.Stream) ([]byte, error) {
	const call = "cuMemAllocFromPoolAsync"
	s, err := d.stream(call, gs)
	if err != nil {
		return nil, err
	}
	p, err := d.hostPool(call, gp)
	if err != nil {
		return nil, err
	}
	if err := d.inject(OpMallocFromPoolAsync); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "size %d", n)
	}
	if s.cs.capt.Load() != nil {
		return nil, driverErrf(call, gpu.ErrStreamCaptureUnsupported, "host-pool allocation on a capturing stream")
	}
	size := roundUp(uint64(n), hostPoolPage)
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.destroyed {
		return nil, wrap(call, gpu.ErrDestroyed)
	}
	var mem []byte
	for i, b := range p.free {
		if uint64(len(b.mem)) != size {
			continue
		}
		if b.done != nil && b.done.s != s {
			if b.done.s.doneSeq() < b.done.seq {
				continue
			}
			raceAcquire(unsafe.Pointer(b.done))
		}
		mem = b.mem
		p.free = append(p.free[:i], p.free[i+1:]...)
		break
	}
	if mem == nil {
		if size > d.b.cfg.HostCapacity-d.pinned {
			return nil, driverErrf(call, gpu.ErrOutOfMemory, "%d bytes of page-locked memory requested, %d free", size, d.b.cfg.HostCapacity-d.pinned)
		}
		mem = make([]byte, size)
		d.pinned += size
		p.reserved += size
		p.reservedHigh = max(p.reservedHigh, p.reserved)
	}
	p.live[unsafe.SliceData(mem)] = hostPoolLive{mem: mem, n: n}
	p.used += uint64(n)
	p.usedHigh = max(p.usedHigh, p.used)
	return mem[:n:n], nil
}

// FreeHostAsync is cuMemFreeAsync of memory from MallocHostFromPoolAsync:
// the slice handed out, else gpu.ErrInvalidValue.
func (d *Device) FreeHostAsync(b []byte, gs gpu.Stream) error {
	const call = "cuMemFreeAsync"
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if err := d.inject(OpFreeAsync); err != nil {
		return err
	}
	if len(b) == 0 {
		return driverErrf(call, gpu.ErrInvalidValue, "empty slice")
	}
	if s.cs.capt.Load() != nil {
		return driverErrf(call, gpu.ErrStreamCaptureUnsupported, "host-pool free on a capturing stream")
	}
	key := unsafe.SliceData(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.hostPools {
		l, ok := p.live[key]
		if !ok {
			continue
		}
		if l.n != len(b) {
			return driverErrf(call, gpu.ErrInvalidValue, "%p: %d bytes, allocated %d", key, len(b), l.n)
		}
		o := &op{kind: opFree, name: call}
		s.mu.Lock()
		if s.destroyed {
			s.mu.Unlock()
			return wrap(call, gpu.ErrDestroyed)
		}
		s.enqueueLocked(o)
		s.mu.Unlock()
		delete(p.live, key)
		p.used -= uint64(l.n)
		if p.destroyed {
			p.releaseBlockLocked(l.mem)
			d.dropHostPoolLocked(p)
		} else {
			p.free = append(p.free, hostPoolBlock{mem: l.mem, done: o})
		}
		return nil
	}
	return driverErrf(call, gpu.ErrInvalidValue, "%p is not an allocation of a host-located pool of device %d", key, d.ordinal)
}

func (p *hostMemPool) releaseBlockLocked(mem []byte) {
	p.reserved -= uint64(len(mem))
	p.dev.pinned -= uint64(len(mem))
}

// trimLocked releases free blocks until at most keep bytes stay reserved.
func (p *hostMemPool) trimLocked(keep uint64) {
	kept := p.free[:0]
	for _, b := range p.free {
		if p.reserved > keep {
			p.releaseBlockLocked(b.mem)
			continue
		}
		kept = append(kept, b)
	}
	clear(p.free[len(kept):])
	p.free = kept
}

func (p *hostMemPool) enter(call string, o Op) error {
	if p == nil {
		return wrap(call, fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	}
	p.dev.mu.Lock()
	if p.destroyed {
		p.dev.mu.Unlock()
		return wrap(call, fmt.Errorf("pool: %w", gpu.ErrDestroyed))
	}
	if err := p.dev.inject(o); err != nil {
		p.dev.mu.Unlock()
		return err
	}
	return nil
}

// Attribute reads a pool attribute; the reuse policies read 1.
func (p *hostMemPool) Attribute(a gpu.PoolAttr) (uint64, error) {
	const call = "cuMemPoolGetAttribute"
	if err := p.enter(call, OpMemPoolGetAttribute); err != nil {
		return 0, err
	}
	defer p.dev.mu.Unlock()
	switch a {
	case gpu.PoolReuseFollowEventDependencies, gpu.PoolReuseAllowOpportunistic, gpu.PoolReuseAllowInternalDependencies:
		return 1, nil
	case gpu.PoolReleaseThreshold:
		return p.threshold, nil
	}
	if v, ok := p.mark(a); ok {
		return v, nil
	}
	return 0, driverErrf(call, gpu.ErrInvalidValue, "unknown pool attribute %d", int(a))
}

// SetAttribute writes the release threshold or resets a high-water mark;
// the reuse policies accept 0 or 1 and are not modelled.
func (p *hostMemPool) SetAttribute(a gpu.PoolAttr, v uint64) error {
	const call = "cuMemPoolSetAttribute"
	if err := p.enter(call, OpMemPoolSetAttribute); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	switch a {
	case gpu.PoolReuseFollowEventDependencies, gpu.PoolReuseAllowOpportunistic, gpu.PoolReuseAllowInternalDependencies:
		if v > 1 {
			return driverErrf(call, gpu.ErrInvalidValue, "reuse policy %d = %d", int(a), v)
		}
	case gpu.PoolReleaseThreshold:
		p.threshold = v
	case gpu.PoolReservedMemHigh, gpu.PoolUsedMemHigh:
		return p.resetHigh(call, a, v)
	default:
		return driverErrf(call, gpu.ErrInvalidValue, "pool attribute %d cannot be set", int(a))
	}
	return nil
}

// TrimTo releases free blocks until at most minBytesToKeep bytes stay
// reserved.
func (p *hostMemPool) TrimTo(minBytesToKeep uint64) error {
	if err := p.enter("cuMemPoolTrimTo", OpMemPoolTrimTo); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	p.trimLocked(minBytesToKeep)
	return nil
}

// Destroy releases the free blocks; live ones are released as they are
// freed.
func (p *hostMemPool) Destroy() error {
	if err := p.enter("cuMemPoolDestroy", OpMemPoolDestroy); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	p.trimLocked(0)
	p.destroyed = true
	p.dev.dropHostPoolLocked(p)
	return nil
}

// dropHostPoolLocked forgets a destroyed pool once nothing of it is
// allocated.
func (d *Device) dropHostPoolLocked(p *hostMemPool) {
	if !p.destroyed || len(p.live) > 0 {
		return
	}
	for i, q := range d.hostPools {
		if q == p {
			d.hostPools = append(d.hostPools[:i], d.hostPools[i+1:]...)
			return
		}
	}
}
