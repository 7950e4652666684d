// Interprocess memory in the backend interface: a pool of one process
// whose allocations another process maps, and events that order the work
// of the two.
//
// The driver's model (cuMemPoolExportToShareableHandle and kin):
//
//   - A pool made exportable (NewExportableMemPool with a handle type the
//     device offers: ExportHandleTypes) is exported once as an OS handle
//     (ExportMemPool: a file descriptor, or a 64-byte fabric handle), which
//     the other process imports (ImportMemPool). An imported pool
//     allocates nothing: MallocFromPoolAsync on it is ErrNotSupported.
//   - Each allocation of it is exported as 64 bytes of plain data
//     (ExportPointer) and imported into the imported pool (ImportPointer),
//     at an address of the importer's own. The importer frees it with
//     FreeAsync, which only unmaps it there.
//   - The rules the driver leaves to its users: the importer must not
//     touch the memory before the exporter's allocation (and whatever
//     wrote it) has completed, and the exporter must not free it before
//     every importer's free has completed. Events made by NewIPCEvent,
//     exported with ExportEvent and opened with ImportEvent, carry those
//     orderings between the processes: an imported event may be waited on
//     (Stream.WaitEvent), queried and synchronized; recording one is
//     ErrNotSupported. Package ipc builds a protocol on them that keeps
//     both rules by construction.
//   - When a process exits, the driver tears down its context: its
//     imports are unmapped and its exports' memory is freed once no other
//     process maps it. Memory a survivor exported stays allocated in the
//     survivor's pool until the survivor frees it.
//
// The legacy path (ExportMem, OpenMem, CloseMem: cuIpcGetMemHandle and
// kin) shares one Malloc allocation by a 64-byte handle, with no pool; it
// is here to be measured against.
//
// IPC is an optional part of the interface: both backends implement it
// (the simulator between two Backends of one test binary, each standing
// for a process); IPCOf says ErrNotSupported for a device that does not.
package gpu

import (
	"fmt"
	"os"
)

// HandleType is a set of OS handle kinds a pool can be exported as: a
// CUmemAllocationHandleType.
type HandleType int32

// Handle types (cuda.h's values).
const (
	HandleNone HandleType = 0x0
	// HandlePOSIX is a file descriptor, passed between processes over a
	// Unix socket (SCM_RIGHTS).
	HandlePOSIX HandleType = 0x1
	// HandleFabric is a 64-byte handle usable across the nodes of a
	// fabric (NVLink multi-node systems with IMEX); plain data.
	HandleFabric HandleType = 0x8
)

// Shareable is an exported pool: a file descriptor (HandlePOSIX) or a
// fabric handle (HandleFabric).
type Shareable struct {
	Type HandleType
	// File is the descriptor of a HandlePOSIX export. The exporter owns
	// the one ExportMemPool returns and closes it once sent; ImportMemPool
	// leaves the one it is given open.
	File *os.File
	// Fabric is the handle of a HandleFabric export.
	Fabric [64]byte
}

// PtrExportData is an exported allocation (CUmemPoolPtrExportData).
type PtrExportData [64]byte

// IPCEventHandle is an exported event (CUipcEventHandle).
type IPCEventHandle [64]byte

// IPCMemHandle is a legacy exported allocation (CUipcMemHandle).
type IPCMemHandle [64]byte

// IPC is implemented by a Device whose memory other processes can map.
// All methods are safe for concurrent use.
type IPC interface {
	// ExportHandleTypes is the set of handle types a pool of the device
	// can be exported as (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES).
	ExportHandleTypes() (HandleType, error)
	// NewExportableMemPool creates a pool of device memory exportable as
	// t (cuMemPoolCreate with handleTypes t); a type the device does not
	// offer is ErrNotSupported. Types with HandleFabric in a process that
	// may not make fabric memory (no IMEX channel: the device's
	// attributes may still offer fabric) are ErrNotPermitted, and no
	// pool is made: the driver would make it, refuse its export, and may
	// end the process destroying it (driver 580 does).
	NewExportableMemPool(t HandleType) (MemPool, error)
	// ExportMemPool is cuMemPoolExportToShareableHandle as t, one type
	// the pool was created with, else ErrInvalidValue.
	ExportMemPool(p MemPool, t HandleType) (Shareable, error)
	// ImportMemPool is cuMemPoolImportFromShareableHandle. The pool's
	// Destroy forgets the import.
	ImportMemPool(h Shareable) (MemPool, error)
	// ExportPointer is cuMemPoolExportPointer of a live allocation of an
	// exportable pool of this device; anything else is ErrInvalidValue.
	ExportPointer(p DevicePtr) (PtrExportData, error)
	// ImportPointer is cuMemPoolImportPointer: the allocation data
	// describes, mapped in this process, from pool, the imported pool it
	// was exported from. Free it with FreeAsync (or Free).
	ImportPointer(pool MemPool, data PtrExportData) (DevicePtr, error)
	// NewIPCEvent creates an event that another process can open
	// (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING).
	NewIPCEvent() (Event, error)
	// ExportEvent is cuIpcGetEventHandle of an event made by NewIPCEvent;
	// any other is ErrInvalidValue.
	ExportEvent(e Event) (IPCEventHandle, error)
	// ImportEvent is cuIpcOpenEventHandle. The event may be waited on,
	// queried and synchronized, not recorded; Destroy closes it.
	ImportEvent(h IPCEventHandle) (Event, error)
	// ExportMem is cuIpcGetMemHandle of a Malloc allocation.
	ExportMem(p DevicePtr) (IPCMemHandle, error)
	// OpenMem is cuIpcOpenMemHandle; close the mapping with CloseMem.
	OpenMem(h IPCMemHandle) (DevicePtr, error)
	// CloseMem is cuIpcCloseMemHandle.
	CloseMem(p DevicePtr) error
}

// IPCOf returns dev's interprocess interface, or an error matching
// ErrNotSupported if it has none.
func IPCOf(dev Device) (IPC, error) {
	if x, ok := dev.(IPC); ok {
		return x, nil
	}
	return nil, fmt.Errorf("gpu: device %T has no interprocess memory: %w", dev, ErrNotSupported)
}
