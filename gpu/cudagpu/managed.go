// Managed memory and host-located pools: gpu.ManagedMemory and
// gpu.HostMemPools over cuMemPrefetchAsync_v2, cuMemAdvise_v2 and
// cuMemPoolCreate with a location and an allocation type, in the device's
// primary context.
//
// What the driver would take on trust is checked here, so that both
// backends answer alike: a size that is not positive, a location of an
// unknown kind (ErrInvalidValue), a device location other than this
// device (ErrInvalidDevice), an unknown advice (ErrInvalidValue), by
// gpu.CheckLocation and gpu.CheckAdvice, the checks the simulator makes
// too. Read-mostly advice takes no location: the one given is ignored. Whether
// a range is managed memory is the driver's to say. Host-pool slices are
// remembered (first byte -> size) so that FreeHostAsync of anything else
// is refused before it reaches the driver.

package cudagpu

import (
	"fmt"
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.ManagedMemory = (*Device)(nil)
	_ gpu.HostMemPools  = (*Device)(nil)
)

// location checks loc for op (gpu.CheckLocation) and converts it.
func (d *Device) location(op string, loc gpu.Location) (cuda.Location, error) {
	if err := gpu.CheckLocation(d.ordinal, loc); err != nil {
		return cuda.Location{}, fmt.Errorf("cudagpu: %s: %w", op, err)
	}
	switch loc.Kind {
	case gpu.LocationDevice:
		return cuda.Location{Type: cuda.LocationDevice, ID: int32(d.dev)}, nil
	case gpu.LocationHostNUMA:
		return cuda.Location{Type: cuda.LocationHostNUMA, ID: int32(loc.ID)}, nil
	}
	return cuda.Location{Type: cuda.LocationHost}, nil
}

// PrefetchAsync is cuMemPrefetchAsync_v2.
func (d *Device) PrefetchAsync(p gpu.DevicePtr, n int, loc gpu.Location, s gpu.Stream) error {
	const op = "PrefetchAsync"
	cs, err := d.stream(op, s)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("cudagpu: %s: size %d: %w", op, n, gpu.ErrInvalidValue)
	}
	cl, err := d.location(op, loc)
	if err != nil {
		return err
	}
	return d.ctx.MemPrefetchAsync(cuda.DevicePtr(p), uint64(n), cl, cs.h)
}

// Advise is cuMemAdvise_v2.
func (d *Device) Advise(p gpu.DevicePtr, n int, a gpu.Advice, loc gpu.Location) error {
	const op = "Advise"
	if n <= 0 {
		return fmt.Errorf("cudagpu: %s: size %d: %w", op, n, gpu.ErrInvalidValue)
	}
	if err := gpu.CheckAdvice(d.ordinal, a, loc); err != nil {
		return fmt.Errorf("cudagpu: %s: %w", op, err)
	}
	// Read-mostly advice takes no location; the driver ignores the one
	// passed, so a zero Location goes as the host.
	cl := cuda.Location{Type: cuda.LocationHost}
	if a.TakesLocation() {
		var err error
		if cl, err = d.location(op, loc); err != nil {
			return err
		}
	}
	return d.ctx.MemAdvise(cuda.DevicePtr(p), uint64(n), cuda.Advice(a), cl)
}

// NewManagedPool is cuMemPoolCreate of managed memory preferring this
// device (CUDA 13 on).
func (d *Device) NewManagedPool() (gpu.MemPool, error) {
	h, err := d.ctx.MemPoolCreateAt(cuda.AllocManaged, cuda.Location{Type: cuda.LocationDevice, ID: int32(d.dev)})
	if err != nil {
		return nil, err
	}
	p := &MemPool{dev: d, h: h}
	d.foreign.addPool(p)
	return p, nil
}

// NewHostMemPool is cuMemPoolCreate of pinned memory at the host or a
// host NUMA node.
func (d *Device) NewHostMemPool(loc gpu.Location) (gpu.MemPool, error) {
	const op = "NewHostMemPool"
	if loc.Kind != gpu.LocationHost && loc.Kind != gpu.LocationHostNUMA {
		return nil, fmt.Errorf("cudagpu: %s: %v is not on the host: %w", op, loc, gpu.ErrInvalidValue)
	}
	cl, err := d.location(op, loc)
	if err != nil {
		return nil, err
	}
	h, err := d.ctx.MemPoolCreateAt(cuda.AllocPinned, cl)
	if err != nil {
		return nil, err
	}
	p := &MemPool{dev: d, h: h, host: true}
	d.foreign.addPool(p)
	return p, nil
}

// MallocHostFromPoolAsync is cuMemAllocFromPoolAsync from a host-located
// pool.
func (d *Device) MallocHostFromPoolAsync(n int, pool gpu.MemPool, s gpu.Stream) ([]byte, error) {
	const op = "MallocHostFromPoolAsync"
	cs, err := d.stream(op, s)
	if err != nil {
		return nil, err
	}
	cp, err := d.pool(op, pool)
	if err != nil {
		return nil, err
	}
	if !cp.host {
		return nil, fmt.Errorf("cudagpu: %s: the pool is not located on the host: %w", op, gpu.ErrInvalidValue)
	}
	if err := allocSize(op, n); err != nil {
		return nil, err
	}
	p, err := d.ctx.MemAllocHostFromPoolAsync(uint64(n), cp.h, cs.h)
	if err != nil {
		return nil, err
	}
	b := unsafe.Slice((*byte)(p), n)
	d.hostMu.Lock()
	d.poolHost[&b[0]] = n
	d.hostMu.Unlock()
	return b, nil
}

// FreeHostAsync is cuMemFreeAsync of a slice MallocHostFromPoolAsync
// returned; anything else is ErrInvalidValue and frees nothing.
func (d *Device) FreeHostAsync(b []byte, s gpu.Stream) error {
	const op = "FreeHostAsync"
	cs, err := d.stream(op, s)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return fmt.Errorf("cudagpu: %s: empty slice: %w", op, gpu.ErrInvalidValue)
	}
	key := &b[0]
	d.hostMu.Lock()
	n, ok := d.poolHost[key]
	if !ok || n != len(b) {
		d.hostMu.Unlock()
		return fmt.Errorf("cudagpu: %s: %p (%d bytes) is not an allocation of a host-located pool: %w", op, key, len(b), gpu.ErrInvalidValue)
	}
	delete(d.poolHost, key)
	d.hostMu.Unlock()
	if err := d.ctx.MemFreeHostAsync(unsafe.Pointer(key), cs.h); err != nil {
		d.hostMu.Lock()
		d.poolHost[key] = n
		d.hostMu.Unlock()
		return err
	}
	return nil
}
