// Interprocess memory through the instrumented device: gpu.IPC calls go
// to the device underneath with events unwrapped, and say ErrNotSupported
// when it has none.
//
// Interprocess events, made here or imported, come back instrumented like
// NewEvent's, so that this process's records of them and waits on them
// order its streams in the sanitizer's model as any event does. What
// another process does is outside that model: its records reach this one
// only through the driver. An imported allocation is not one of the
// driver's allocations the sanitizer tracks (it was allocated elsewhere),
// so freeing it (FreeAsync, which only unmaps it) checks nothing.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.IPC = (*Device)(nil)

func (d *Device) ipc(op string) (gpu.IPC, error) {
	x, err := gpu.IPCOf(d.Device)
	if err != nil {
		return nil, fmt.Errorf("sanitize: %s: %w", op, err)
	}
	return x, nil
}

// ExportHandleTypes is the device's.
func (d *Device) ExportHandleTypes() (gpu.HandleType, error) {
	x, err := d.ipc("ExportHandleTypes")
	if err != nil {
		return gpu.HandleNone, err
	}
	return x.ExportHandleTypes()
}

// NewExportableMemPool is the device's.
func (d *Device) NewExportableMemPool(t gpu.HandleType) (gpu.MemPool, error) {
	x, err := d.ipc("NewExportableMemPool")
	if err != nil {
		return nil, err
	}
	return x.NewExportableMemPool(t)
}

// ExportMemPool is the device's.
func (d *Device) ExportMemPool(p gpu.MemPool, t gpu.HandleType) (gpu.Shareable, error) {
	x, err := d.ipc("ExportMemPool")
	if err != nil {
		return gpu.Shareable{}, err
	}
	return x.ExportMemPool(p, t)
}

// ImportMemPool is the device's.
func (d *Device) ImportMemPool(h gpu.Shareable) (gpu.MemPool, error) {
	x, err := d.ipc("ImportMemPool")
	if err != nil {
		return nil, err
	}
	return x.ImportMemPool(h)
}

// ExportPointer is the device's.
func (d *Device) ExportPointer(p gpu.DevicePtr) (gpu.PtrExportData, error) {
	x, err := d.ipc("ExportPointer")
	if err != nil {
		return gpu.PtrExportData{}, err
	}
	return x.ExportPointer(p)
}

// ImportPointer is the device's.
func (d *Device) ImportPointer(pool gpu.MemPool, data gpu.PtrExportData) (gpu.DevicePtr, error) {
	x, err := d.ipc("ImportPointer")
	if err != nil {
		return 0, err
	}
	return x.ImportPointer(pool, data)
}

// NewIPCEvent creates an instrumented interprocess event.
func (d *Device) NewIPCEvent() (gpu.Event, error) {
	x, err := d.ipc("NewIPCEvent")
	if err != nil {
		return nil, err
	}
	e, err := x.NewIPCEvent()
	if err != nil {
		return nil, err
	}
	return d.eventView(e), nil
}

// ExportEvent is the device's, with e unwrapped.
func (d *Device) ExportEvent(e gpu.Event) (gpu.IPCEventHandle, error) {
	x, err := d.ipc("ExportEvent")
	if err != nil {
		return gpu.IPCEventHandle{}, err
	}
	return x.ExportEvent(unwrapEvent(e))
}

// ImportEvent opens another process's event, instrumented.
func (d *Device) ImportEvent(h gpu.IPCEventHandle) (gpu.Event, error) {
	x, err := d.ipc("ImportEvent")
	if err != nil {
		return nil, err
	}
	e, err := x.ImportEvent(h)
	if err != nil {
		return nil, err
	}
	return d.eventView(e), nil
}

// ExportMem is the device's.
func (d *Device) ExportMem(p gpu.DevicePtr) (gpu.IPCMemHandle, error) {
	x, err := d.ipc("ExportMem")
	if err != nil {
		return gpu.IPCMemHandle{}, err
	}
	return x.ExportMem(p)
}

// OpenMem is the device's.
func (d *Device) OpenMem(h gpu.IPCMemHandle) (gpu.DevicePtr, error) {
	x, err := d.ipc("OpenMem")
	if err != nil {
		return 0, err
	}
	return x.OpenMem(h)
}

// CloseMem is the device's.
func (d *Device) CloseMem(p gpu.DevicePtr) error {
	x, err := d.ipc("CloseMem")
	if err != nil {
		return err
	}
	return x.CloseMem(p)
}
