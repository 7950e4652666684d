// Shared physical allocations through the instrumented device:
// gpu.PhysicalSharing calls go to the device underneath unchanged, and say
// ErrNotSupported when it has none. Like mapping, exporting and importing
// are host calls, not stream work, and are not modelled here; memory a
// resource maps from them is checked like its other allocations.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.PhysicalSharing = (*Device)(nil)

func (d *Device) sharing(op string) (gpu.PhysicalSharing, error) {
	x, ok := d.Device.(gpu.PhysicalSharing)
	if !ok {
		return nil, fmt.Errorf("sanitize: %s: device %T cannot share physical allocations: %w", op, d.Device, gpu.ErrNotSupported)
	}
	return x, nil
}

// PhysicalHandleTypes is the device's.
func (d *Device) PhysicalHandleTypes() (gpu.HandleType, error) {
	x, err := d.sharing("PhysicalHandleTypes")
	if err != nil {
		return 0, err
	}
	return x.PhysicalHandleTypes()
}

// CreateExportablePhysical is the device's.
func (d *Device) CreateExportablePhysical(size uint64, t gpu.HandleType) (gpu.Physical, error) {
	x, err := d.sharing("CreateExportablePhysical")
	if err != nil {
		return 0, err
	}
	return x.CreateExportablePhysical(size, t)
}

// ExportPhysical is the device's.
func (d *Device) ExportPhysical(h gpu.Physical, t gpu.HandleType) (gpu.Shareable, error) {
	x, err := d.sharing("ExportPhysical")
	if err != nil {
		return gpu.Shareable{}, err
	}
	return x.ExportPhysical(h, t)
}

// ImportPhysical is the device's.
func (d *Device) ImportPhysical(sh gpu.Shareable) (gpu.Physical, error) {
	x, err := d.sharing("ImportPhysical")
	if err != nil {
		return 0, err
	}
	return x.ImportPhysical(sh)
}
