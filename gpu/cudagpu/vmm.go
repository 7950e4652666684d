// Virtual memory: gpu.VirtualMemory over the driver's cuMemAddressReserve,
// cuMemCreate, cuMemMap and kin, in the device's primary context, for
// pinned memory on this device.

package cudagpu

import (
	"fmt"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.VirtualMemory = (*Device)(nil)

// Granularity is cuMemGetAllocationGranularity for pinned memory on the
// device.
func (d *Device) Granularity(recommended bool) (uint64, error) {
	opt := cuda.GranularityMinimum
	if recommended {
		opt = cuda.GranularityRecommended
	}
	return d.ctx.MemAllocationGranularity(d.dev, opt)
}

// ReserveAddress is cuMemAddressReserve.
func (d *Device) ReserveAddress(size, alignment uint64) (gpu.DevicePtr, error) {
	p, err := d.ctx.MemAddressReserve(size, alignment)
	return gpu.DevicePtr(p), err
}

// FreeAddress is cuMemAddressFree.
func (d *Device) FreeAddress(p gpu.DevicePtr, size uint64) error {
	return d.ctx.MemAddressFree(cuda.DevicePtr(p), size)
}

// CreatePhysical is cuMemCreate of pinned memory on the device.
func (d *Device) CreatePhysical(size uint64) (gpu.Physical, error) {
	h, err := d.ctx.MemCreate(d.dev, size)
	return gpu.Physical(h), err
}

// ReleasePhysical is cuMemRelease. The null handle is refused here: the
// driver takes handles on trust.
func (d *Device) ReleasePhysical(h gpu.Physical) error {
	if h == 0 {
		return fmt.Errorf("cudagpu: ReleasePhysical: null handle: %w", gpu.ErrInvalidValue)
	}
	if err := d.ctx.MemRelease(cuda.MemHandle(h)); err != nil {
		return err
	}
	// The driver may hand the same number out again from now on.
	d.exportable.Delete(h)
	return nil
}

// Map is cuMemMap. The null handle is refused here.
func (d *Device) Map(p gpu.DevicePtr, size uint64, h gpu.Physical, offset uint64) error {
	if h == 0 {
		return fmt.Errorf("cudagpu: Map: null handle: %w", gpu.ErrInvalidValue)
	}
	return d.ctx.MemMap(cuda.DevicePtr(p), size, offset, cuda.MemHandle(h))
}

// Unmap is cuMemUnmap.
func (d *Device) Unmap(p gpu.DevicePtr, size uint64) error {
	return d.ctx.MemUnmap(cuda.DevicePtr(p), size)
}

// SetAccess is cuMemSetAccess, read-write for the device.
func (d *Device) SetAccess(p gpu.DevicePtr, size uint64) error {
	return d.ctx.MemSetAccess(cuda.DevicePtr(p), size, d.dev)
}
