// Physical allocations shared between processes: gpu.PhysicalSharing over
// cuMemCreate with requested handle types, cuMemExportToShareableHandle
// and cuMemImportFromShareableHandle.
//
// The driver takes allocation handles on trust, so the device remembers
// the handle types of each live allocation it created exportable
// (Device.exportable, until ReleasePhysical) and refuses an export as any
// other type, of any other handle, before the driver, with the errors the
// simulator returns.

package cudagpu

import (
	"fmt"
	"os"
	"runtime"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.PhysicalSharing = (*Device)(nil)

// PhysicalHandleTypes reads CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
// and CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED (a driver that
// knows no fabric attribute offers no fabric handle).
func (d *Device) PhysicalHandleTypes() (gpu.HandleType, error) {
	posix, err := d.dev.Attribute(cuda.AttrHandleTypePOSIXSupported)
	if err != nil {
		return 0, err
	}
	t := gpu.HandleNone
	if posix != 0 {
		t |= gpu.HandlePOSIX
	}
	if fabric, err := d.dev.Attribute(cuda.AttrHandleTypeFabricSupported); err == nil && fabric != 0 {
		t |= gpu.HandleFabric
	}
	return t, nil
}

// CreateExportablePhysical is cuMemCreate of pinned memory on the device
// with requestedHandleTypes t.
func (d *Device) CreateExportablePhysical(size uint64, t gpu.HandleType) (gpu.Physical, error) {
	offered, err := d.PhysicalHandleTypes()
	if err != nil {
		return 0, err
	}
	if t == gpu.HandleNone || t&^offered != 0 {
		return 0, fmt.Errorf("cudagpu: CreateExportablePhysical: handle types %#x, device %d offers %#x: %w", int32(t), d.ordinal, int32(offered), gpu.ErrNotSupported)
	}
	h, err := d.ctx.MemCreateExportable(d.dev, size, cuda.HandleType(t))
	if err != nil {
		return 0, err
	}
	d.exportable.Store(gpu.Physical(h), t)
	return gpu.Physical(h), nil
}

// ExportPhysical is cuMemExportToShareableHandle of an allocation made by
// CreateExportablePhysical with t among its types.
func (d *Device) ExportPhysical(h gpu.Physical, t gpu.HandleType) (gpu.Shareable, error) {
	types, _ := d.exportable.Load(h)
	made, _ := types.(gpu.HandleType)
	if (t != gpu.HandlePOSIX && t != gpu.HandleFabric) || made&t == 0 {
		return gpu.Shareable{}, fmt.Errorf("cudagpu: ExportPhysical: handle type %#x of allocation %d, exportable as %#x: %w", int32(t), uint64(h), int32(made), gpu.ErrInvalidValue)
	}
	if t == gpu.HandleFabric {
		f, err := d.ctx.MemExportFabric(cuda.MemHandle(h))
		return gpu.Shareable{Type: t, Fabric: f}, err
	}
	fd, err := d.ctx.MemExportFD(cuda.MemHandle(h))
	if err != nil {
		return gpu.Shareable{}, err
	}
	return gpu.Shareable{Type: t, File: os.NewFile(uintptr(fd), "cuda-physical")}, nil
}

// ImportPhysical is cuMemImportFromShareableHandle; sh.File stays open.
func (d *Device) ImportPhysical(sh gpu.Shareable) (gpu.Physical, error) {
	var (
		h   cuda.MemHandle
		err error
	)
	switch {
	case sh.Type == gpu.HandlePOSIX && sh.File != nil && int(sh.File.Fd()) >= 0:
		// Fd of a closed file is -1: refused above, never passed on.
		h, err = d.ctx.MemImportFD(int(sh.File.Fd()))
		runtime.KeepAlive(sh.File)
	case sh.Type == gpu.HandleFabric:
		h, err = d.ctx.MemImportFabric(cuda.IPCHandle(sh.Fabric))
	default:
		return 0, fmt.Errorf("cudagpu: ImportPhysical: handle type %#x without an open handle: %w", int32(sh.Type), gpu.ErrInvalidValue)
	}
	return gpu.Physical(h), err
}
