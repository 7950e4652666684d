//go:build cgo

// This file is the only one in the module that calls C. Each raw* function
// is one cgo call into shim.c and nothing else: it converts arguments to C
// scalars and the result back, and never passes a Go pointer that C could
// keep (the few buffers passed, name and copy buffers, are borrowed for the
// call alone, as the cgo rules allow). Validation, error wrapping and the
// "is the driver loaded" check live in the portable files, so that a build
// without cgo (raw_nocgo.go) has the same API.

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import "unsafe"

func rawLoad(path string) (int, string) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	if r := C.sa_load(cs); r != 0 {
		return int(r), C.GoString(C.sa_load_error())
	}
	return 0, ""
}

func rawHas(name string) bool {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.sa_has(cs) == 1
}

func rawInit() Result { return Result(C.sa_init()) }

func rawDriverVersion() (Result, uint64) {
	r := C.sa_driver_version()
	return Result(r.r), uint64(r.v)
}

func rawErrorName(code Result) (Result, string) {
	var buf [128]byte
	r := C.sa_get_error_name(C.int(code), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	if r != 0 {
		return Result(r), ""
	}
	return Success, cstring(buf[:])
}

func rawDeviceCount() (Result, uint64) {
	r := C.sa_device_count()
	return Result(r.r), uint64(r.v)
}

func rawDeviceGet(ordinal int32) (Result, uint64) {
	r := C.sa_device_get(C.int(ordinal))
	return Result(r.r), uint64(r.v)
}

func rawDeviceName(d Device) (Result, string) {
	var buf [256]byte
	r := C.sa_device_name(C.int(d), (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	if r != 0 {
		return Result(r), ""
	}
	return Success, cstring(buf[:])
}

func rawDeviceTotalMem(d Device) (Result, uint64) {
	r := C.sa_device_total_mem(C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawDeviceAttribute(d Device, a DeviceAttribute) (Result, uint64) {
	r := C.sa_device_attribute(C.int(d), C.int(a))
	return Result(r.r), uint64(r.v)
}

func rawDeviceDefaultMemPool(d Device) (Result, uint64) {
	r := C.sa_device_default_mem_pool(C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawDeviceMemPool(d Device) (Result, uint64) {
	r := C.sa_device_mem_pool(C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawDeviceSetMemPool(d Device, p MemPool) Result {
	return Result(C.sa_device_set_mem_pool(C.int(d), C.uintptr_t(p)))
}

func rawPrimaryCtxRetain(d Device) (Result, uint64) {
	r := C.sa_primary_ctx_retain(C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawPrimaryCtxRelease(d Device) Result {
	return Result(C.sa_primary_ctx_release(C.int(d)))
}

func rawCtxSetCurrent(c Context) Result { return Result(C.sa_ctx_set_current(C.uintptr_t(c))) }

func rawCtxGetCurrent() (Result, uint64) {
	r := C.sa_ctx_get_current()
	return Result(r.r), uint64(r.v)
}

func rawCtxCreate(d Device) (Result, uint64) {
	r := C.sa_ctx_create(C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawCtxDestroy(c Context) Result { return Result(C.sa_ctx_destroy(C.uintptr_t(c))) }

func rawCtxSynchronize(c Context) Result { return Result(C.sa_ctx_synchronize(C.uintptr_t(c))) }

func rawMemGetInfo(c Context) (Result, uint64, uint64) {
	r := C.sa_mem_get_info(C.uintptr_t(c))
	return Result(r.r), uint64(r.free_bytes), uint64(r.total_bytes)
}

func rawStreamCreate(c Context, flags uint32) (Result, uint64) {
	r := C.sa_stream_create(C.uintptr_t(c), C.uint(flags))
	return Result(r.r), uint64(r.v)
}

func rawStreamDestroy(c Context, s Stream) Result {
	return Result(C.sa_stream_destroy(C.uintptr_t(c), C.uintptr_t(s)))
}

func rawStreamSynchronize(c Context, s Stream) Result {
	return Result(C.sa_stream_synchronize(C.uintptr_t(c), C.uintptr_t(s)))
}

func rawStreamQuery(c Context, s Stream) Result {
	return Result(C.sa_stream_query(C.uintptr_t(c), C.uintptr_t(s)))
}

func rawStreamWaitEvent(c Context, s Stream, e Event) Result {
	return Result(C.sa_stream_wait_event(C.uintptr_t(c), C.uintptr_t(s), C.uintptr_t(e)))
}

func rawEventCreate(c Context, flags uint32) (Result, uint64) {
	r := C.sa_event_create(C.uintptr_t(c), C.uint(flags))
	return Result(r.r), uint64(r.v)
}

func rawEventDestroy(c Context, e Event) Result {
	return Result(C.sa_event_destroy(C.uintptr_t(c), C.uintptr_t(e)))
}

func rawEventRecord(c Context, e Event, s Stream) Result {
	return Result(C.sa_event_record(C.uintptr_t(c), C.uintptr_t(e), C.uintptr_t(s)))
}

func rawEventQuery(c Context, e Event) Result {
	return Result(C.sa_event_query(C.uintptr_t(c), C.uintptr_t(e)))
}

func rawEventSynchronize(c Context, e Event) Result {
	return Result(C.sa_event_synchronize(C.uintptr_t(c), C.uintptr_t(e)))
}

func rawEventElapsed(c Context, start, end Event) (Result, float32) {
	r := C.sa_event_elapsed(C.uintptr_t(c), C.uintptr_t(start), C.uintptr_t(end))
	return Result(r.r), float32(r.ms)
}

func rawMemAlloc(c Context, size uint64) (Result, uint64) {
	r := C.sa_mem_alloc(C.uintptr_t(c), C.uint64_t(size))
	return Result(r.r), uint64(r.v)
}

func rawMemFree(c Context, p DevicePtr) Result {
	return Result(C.sa_mem_free(C.uintptr_t(c), C.uint64_t(p)))
}

func rawMemAllocAsync(c Context, size uint64, s Stream) (Result, uint64) {
	r := C.sa_mem_alloc_async(C.uintptr_t(c), C.uint64_t(size), C.uintptr_t(s))
	return Result(r.r), uint64(r.v)
}

func rawMemFreeAsync(c Context, p DevicePtr, s Stream) Result {
	return Result(C.sa_mem_free_async(C.uintptr_t(c), C.uint64_t(p), C.uintptr_t(s)))
}

func rawMemAllocFromPoolAsync(c Context, size uint64, pool MemPool, s Stream) (Result, uint64) {
	r := C.sa_mem_alloc_from_pool_async(C.uintptr_t(c), C.uint64_t(size), C.uintptr_t(pool), C.uintptr_t(s))
	return Result(r.r), uint64(r.v)
}

func rawMemAllocManaged(c Context, size uint64, flags uint32) (Result, uint64) {
	r := C.sa_mem_alloc_managed(C.uintptr_t(c), C.uint64_t(size), C.uint(flags))
	return Result(r.r), uint64(r.v)
}

func rawMemAllocHost(c Context, size uint64) (Result, unsafe.Pointer) {
	r := C.sa_mem_alloc_host(C.uintptr_t(c), C.uint64_t(size))
	return Result(r.r), r.p
}

func rawMemFreeHost(c Context, p unsafe.Pointer) Result {
	return Result(C.sa_mem_free_host(C.uintptr_t(c), p))
}

func rawMemsetD8Async(c Context, p DevicePtr, v byte, n uint64, s Stream) Result {
	return Result(C.sa_memset_d8_async(C.uintptr_t(c), C.uint64_t(p), C.uchar(v), C.uint64_t(n), C.uintptr_t(s)))
}

func rawMemcpyHtoDAsync(c Context, dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) Result {
	return Result(C.sa_memcpy_htod_async(C.uintptr_t(c), C.uint64_t(dst), src, C.uint64_t(n), C.uintptr_t(s)))
}

func rawMemcpyDtoHAsync(c Context, dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) Result {
	return Result(C.sa_memcpy_dtoh_async(C.uintptr_t(c), dst, C.uint64_t(src), C.uint64_t(n), C.uintptr_t(s)))
}

func rawMemcpyDtoDAsync(c Context, dst, src DevicePtr, n uint64, s Stream) Result {
	return Result(C.sa_memcpy_dtod_async(C.uintptr_t(c), C.uint64_t(dst), C.uint64_t(src), C.uint64_t(n), C.uintptr_t(s)))
}

func rawMemPoolCreate(c Context, d Device, handles HandleType) (Result, uint64) {
	r := C.sa_mem_pool_create(C.uintptr_t(c), C.int(d), C.int(handles))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolDestroy(c Context, p MemPool) Result {
	return Result(C.sa_mem_pool_destroy(C.uintptr_t(c), C.uintptr_t(p)))
}

func rawMemPoolGetAttribute(c Context, p MemPool, a PoolAttribute) (Result, uint64) {
	r := C.sa_mem_pool_get_attribute(C.uintptr_t(c), C.uintptr_t(p), C.int(a))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolSetAttribute(c Context, p MemPool, a PoolAttribute, v uint64) Result {
	return Result(C.sa_mem_pool_set_attribute(C.uintptr_t(c), C.uintptr_t(p), C.int(a), C.uint64_t(v)))
}

func rawMemPoolTrimTo(c Context, p MemPool, keep uint64) Result {
	return Result(C.sa_mem_pool_trim_to(C.uintptr_t(c), C.uintptr_t(p), C.uint64_t(keep)))
}

func rawModuleLoadData(c Context, image string) (Result, uint64) {
	cs := C.CString(image)
	defer C.free(unsafe.Pointer(cs))
	r := C.sa_module_load_data(C.uintptr_t(c), cs)
	return Result(r.r), uint64(r.v)
}

func rawModuleUnload(c Context, m Module) Result {
	return Result(C.sa_module_unload(C.uintptr_t(c), C.uintptr_t(m)))
}

func rawModuleGetFunction(c Context, m Module, name string) (Result, uint64) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	r := C.sa_module_get_function(C.uintptr_t(c), C.uintptr_t(m), cs)
	return Result(r.r), uint64(r.v)
}

func rawFuncParamInfo(c Context, f Function, index uint64) (Result, uint64, uint64) {
	r := C.sa_func_param_info(C.uintptr_t(c), C.uintptr_t(f), C.uint64_t(index))
	return Result(r.r), uint64(r.offset), uint64(r.size)
}

func rawLaunchKernel(c Context, f Function, grid, block [3]uint32, shared uint32, s Stream, p *Params) Result {
	var vals, offs unsafe.Pointer
	if p.n > 0 {
		vals = unsafe.Pointer(&p.vals[0])
		offs = unsafe.Pointer(&p.offs[0])
	}
	return Result(C.sa_launch_kernel(C.uintptr_t(c), C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), C.uintptr_t(s),
		vals, C.int(p.size), (*C.uint32_t)(offs), C.int(p.n)))
}

// The capture wing: stream capture, graphs, graph memory.

func rawStreamBeginCapture(c Context, s Stream, mode CaptureMode) Result {
	return Result(C.sa_stream_begin_capture(C.uintptr_t(c), C.uintptr_t(s), C.int(mode)))
}

func rawStreamEndCapture(c Context, s Stream) (Result, uint64) {
	r := C.sa_stream_end_capture(C.uintptr_t(c), C.uintptr_t(s))
	return Result(r.r), uint64(r.v)
}

func rawStreamIsCapturing(c Context, s Stream) (Result, uint64) {
	r := C.sa_stream_is_capturing(C.uintptr_t(c), C.uintptr_t(s))
	return Result(r.r), uint64(r.v)
}

func rawStreamGetCaptureInfo(c Context, s Stream) (Result, CaptureStatus, uint64) {
	r := C.sa_stream_get_capture_info(C.uintptr_t(c), C.uintptr_t(s))
	return Result(r.r), CaptureStatus(r.status), uint64(r.id)
}

func rawGraphInstantiate(c Context, g Graph, flags uint64) (Result, uint64) {
	r := C.sa_graph_instantiate(C.uintptr_t(c), C.uintptr_t(g), C.uint64_t(flags))
	return Result(r.r), uint64(r.v)
}

func rawGraphLaunch(c Context, x GraphExec, s Stream) Result {
	return Result(C.sa_graph_launch(C.uintptr_t(c), C.uintptr_t(x), C.uintptr_t(s)))
}

func rawGraphExecDestroy(c Context, x GraphExec) Result {
	return Result(C.sa_graph_exec_destroy(C.uintptr_t(c), C.uintptr_t(x)))
}

func rawGraphDestroy(c Context, g Graph) Result {
	return Result(C.sa_graph_destroy(C.uintptr_t(c), C.uintptr_t(g)))
}

func rawDeviceGraphMemTrim(c Context, d Device) Result {
	return Result(C.sa_device_graph_mem_trim(C.uintptr_t(c), C.int(d)))
}

func rawDeviceGetGraphMemAttribute(c Context, d Device, a GraphMemAttribute) (Result, uint64) {
	r := C.sa_device_get_graph_mem_attribute(C.uintptr_t(c), C.int(d), C.int(a))
	return Result(r.r), uint64(r.v)
}

func rawDeviceSetGraphMemAttribute(c Context, d Device, a GraphMemAttribute, v uint64) Result {
	return Result(C.sa_device_set_graph_mem_attribute(C.uintptr_t(c), C.int(d), C.int(a), C.uint64_t(v)))
}

func rawThreadExchangeCaptureMode(mode CaptureMode) (Result, CaptureMode) {
	r := C.sa_thread_exchange_capture_mode(C.int(mode))
	return Result(r.r), CaptureMode(r.v)
}

// Foreign-handle wing.

func rawStreamGetCtx(c Context, s Stream) (Result, uint64) {
	r := C.sa_stream_get_ctx(C.uintptr_t(c), C.uintptr_t(s))
	return Result(r.r), uint64(r.v)
}

func rawCtxGetDevice(c Context) (Result, uint64) {
	r := C.sa_ctx_get_device(C.uintptr_t(c))
	return Result(r.r), uint64(r.v)
}

// The virtual-memory wing: reservations, physical allocations, mappings.

func rawMemAddressReserve(c Context, size, alignment uint64) (Result, uint64) {
	r := C.sa_mem_address_reserve(C.uintptr_t(c), C.uint64_t(size), C.uint64_t(alignment))
	return Result(r.r), uint64(r.v)
}

func rawMemAddressFree(c Context, p DevicePtr, size uint64) Result {
	return Result(C.sa_mem_address_free(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(size)))
}

func rawMemCreate(c Context, d Device, size uint64, handles HandleType) (Result, uint64) {
	r := C.sa_mem_create(C.uintptr_t(c), C.int(d), C.uint64_t(size), C.int(handles))
	return Result(r.r), uint64(r.v)
}

func rawMemExportFD(c Context, h MemHandle) (Result, uint64) {
	r := C.sa_mem_export_fd(C.uintptr_t(c), C.uint64_t(h))
	return Result(r.r), uint64(r.v)
}

func rawMemExportFabric(c Context, h MemHandle, out *[64]byte) Result {
	return Result(C.sa_mem_export_fabric(C.uintptr_t(c), C.uint64_t(h), unsafe.Pointer(out)))
}

func rawMemImportFD(c Context, fd int) (Result, uint64) {
	r := C.sa_mem_import_fd(C.uintptr_t(c), C.int(fd))
	return Result(r.r), uint64(r.v)
}

func rawMemImportFabric(c Context, in *[64]byte) (Result, uint64) {
	r := C.sa_mem_import_fabric(C.uintptr_t(c), unsafe.Pointer(in))
	return Result(r.r), uint64(r.v)
}

func rawMemRelease(c Context, h MemHandle) Result {
	return Result(C.sa_mem_release(C.uintptr_t(c), C.uint64_t(h)))
}

func rawMemMap(c Context, p DevicePtr, size, offset uint64, h MemHandle) Result {
	return Result(C.sa_mem_map(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(size), C.uint64_t(offset), C.uint64_t(h)))
}

func rawMemUnmap(c Context, p DevicePtr, size uint64) Result {
	return Result(C.sa_mem_unmap(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(size)))
}

func rawMemSetAccess(c Context, p DevicePtr, size uint64, d Device) Result {
	return Result(C.sa_mem_set_access(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(size), C.int(d)))
}

func rawMemGetAllocationGranularity(c Context, d Device, opt GranularityOption, handles HandleType) (Result, uint64) {
	r := C.sa_mem_get_allocation_granularity(C.uintptr_t(c), C.int(d), C.int(opt), C.int(handles))
	return Result(r.r), uint64(r.v)
}

// The managed-memory wing: prefetch, advice, pools by type and location,
// allocations from pools located on the host.

func rawMemPrefetchAsync(c Context, p DevicePtr, n uint64, loc Location, s Stream) Result {
	return Result(C.sa_mem_prefetch_async(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(n), C.int(loc.Type), C.int(loc.ID), C.uintptr_t(s)))
}

func rawMemAdvise(c Context, p DevicePtr, n uint64, a Advice, loc Location) Result {
	return Result(C.sa_mem_advise(C.uintptr_t(c), C.uint64_t(p), C.uint64_t(n), C.int(a), C.int(loc.Type), C.int(loc.ID)))
}

func rawMemPoolCreateAt(c Context, t AllocationType, loc Location) (Result, uint64) {
	r := C.sa_mem_pool_create_at(C.uintptr_t(c), C.int(t), C.int(loc.Type), C.int(loc.ID))
	return Result(r.r), uint64(r.v)
}

func rawMemAllocHostFromPoolAsync(c Context, size uint64, pool MemPool, s Stream) (Result, unsafe.Pointer) {
	r := C.sa_mem_alloc_host_from_pool_async(C.uintptr_t(c), C.uint64_t(size), C.uintptr_t(pool), C.uintptr_t(s))
	return Result(r.r), r.p
}

func rawMemFreeHostAsync(c Context, p unsafe.Pointer, s Stream) Result {
	return Result(C.sa_mem_free_host_async(C.uintptr_t(c), p, C.uintptr_t(s)))
}

// The peer and IPC wing. The 64-byte handles are Go arrays borrowed for
// the call; C copies them.

func rawDeviceCanAccessPeer(d, peer Device) (Result, uint64) {
	r := C.sa_device_can_access_peer(C.int(d), C.int(peer))
	return Result(r.r), uint64(r.v)
}

func rawCtxEnablePeerAccess(c, peer Context) Result {
	return Result(C.sa_ctx_enable_peer_access(C.uintptr_t(c), C.uintptr_t(peer)))
}

func rawMemcpyPeerAsync(c Context, dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, n uint64, s Stream) Result {
	return Result(C.sa_memcpy_peer_async(C.uintptr_t(c), C.uint64_t(dst), C.uintptr_t(dstCtx), C.uint64_t(src), C.uintptr_t(srcCtx), C.uint64_t(n), C.uintptr_t(s)))
}

func rawMemPoolSetAccess(c Context, p MemPool, d Device, flags AccessFlags) Result {
	return Result(C.sa_mem_pool_set_access(C.uintptr_t(c), C.uintptr_t(p), C.int(d), C.int(flags)))
}

func rawMemPoolGetAccess(c Context, p MemPool, d Device) (Result, uint64) {
	r := C.sa_mem_pool_get_access(C.uintptr_t(c), C.uintptr_t(p), C.int(d))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolExportFD(c Context, p MemPool) (Result, uint64) {
	r := C.sa_mem_pool_export_fd(C.uintptr_t(c), C.uintptr_t(p))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolExportFabric(c Context, p MemPool, out *[64]byte) Result {
	return Result(C.sa_mem_pool_export_fabric(C.uintptr_t(c), C.uintptr_t(p), unsafe.Pointer(out)))
}

func rawMemPoolImportFD(c Context, fd int) (Result, uint64) {
	r := C.sa_mem_pool_import_fd(C.uintptr_t(c), C.int(fd))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolImportFabric(c Context, h *[64]byte) (Result, uint64) {
	r := C.sa_mem_pool_import_fabric(C.uintptr_t(c), unsafe.Pointer(h))
	return Result(r.r), uint64(r.v)
}

func rawMemPoolExportPointer(c Context, p DevicePtr, out *[64]byte) Result {
	return Result(C.sa_mem_pool_export_pointer(C.uintptr_t(c), C.uint64_t(p), unsafe.Pointer(out)))
}

func rawMemPoolImportPointer(c Context, p MemPool, in *[64]byte) (Result, uint64) {
	r := C.sa_mem_pool_import_pointer(C.uintptr_t(c), C.uintptr_t(p), unsafe.Pointer(in))
	return Result(r.r), uint64(r.v)
}

func rawIpcGetEventHandle(c Context, e Event, out *[64]byte) Result {
	return Result(C.sa_ipc_get_event_handle(C.uintptr_t(c), C.uintptr_t(e), unsafe.Pointer(out)))
}

func rawIpcOpenEventHandle(c Context, in *[64]byte) (Result, uint64) {
	r := C.sa_ipc_open_event_handle(C.uintptr_t(c), unsafe.Pointer(in))
	return Result(r.r), uint64(r.v)
}

func rawIpcGetMemHandle(c Context, p DevicePtr, out *[64]byte) Result {
	return Result(C.sa_ipc_get_mem_handle(C.uintptr_t(c), C.uint64_t(p), unsafe.Pointer(out)))
}

func rawIpcOpenMemHandle(c Context, in *[64]byte) (Result, uint64) {
	r := C.sa_ipc_open_mem_handle(C.uintptr_t(c), unsafe.Pointer(in))
	return Result(r.r), uint64(r.v)
}

func rawIpcCloseMemHandle(c Context, p DevicePtr) Result {
	return Result(C.sa_ipc_close_mem_handle(C.uintptr_t(c), C.uint64_t(p)))
}

// cstring returns the text of a NUL-terminated byte buffer.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
