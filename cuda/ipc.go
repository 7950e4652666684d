// The peer and IPC wing: memory of one device used by another
// (cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuMemPoolSetAccess,
// cuMemcpyPeerAsync) and memory of one process used by another (pools
// exported as a shareable handle and their allocations as 64 bytes of
// export data, events and the legacy cuIpcGetMemHandle allocations).
//
// The 64-byte handles (CUmemPoolPtrExportData, CUipcEventHandle,
// CUipcMemHandle, CUmemFabricHandle) are opaque arrays here; they are plain
// data and may travel by any means. A POSIX file descriptor is an int the
// caller owns: ExportPoolFD returns a new descriptor to close once sent,
// and ImportPoolFD leaves the one it is given open.
//
// The driver's rules, which these calls do not check: an imported pointer
// must not be used before its allocation completed in the exporter, and
// must be freed in every importer before the exporter frees it (a
// cuMemFreeAsync in the importer completed before the exporter's free
// runs); an imported pool allocates nothing. Package ipc above builds its
// protocol on them.

package cuda

// HandleType is a CUmemAllocationHandleType: a set of the OS handle
// kinds a pool can be exported as.
type HandleType int32

// Handle types (cuda.h's values).
const (
	HandleNone   HandleType = 0x0
	HandlePOSIX  HandleType = 0x1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	HandleFabric HandleType = 0x8 // CU_MEM_HANDLE_TYPE_FABRIC
)

// AccessFlags is a CUmemAccess_flags value.
type AccessFlags int32

// Access flags (cuda.h's values).
const (
	AccessNone      AccessFlags = 0 // CU_MEM_ACCESS_FLAGS_PROT_NONE
	AccessRead      AccessFlags = 1 // CU_MEM_ACCESS_FLAGS_PROT_READ
	AccessReadWrite AccessFlags = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
)

// EventInterprocess is CU_EVENT_INTERPROCESS: an event whose handle
// another process can open (it must also be EventDisableTiming).
const EventInterprocess uint32 = 4

// AttrMempoolHandleTypes is CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
// the handle types a pool of the device can be exported as.
const AttrMempoolHandleTypes DeviceAttribute = 119

// IPCHandle is one of the driver's 64-byte interprocess handles.
type IPCHandle [64]byte

// CanAccessPeer is cuDeviceCanAccessPeer: whether d can access memory of
// peer.
func (d Device) CanAccessPeer(peer Device) (bool, error) {
	if err := ready(); err != nil {
		return false, err
	}
	r, v := rawDeviceCanAccessPeer(d, peer)
	if r != Success {
		return false, &Error{Op: "cuDeviceCanAccessPeer", Code: r}
	}
	return v != 0, nil
}

// EnablePeerAccess is cuCtxEnablePeerAccess: c may then access the
// cuMemAlloc memory of peer's context, now and later.
func (c Context) EnablePeerAccess(peer Context) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuCtxEnablePeerAccess", rawCtxEnablePeerAccess(c, peer))
}

// MemcpyPeerAsync is cuMemcpyPeerAsync: n bytes from src in srcCtx to dst
// in dstCtx, on s (a stream of c).
func (c Context) MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n uint64, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemcpyPeerAsync", rawMemcpyPeerAsync(c, dst, dstCtx, src, srcCtx, n, s))
}

// MemPoolCreateExportable is cuMemPoolCreate of a pool of device memory
// on d that can be exported as the handle types given.
func (c Context) MemPoolCreateExportable(d Device, handles HandleType) (MemPool, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemPoolCreate(c, d, handles)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolCreate", Code: r}
	}
	return MemPool(p), nil
}

// MemPoolSetAccess is cuMemPoolSetAccess for one device.
func (c Context) MemPoolSetAccess(p MemPool, d Device, flags AccessFlags) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemPoolSetAccess", rawMemPoolSetAccess(c, p, d, flags))
}

// MemPoolAccess is cuMemPoolGetAccess for one device.
func (c Context) MemPoolAccess(p MemPool, d Device) (AccessFlags, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemPoolGetAccess(c, p, d)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolGetAccess", Code: r}
	}
	return AccessFlags(v), nil
}

// ExportPoolFD is cuMemPoolExportToShareableHandle as a POSIX file
// descriptor, which the caller owns.
func (c Context) ExportPoolFD(p MemPool) (int, error) {
	if err := c.ok(); err != nil {
		return -1, err
	}
	r, v := rawMemPoolExportFD(c, p)
	if r != Success {
		return -1, &Error{Op: "cuMemPoolExportToShareableHandle", Code: r}
	}
	return int(int64(v)), nil
}

// ExportPoolFabric is cuMemPoolExportToShareableHandle as a fabric handle.
func (c Context) ExportPoolFabric(p MemPool) (IPCHandle, error) {
	var h IPCHandle
	if err := c.ok(); err != nil {
		return h, err
	}
	err := check("cuMemPoolExportToShareableHandle", rawMemPoolExportFabric(c, p, (*[64]byte)(&h)))
	return h, err
}

// ImportPoolFD is cuMemPoolImportFromShareableHandle of a POSIX file
// descriptor; fd stays open.
func (c Context) ImportPoolFD(fd int) (MemPool, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemPoolImportFD(c, fd)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolImportFromShareableHandle", Code: r}
	}
	return MemPool(v), nil
}

// ImportPoolFabric is cuMemPoolImportFromShareableHandle of a fabric
// handle.
func (c Context) ImportPoolFabric(h IPCHandle) (MemPool, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemPoolImportFabric(c, (*[64]byte)(&h))
	if r != Success {
		return 0, &Error{Op: "cuMemPoolImportFromShareableHandle", Code: r}
	}
	return MemPool(v), nil
}

// MemPoolExportPointer is cuMemPoolExportPointer: the export data of an
// allocation of an exportable pool.
func (c Context) MemPoolExportPointer(p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	if err := c.ok(); err != nil {
		return h, err
	}
	err := check("cuMemPoolExportPointer", rawMemPoolExportPointer(c, p, (*[64]byte)(&h)))
	return h, err
}

// MemPoolImportPointer is cuMemPoolImportPointer from an imported pool.
func (c Context) MemPoolImportPointer(p MemPool, data IPCHandle) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawMemPoolImportPointer(c, p, (*[64]byte)(&data))
	if r != Success {
		return 0, &Error{Op: "cuMemPoolImportPointer", Code: r}
	}
	return DevicePtr(v), nil
}

// IpcGetEventHandle is cuIpcGetEventHandle of an event made with
// EventInterprocess|EventDisableTiming.
func (c Context) IpcGetEventHandle(e Event) (IPCHandle, error) {
	var h IPCHandle
	if err := c.ok(); err != nil {
		return h, err
	}
	err := check("cuIpcGetEventHandle", rawIpcGetEventHandle(c, e, (*[64]byte)(&h)))
	return h, err
}

// IpcOpenEventHandle is cuIpcOpenEventHandle. The event is destroyed with
// EventDestroy.
func (c Context) IpcOpenEventHandle(h IPCHandle) (Event, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawIpcOpenEventHandle(c, (*[64]byte)(&h))
	if r != Success {
		return 0, &Error{Op: "cuIpcOpenEventHandle", Code: r}
	}
	return Event(v), nil
}

// IpcGetMemHandle is cuIpcGetMemHandle of cuMemAlloc memory (the legacy
// path).
func (c Context) IpcGetMemHandle(p DevicePtr) (IPCHandle, error) {
	var h IPCHandle
	if err := c.ok(); err != nil {
		return h, err
	}
	err := check("cuIpcGetMemHandle", rawIpcGetMemHandle(c, p, (*[64]byte)(&h)))
	return h, err
}

// IpcOpenMemHandle is cuIpcOpenMemHandle_v2 with
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
func (c Context) IpcOpenMemHandle(h IPCHandle) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawIpcOpenMemHandle(c, (*[64]byte)(&h))
	if r != Success {
		return 0, &Error{Op: "cuIpcOpenMemHandle", Code: r}
	}
	return DevicePtr(v), nil
}

// IpcCloseMemHandle is cuIpcCloseMemHandle.
func (c Context) IpcCloseMemHandle(p DevicePtr) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuIpcCloseMemHandle", rawIpcCloseMemHandle(c, p))
}
