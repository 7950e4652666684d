//go:build !cgo

// Without cgo there is no way to load the driver: rawLoad fails, so
// ready() returns ErrNoDriver and no other raw* function is ever reached.
// They exist so that the portable files compile unchanged, and answer
// CUDA_ERROR_NOT_INITIALIZED should anything call them regardless.

package cuda

import "unsafe"

func rawLoad(string) (int, string) { return 1, "built without cgo" }
func rawHas(string) bool           { return false }
func rawInit() Result              { return ErrNotInitialized }

func rawDriverVersion() (Result, uint64)        { return ErrNotInitialized, 0 }
func rawErrorName(Result) (Result, string)      { return ErrNotInitialized, "" }
func rawDeviceCount() (Result, uint64)          { return ErrNotInitialized, 0 }
func rawDeviceGet(int32) (Result, uint64)       { return ErrNotInitialized, 0 }
func rawDeviceName(Device) (Result, string)     { return ErrNotInitialized, "" }
func rawDeviceTotalMem(Device) (Result, uint64) { return ErrNotInitialized, 0 }
func rawDeviceDefaultMemPool(Device) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawDeviceMemPool(Device) (Result, uint64)    { return ErrNotInitialized, 0 }
func rawDeviceSetMemPool(Device, MemPool) Result  { return ErrNotInitialized }
func rawPrimaryCtxRetain(Device) (Result, uint64) { return ErrNotInitialized, 0 }
func rawPrimaryCtxRelease(Device) Result          { return ErrNotInitialized }
func rawCtxSetCurrent(Context) Result             { return ErrNotInitialized }
func rawCtxGetCurrent() (Result, uint64)          { return ErrNotInitialized, 0 }
func rawCtxCreate(Device) (Result, uint64)        { return ErrNotInitialized, 0 }
func rawCtxDestroy(Context) Result                { return ErrNotInitialized }
func rawCtxSynchronize(Context) Result            { return ErrNotInitialized }
func rawMemGetInfo(Context) (Result, uint64, uint64) {
	return ErrNotInitialized, 0, 0
}
func rawDeviceAttribute(Device, DeviceAttribute) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawStreamCreate(Context, uint32) (Result, uint64) { return ErrNotInitialized, 0 }
func rawStreamDestroy(Context, Stream) Result          { return ErrNotInitialized }
func rawStreamSynchronize(Context, Stream) Result      { return ErrNotInitialized }
func rawStreamQuery(Context, Stream) Result            { return ErrNotInitialized }
func rawStreamWaitEvent(Context, Stream, Event) Result { return ErrNotInitialized }
func rawEventCreate(Context, uint32) (Result, uint64)  { return ErrNotInitialized, 0 }
func rawEventDestroy(Context, Event) Result            { return ErrNotInitialized }
func rawEventRecord(Context, Event, Stream) Result     { return ErrNotInitialized }
func rawEventQuery(Context, Event) Result              { return ErrNotInitialized }
func rawEventSynchronize(Context, Event) Result        { return ErrNotInitialized }
func rawEventElapsed(Context, Event, Event) (Result, float32) {
	return ErrNotInitialized, 0
}
func rawMemAlloc(Context, uint64) (Result, uint64)                { return ErrNotInitialized, 0 }
func rawMemFree(Context, DevicePtr) Result                        { return ErrNotInitialized }
func rawMemAllocAsync(Context, uint64, Stream) (Result, uint64)   { return ErrNotInitialized, 0 }
func rawMemFreeAsync(Context, DevicePtr, Stream) Result           { return ErrNotInitialized }
func rawMemAllocManaged(Context, uint64, uint32) (Result, uint64) { return ErrNotInitialized, 0 }
func rawMemAllocFromPoolAsync(Context, uint64, MemPool, Stream) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawMemAllocHost(Context, uint64) (Result, unsafe.Pointer) { return ErrNotInitialized, nil }
func rawMemFreeHost(Context, unsafe.Pointer) Result            { return ErrNotInitialized }
func rawMemsetD8Async(Context, DevicePtr, byte, uint64, Stream) Result {
	return ErrNotInitialized
}
func rawMemcpyHtoDAsync(Context, DevicePtr, unsafe.Pointer, uint64, Stream) Result {
	return ErrNotInitialized
}
func rawMemcpyDtoHAsync(Context, unsafe.Pointer, DevicePtr, uint64, Stream) Result {
	return ErrNotInitialized
}
func rawMemcpyDtoDAsync(Context, DevicePtr, DevicePtr, uint64, Stream) Result {
	return ErrNotInitialized
}
func rawMemPoolCreate(Context, Device, HandleType) (Result, uint64) { return ErrNotInitialized, 0 }
func rawMemPoolDestroy(Context, MemPool) Result                     { return ErrNotInitialized }
func rawMemPoolGetAttribute(Context, MemPool, PoolAttribute) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawMemPoolSetAttribute(Context, MemPool, PoolAttribute, uint64) Result {
	return ErrNotInitialized
}
func rawMemPoolTrimTo(Context, MemPool, uint64) Result   { return ErrNotInitialized }
func rawModuleLoadData(Context, string) (Result, uint64) { return ErrNotInitialized, 0 }
func rawModuleUnload(Context, Module) Result             { return ErrNotInitialized }
func rawModuleGetFunction(Context, Module, string) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawFuncParamInfo(Context, Function, uint64) (Result, uint64, uint64) {
	return ErrNotInitialized, 0, 0
}
func rawLaunchKernel(Context, Function, [3]uint32, [3]uint32, uint32, Stream, *Params) Result {
	return ErrNotInitialized
}

// The capture wing.
func rawStreamBeginCapture(Context, Stream, CaptureMode) Result { return ErrNotInitialized }
func rawStreamEndCapture(Context, Stream) (Result, uint64)      { return ErrNotInitialized, 0 }
func rawStreamIsCapturing(Context, Stream) (Result, uint64)     { return ErrNotInitialized, 0 }
func rawStreamGetCaptureInfo(Context, Stream) (Result, CaptureStatus, uint64) {
	return ErrNotInitialized, 0, 0
}
func rawGraphInstantiate(Context, Graph, uint64) (Result, uint64) { return ErrNotInitialized, 0 }
func rawGraphLaunch(Context, GraphExec, Stream) Result            { return ErrNotInitialized }
func rawGraphExecDestroy(Context, GraphExec) Result               { return ErrNotInitialized }
func rawGraphDestroy(Context, Graph) Result                       { return ErrNotInitialized }
func rawDeviceGraphMemTrim(Context, Device) Result                { return ErrNotInitialized }
func rawDeviceGetGraphMemAttribute(Context, Device, GraphMemAttribute) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawDeviceSetGraphMemAttribute(Context, Device, GraphMemAttribute, uint64) Result {
	return ErrNotInitialized
}
func rawThreadExchangeCaptureMode(CaptureMode) (Result, CaptureMode) { return ErrNotInitialized, 0 }

// Foreign-handle wing.
func rawStreamGetCtx(Context, Stream) (Result, uint64) { return ErrNotInitialized, 0 }
func rawCtxGetDevice(Context) (Result, uint64)         { return ErrNotInitialized, 0 }

// The virtual-memory wing.
func rawMemAddressReserve(Context, uint64, uint64) (Result, uint64) { return ErrNotInitialized, 0 }
func rawMemAddressFree(Context, DevicePtr, uint64) Result           { return ErrNotInitialized }
func rawMemCreate(Context, Device, uint64, HandleType) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawMemExportFD(Context, MemHandle) (Result, uint64)      { return ErrNotInitialized, 0 }
func rawMemExportFabric(Context, MemHandle, *[64]byte) Result { return ErrNotInitialized }
func rawMemImportFD(Context, int) (Result, uint64)            { return ErrNotInitialized, 0 }
func rawMemImportFabric(Context, *[64]byte) (Result, uint64)  { return ErrNotInitialized, 0 }
func rawMemRelease(Context, MemHandle) Result                 { return ErrNotInitialized }
func rawMemMap(Context, DevicePtr, uint64, uint64, MemHandle) Result {
	return ErrNotInitialized
}
func rawMemUnmap(Context, DevicePtr, uint64) Result             { return ErrNotInitialized }
func rawMemSetAccess(Context, DevicePtr, uint64, Device) Result { return ErrNotInitialized }
func rawMemGetAllocationGranularity(Context, Device, GranularityOption, HandleType) (Result, uint64) {
	return ErrNotInitialized, 0
}

func rawMemPrefetchAsync(Context, DevicePtr, uint64, Location, Stream) Result {
	return ErrNotInitialized
}
func rawMemAdvise(Context, DevicePtr, uint64, Advice, Location) Result { return ErrNotInitialized }
func rawMemPoolCreateAt(Context, AllocationType, Location) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawMemAllocHostFromPoolAsync(Context, uint64, MemPool, Stream) (Result, unsafe.Pointer) {
	return ErrNotInitialized, nil
}
func rawMemFreeHostAsync(Context, unsafe.Pointer, Stream) Result { return ErrNotInitialized }

func rawDeviceCanAccessPeer(Device, Device) (Result, uint64) { return ErrNotInitialized, 0 }
func rawCtxEnablePeerAccess(Context, Context) Result         { return ErrNotInitialized }
func rawMemcpyPeerAsync(Context, DevicePtr, Context, DevicePtr, Context, uint64, Stream) Result {
	return ErrNotInitialized
}
func rawMemPoolSetAccess(Context, MemPool, Device, AccessFlags) Result { return ErrNotInitialized }
func rawMemPoolGetAccess(Context, MemPool, Device) (Result, uint64)    { return ErrNotInitialized, 0 }
func rawMemPoolExportFD(Context, MemPool) (Result, uint64)             { return ErrNotInitialized, 0 }
func rawMemPoolExportFabric(Context, MemPool, *[64]byte) Result        { return ErrNotInitialized }
func rawMemPoolImportFD(Context, int) (Result, uint64)                 { return ErrNotInitialized, 0 }
func rawMemPoolImportFabric(Context, *[64]byte) (Result, uint64)       { return ErrNotInitialized, 0 }
func rawMemPoolExportPointer(Context, DevicePtr, *[64]byte) Result     { return ErrNotInitialized }
func rawMemPoolImportPointer(Context, MemPool, *[64]byte) (Result, uint64) {
	return ErrNotInitialized, 0
}
func rawIpcGetEventHandle(Context, Event, *[64]byte) Result     { return ErrNotInitialized }
func rawIpcOpenEventHandle(Context, *[64]byte) (Result, uint64) { return ErrNotInitialized, 0 }
func rawIpcGetMemHandle(Context, DevicePtr, *[64]byte) Result   { return ErrNotInitialized }
func rawIpcOpenMemHandle(Context, *[64]byte) (Result, uint64)   { return ErrNotInitialized, 0 }
func rawIpcCloseMemHandle(Context, DevicePtr) Result            { return ErrNotInitialized }
