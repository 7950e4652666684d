// Managed memory and host-located pools through the instrumented device:
// gpu.ManagedMemory and gpu.HostMemPools calls go to the device underneath
// with streams unwrapped, and say ErrNotSupported when it has none.
//
// A prefetch moves pages without changing their bytes, and advice is a
// host call, so neither is a use the sanitizer checks; the memory they
// name is checked like any other allocation of its resource. Host-pool
// memory is host memory, outside the sanitizer's model of device
// allocations.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.ManagedMemory = (*Device)(nil)
	_ gpu.HostMemPools  = (*Device)(nil)
)

func (d *Device) managed(op string) (gpu.ManagedMemory, error) {
	m, err := gpu.ManagedMemoryOf(d.Device)
	if err != nil {
		return nil, fmt.Errorf("sanitize: %s: %w", op, err)
	}
	return m, nil
}

func (d *Device) hostPools(op string) (gpu.HostMemPools, error) {
	h, err := gpu.HostMemPoolsOf(d.Device)
	if err != nil {
		return nil, fmt.Errorf("sanitize: %s: %w", op, err)
	}
	return h, nil
}

// PrefetchAsync is the device's, on the unwrapped stream.
func (d *Device) PrefetchAsync(p gpu.DevicePtr, n int, loc gpu.Location, s gpu.Stream) error {
	m, err := d.managed("PrefetchAsync")
	if err != nil {
		return err
	}
	return m.PrefetchAsync(p, n, loc, unwrapStream(s))
}

// Advise is the device's.
func (d *Device) Advise(p gpu.DevicePtr, n int, a gpu.Advice, loc gpu.Location) error {
	m, err := d.managed("Advise")
	if err != nil {
		return err
	}
	return m.Advise(p, n, a, loc)
}

// NewManagedPool is the device's.
func (d *Device) NewManagedPool() (gpu.MemPool, error) {
	m, err := d.managed("NewManagedPool")
	if err != nil {
		return nil, err
	}
	return m.NewManagedPool()
}

// NewHostMemPool is the device's.
func (d *Device) NewHostMemPool(loc gpu.Location) (gpu.MemPool, error) {
	h, err := d.hostPools("NewHostMemPool")
	if err != nil {
		return nil, err
	}
	return h.NewHostMemPool(loc)
}

// MallocHostFromPoolAsync is the device's, on the unwrapped stream.
func (d *Device) MallocHostFromPoolAsync(n int, pool gpu.MemPool, s gpu.Stream) ([]byte, error) {
	h, err := d.hostPools("MallocHostFromPoolAsync")
	if err != nil {
		return nil, err
	}
	return h.MallocHostFromPoolAsync(n, pool, unwrapStream(s))
}

// FreeHostAsync is the device's, on the unwrapped stream.
func (d *Device) FreeHostAsync(b []byte, s gpu.Stream) error {
	h, err := d.hostPools("FreeHostAsync")
	if err != nil {
		return err
	}
	return h.FreeHostAsync(b, unwrapStream(s))
}
