// Virtual memory through the instrumented device: gpu.VirtualMemory calls
// go to the device underneath unchanged, and say ErrNotSupported when it
// has none.
//
// The sanitizer checks stream order at the level of resources and
// buffers: memory a resource maps into a reserved range is checked like
// any other allocation of that resource (its Allocate and Deallocate go
// through the sanitizer's wrapper). Mapping and unmapping themselves are
// host calls, not stream work, and are not modelled here.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.VirtualMemory = (*Device)(nil)

func (d *Device) vm(op string) (gpu.VirtualMemory, error) {
	vm, ok := d.Device.(gpu.VirtualMemory)
	if !ok {
		return nil, fmt.Errorf("sanitize: %s: device %T has no virtual memory: %w", op, d.Device, gpu.ErrNotSupported)
	}
	return vm, nil
}

// Granularity is the device's.
func (d *Device) Granularity(recommended bool) (uint64, error) {
	vm, err := d.vm("Granularity")
	if err != nil {
		return 0, err
	}
	return vm.Granularity(recommended)
}

// ReserveAddress is the device's.
func (d *Device) ReserveAddress(size, alignment uint64) (gpu.DevicePtr, error) {
	vm, err := d.vm("ReserveAddress")
	if err != nil {
		return 0, err
	}
	return vm.ReserveAddress(size, alignment)
}

// FreeAddress is the device's.
func (d *Device) FreeAddress(p gpu.DevicePtr, size uint64) error {
	vm, err := d.vm("FreeAddress")
	if err != nil {
		return err
	}
	return vm.FreeAddress(p, size)
}

// CreatePhysical is the device's.
func (d *Device) CreatePhysical(size uint64) (gpu.Physical, error) {
	vm, err := d.vm("CreatePhysical")
	if err != nil {
		return 0, err
	}
	return vm.CreatePhysical(size)
}

// ReleasePhysical is the device's.
func (d *Device) ReleasePhysical(h gpu.Physical) error {
	vm, err := d.vm("ReleasePhysical")
	if err != nil {
		return err
	}
	return vm.ReleasePhysical(h)
}

// Map is the device's.
func (d *Device) Map(p gpu.DevicePtr, size uint64, h gpu.Physical, offset uint64) error {
	vm, err := d.vm("Map")
	if err != nil {
		return err
	}
	return vm.Map(p, size, h, offset)
}

// Unmap is the device's.
func (d *Device) Unmap(p gpu.DevicePtr, size uint64) error {
	vm, err := d.vm("Unmap")
	if err != nil {
		return err
	}
	return vm.Unmap(p, size)
}

// SetAccess is the device's.
func (d *Device) SetAccess(p gpu.DevicePtr, size uint64) error {
	vm, err := d.vm("SetAccess")
	if err != nil {
		return err
	}
	return vm.SetAccess(p, size)
}
