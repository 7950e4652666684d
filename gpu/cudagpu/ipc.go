// Interprocess memory: gpu.IPC over exportable pools
// (cuMemPoolExportToShareableHandle and kin), interprocess events and the
// legacy cuIpc*MemHandle calls, in the device's primary context.
//
// A pool requesting fabric handles is made only once the driver has said
// the process may make fabric memory (fabric.go), because destroying one
// whose export it then refuses ends the process.
//
// Pools and events remember how they were made (exportable handle types,
// imported, interprocess), so that the calls the driver would refuse, or
// whose misuse it leaves undefined (recording an event opened from another
// process, allocating from an imported pool), are refused here with the
// same errors the simulator returns.

package cudagpu

import (
	"fmt"
	"os"
	"runtime"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.IPC = (*Device)(nil)

// ExportHandleTypes is CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES.
func (d *Device) ExportHandleTypes() (gpu.HandleType, error) {
	v, err := d.dev.Attribute(cuda.AttrMempoolHandleTypes)
	return gpu.HandleType(v), err
}

// NewExportableMemPool is cuMemPoolCreate with handle types t. Handle
// types with gpu.HandleFabric are first asked of the driver, once per
// device (fabric.go): a process that may not make fabric memory gets the
// driver's refusal, gpu.ErrNotPermitted without an IMEX channel, and no
// pool.
func (d *Device) NewExportableMemPool(t gpu.HandleType) (gpu.MemPool, error) {
	offered, err := d.ExportHandleTypes()
	if err != nil {
		return nil, err
	}
	if t == gpu.HandleNone || t&^offered != 0 {
		return nil, fmt.Errorf("cudagpu: NewExportableMemPool: handle types %#x, device %d offers %#x: %w", int32(t), d.ordinal, int32(offered), gpu.ErrNotSupported)
	}
	if t&gpu.HandleFabric != 0 {
		if err := d.fabricPermitted(); err != nil {
			return nil, fmt.Errorf("cudagpu: NewExportableMemPool: handle types %#x: %w", int32(t), err)
		}
	}
	h, err := d.ctx.MemPoolCreateExportable(d.dev, cuda.HandleType(t))
	if err != nil {
		return nil, err
	}
	p := &MemPool{dev: d, h: h, handles: t}
	d.foreign.addPool(p)
	return p, nil
}

// ExportMemPool is cuMemPoolExportToShareableHandle.
func (d *Device) ExportMemPool(p gpu.MemPool, t gpu.HandleType) (gpu.Shareable, error) {
	const op = "ExportMemPool"
	cp, err := d.pool(op, p)
	if err != nil {
		return gpu.Shareable{}, err
	}
	if (t != gpu.HandlePOSIX && t != gpu.HandleFabric) || cp.handles&t == 0 || cp.imported {
		return gpu.Shareable{}, fmt.Errorf("cudagpu: %s: handle type %#x of a pool exportable as %#x: %w", op, int32(t), int32(cp.handles), gpu.ErrInvalidValue)
	}
	if t == gpu.HandleFabric {
		h, err := d.ctx.ExportPoolFabric(cp.h)
		return gpu.Shareable{Type: t, Fabric: h}, err
	}
	fd, err := d.ctx.ExportPoolFD(cp.h)
	if err != nil {
		return gpu.Shareable{}, err
	}
	return gpu.Shareable{Type: t, File: os.NewFile(uintptr(fd), "cuda-mempool")}, nil
}

// ImportMemPool is cuMemPoolImportFromShareableHandle; h.File stays open.
func (d *Device) ImportMemPool(h gpu.Shareable) (gpu.MemPool, error) {
	const op = "ImportMemPool"
	var (
		ph  cuda.MemPool
		err error
	)
	switch {
	case h.Type == gpu.HandlePOSIX && h.File != nil:
		ph, err = d.ctx.ImportPoolFD(int(h.File.Fd()))
		runtime.KeepAlive(h.File)
	case h.Type == gpu.HandleFabric:
		ph, err = d.ctx.ImportPoolFabric(h.Fabric)
	default:
		return nil, fmt.Errorf("cudagpu: %s: handle type %#x without its handle: %w", op, int32(h.Type), gpu.ErrInvalidValue)
	}
	if err != nil {
		return nil, err
	}
	p := &MemPool{dev: d, h: ph, imported: true}
	d.foreign.addPool(p)
	return p, nil
}

// ExportPointer is cuMemPoolExportPointer.
func (d *Device) ExportPointer(p gpu.DevicePtr) (gpu.PtrExportData, error) {
	if p == 0 {
		return gpu.PtrExportData{}, fmt.Errorf("cudagpu: ExportPointer: null pointer: %w", gpu.ErrInvalidValue)
	}
	h, err := d.ctx.MemPoolExportPointer(cuda.DevicePtr(p))
	return gpu.PtrExportData(h), err
}

// ImportPointer is cuMemPoolImportPointer from an imported pool.
func (d *Device) ImportPointer(pool gpu.MemPool, data gpu.PtrExportData) (gpu.DevicePtr, error) {
	cp, err := d.pool("ImportPointer", pool)
	if err != nil {
		return 0, err
	}
	if !cp.imported {
		return 0, fmt.Errorf("cudagpu: ImportPointer: the pool was not imported: %w", gpu.ErrInvalidValue)
	}
	p, err := d.ctx.MemPoolImportPointer(cp.h, cuda.IPCHandle(data))
	return gpu.DevicePtr(p), err
}

// NewIPCEvent creates an interprocess event (no timing).
func (d *Device) NewIPCEvent() (gpu.Event, error) {
	h, err := d.ctx.EventCreate(cuda.EventDisableTiming | cuda.EventInterprocess)
	if err != nil {
		return nil, err
	}
	e := &Event{dev: d, h: h, ipc: true}
	d.foreign.addEvent(e)
	return e, nil
}

// ExportEvent is cuIpcGetEventHandle of an event made by NewIPCEvent.
func (d *Device) ExportEvent(e gpu.Event) (gpu.IPCEventHandle, error) {
	ce, err := d.event("ExportEvent", e)
	if err != nil {
		return gpu.IPCEventHandle{}, err
	}
	if !ce.ipc || ce.imported {
		return gpu.IPCEventHandle{}, fmt.Errorf("cudagpu: ExportEvent: not an interprocess event of this process: %w", gpu.ErrInvalidValue)
	}
	h, err := d.ctx.IpcGetEventHandle(ce.h)
	return gpu.IPCEventHandle(h), err
}

// ImportEvent is cuIpcOpenEventHandle.
func (d *Device) ImportEvent(h gpu.IPCEventHandle) (gpu.Event, error) {
	eh, err := d.ctx.IpcOpenEventHandle(cuda.IPCHandle(h))
	if err != nil {
		return nil, err
	}
	e := &Event{dev: d, h: eh, ipc: true, imported: true}
	d.foreign.addEvent(e)
	return e, nil
}

// ExportMem is cuIpcGetMemHandle.
func (d *Device) ExportMem(p gpu.DevicePtr) (gpu.IPCMemHandle, error) {
	h, err := d.ctx.IpcGetMemHandle(cuda.DevicePtr(p))
	return gpu.IPCMemHandle(h), err
}

// OpenMem is cuIpcOpenMemHandle.
func (d *Device) OpenMem(h gpu.IPCMemHandle) (gpu.DevicePtr, error) {
	p, err := d.ctx.IpcOpenMemHandle(cuda.IPCHandle(h))
	return gpu.DevicePtr(p), err
}

// CloseMem is cuIpcCloseMemHandle.
func (d *Device) CloseMem(p gpu.DevicePtr) error {
	return d.ctx.IpcCloseMemHandle(cuda.DevicePtr(p))
}
