// shim.h declares the C side of package cuda: a thin layer over the CUDA
// driver API that is loaded at run time (shim.c), so no CUDA header or
// library is needed to build.
//
// Conventions, which the Go side relies on:
//   - Handles cross the boundary as uintptr_t (contexts, streams, events,
//     pools, modules, functions) or uint64_t (device pointers), never as Go
//     pointers, so no call retains Go memory and the hot calls take no
//     pointer arguments at all.
//   - A call that yields a value returns it by value in an sa_ret
//     {status, value}, never through an out-parameter, so the Go caller
//     does not have to let a variable escape to the heap.
//   - Every call that needs a context takes it as its first argument and
//     makes it current on the calling OS thread, inside the same C call,
//     if it is not current already (sa_bind). Goroutines can therefore
//     move between threads freely; no runtime.LockOSThread is needed.
//   - An entry point the loaded driver does not export makes its wrapper
//     return SA_NOT_SUPPORTED; no wrapper ever calls a null pointer.
#ifndef STREAMALLOC_CUDA_SHIM_H
#define STREAMALLOC_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

// The CUresult the wrappers return when an entry point is missing
// (CUDA_ERROR_NOT_SUPPORTED), or when the driver was never loaded
// (CUDA_ERROR_NOT_INITIALIZED).
#define SA_NOT_SUPPORTED 801
#define SA_NOT_INITIALIZED 3

// Longest entry of the argument block of sa_launch_kernel.
#define SA_MAX_PARAMS 32
#define SA_MAX_PARAM_BYTES 512

typedef struct {
	int r;      // CUresult
	uint64_t v; // the value, valid when r == 0
} sa_ret;

typedef struct {
	int r;
	uint64_t free_bytes, total_bytes;
} sa_meminfo;

typedef struct {
	int r;
	float ms;
} sa_elapsed;

typedef struct {
	int r;
	void *p; // C memory (pinned host memory), never Go's
} sa_ptr;

typedef struct {
	int r;
	uint64_t offset, size;
} sa_param;

// sa_load dlopens path (normally "libcuda.so.1") and resolves the entry
// points. It returns
// 0 on success, 1 when the library cannot be opened, 2 when a required
// entry point is missing; sa_load_error then describes why. Not safe to
// call concurrently (the Go side calls it once, under sync.Once).
int sa_load(const char *path);
const char *sa_load_error(void);
// sa_has reports whether the named entry point (as in shim.c's table) was
// resolved: 1 yes, 0 no, -1 unknown name.
int sa_has(const char *name);

int sa_init(void);
sa_ret sa_driver_version(void);
int sa_get_error_name(int r, char *buf, int len);

sa_ret sa_device_count(void);
sa_ret sa_device_get(int ordinal);
int sa_device_name(int dev, char *buf, int len);
sa_ret sa_device_total_mem(int dev);
sa_ret sa_device_attribute(int dev, int attr);
sa_ret sa_device_default_mem_pool(int dev);
sa_ret sa_device_mem_pool(int dev);
int sa_device_set_mem_pool(int dev, uintptr_t pool);

sa_ret sa_primary_ctx_retain(int dev);
int sa_primary_ctx_release(int dev);
int sa_ctx_set_current(uintptr_t ctx);
sa_ret sa_ctx_get_current(void);
sa_ret sa_ctx_create(int dev);
int sa_ctx_destroy(uintptr_t ctx);
int sa_ctx_synchronize(uintptr_t ctx);
sa_meminfo sa_mem_get_info(uintptr_t ctx);

sa_ret sa_stream_create(uintptr_t ctx, unsigned flags);
int sa_stream_destroy(uintptr_t ctx, uintptr_t s);
int sa_stream_synchronize(uintptr_t ctx, uintptr_t s);
int sa_stream_query(uintptr_t ctx, uintptr_t s);
int sa_stream_wait_event(uintptr_t ctx, uintptr_t s, uintptr_t e);

sa_ret sa_event_create(uintptr_t ctx, unsigned flags);
int sa_event_destroy(uintptr_t ctx, uintptr_t e);
int sa_event_record(uintptr_t ctx, uintptr_t e, uintptr_t s);
int sa_event_query(uintptr_t ctx, uintptr_t e);
int sa_event_synchronize(uintptr_t ctx, uintptr_t e);
sa_elapsed sa_event_elapsed(uintptr_t ctx, uintptr_t start, uintptr_t end);

sa_ret sa_mem_alloc(uintptr_t ctx, uint64_t size);
int sa_mem_free(uintptr_t ctx, uint64_t p);
sa_ret sa_mem_alloc_async(uintptr_t ctx, uint64_t size, uintptr_t s);
int sa_mem_free_async(uintptr_t ctx, uint64_t p, uintptr_t s);
sa_ret sa_mem_alloc_from_pool_async(uintptr_t ctx, uint64_t size, uintptr_t pool, uintptr_t s);
sa_ret sa_mem_alloc_managed(uintptr_t ctx, uint64_t size, unsigned flags);
sa_ptr sa_mem_alloc_host(uintptr_t ctx, uint64_t size);
int sa_mem_free_host(uintptr_t ctx, void *p);

int sa_memset_d8_async(uintptr_t ctx, uint64_t p, unsigned char v, uint64_t n, uintptr_t s);
int sa_memcpy_htod_async(uintptr_t ctx, uint64_t dst, const void *src, uint64_t n, uintptr_t s);
int sa_memcpy_dtoh_async(uintptr_t ctx, void *dst, uint64_t src, uint64_t n, uintptr_t s);
int sa_memcpy_dtod_async(uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t n, uintptr_t s);

sa_ret sa_mem_pool_create(uintptr_t ctx, int dev, int handle_types);
int sa_mem_pool_destroy(uintptr_t ctx, uintptr_t pool);
sa_ret sa_mem_pool_get_attribute(uintptr_t ctx, uintptr_t pool, int attr);
int sa_mem_pool_set_attribute(uintptr_t ctx, uintptr_t pool, int attr, uint64_t v);
int sa_mem_pool_trim_to(uintptr_t ctx, uintptr_t pool, uint64_t keep);

sa_ret sa_module_load_data(uintptr_t ctx, const char *image);
int sa_module_unload(uintptr_t ctx, uintptr_t mod);
sa_param sa_func_param_info(uintptr_t ctx, uintptr_t f, uint64_t index);
sa_ret sa_module_get_function(uintptr_t ctx, uintptr_t mod, const char *name);
// sa_launch_kernel launches f with n parameters whose values lie packed in
// vals (nbytes long), parameter i starting at offs[i]. The values are
// copied to the C stack before the launch, so vals may be Go memory that
// is only borrowed for the call.
int sa_launch_kernel(uintptr_t ctx, uintptr_t f,
                     unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, uintptr_t s,
                     const void *vals, int nbytes, const uint32_t *offs, int n);

// --- CUDA graphs: the capture wing ---------------------------------------
// Stream capture, graphs and their executables, graph memory. CUgraph and
// CUgraphExec cross as uintptr_t like every other handle.

typedef struct {
	int r;
	int status;  // CUstreamCaptureStatus
	uint64_t id; // the capture's ID, valid when status is not NONE
} sa_capture_info;

int sa_stream_begin_capture(uintptr_t ctx, uintptr_t s, int mode);
sa_ret sa_stream_end_capture(uintptr_t ctx, uintptr_t s);
sa_ret sa_stream_is_capturing(uintptr_t ctx, uintptr_t s);
sa_capture_info sa_stream_get_capture_info(uintptr_t ctx, uintptr_t s);
sa_ret sa_graph_instantiate(uintptr_t ctx, uintptr_t g, uint64_t flags);
int sa_graph_launch(uintptr_t ctx, uintptr_t x, uintptr_t s);
int sa_graph_exec_destroy(uintptr_t ctx, uintptr_t x);
int sa_graph_destroy(uintptr_t ctx, uintptr_t g);
int sa_device_graph_mem_trim(uintptr_t ctx, int dev);
sa_ret sa_device_get_graph_mem_attribute(uintptr_t ctx, int dev, int attr);
int sa_device_set_graph_mem_attribute(uintptr_t ctx, int dev, int attr, uint64_t v);
// sa_thread_exchange_capture_mode sets the calling thread's capture
// interaction mode and returns the previous one in v.
sa_ret sa_thread_exchange_capture_mode(int mode);
// Foreign-handle wing. sa_stream_get_ctx is cuStreamGetCtx with ctx bound
// (so 0 and CU_STREAM_PER_THREAD name ctx's streams); sa_ctx_get_device is
// cuCtxGetDevice of ctx, leaving the thread's current context as it was.
sa_ret sa_stream_get_ctx(uintptr_t ctx, uintptr_t s);
sa_ret sa_ctx_get_device(uintptr_t ctx);

// The virtual-memory wing: cuMemAddressReserve/Free, cuMemCreate/Release
// of pinned device memory on dev (exportable as handle_types, a
// CUmemAllocationHandleType set; 0 for none), cuMemMap/Unmap,
// cuMemSetAccess (read-write for dev), cuMemGetAllocationGranularity
// (option 0 minimum, 1 recommended), and a physical allocation's export
// to and import from a POSIX descriptor (returned in v, the caller's to
// close; an import leaves fd open) or a 64-byte fabric handle (copied from
// or to the caller's buffer). Physical handles cross as uint64_t.
sa_ret sa_mem_address_reserve(uintptr_t ctx, uint64_t size, uint64_t alignment);
int sa_mem_address_free(uintptr_t ctx, uint64_t p, uint64_t size);
sa_ret sa_mem_create(uintptr_t ctx, int dev, uint64_t size, int handle_types);
sa_ret sa_mem_export_fd(uintptr_t ctx, uint64_t h);
int sa_mem_export_fabric(uintptr_t ctx, uint64_t h, void *out64);
sa_ret sa_mem_import_fd(uintptr_t ctx, int fd);
sa_ret sa_mem_import_fabric(uintptr_t ctx, const void *in64);
int sa_mem_release(uintptr_t ctx, uint64_t h);
int sa_mem_map(uintptr_t ctx, uint64_t p, uint64_t size, uint64_t offset, uint64_t h);
int sa_mem_unmap(uintptr_t ctx, uint64_t p, uint64_t size);
int sa_mem_set_access(uintptr_t ctx, uint64_t p, uint64_t size, int dev);
sa_ret sa_mem_get_allocation_granularity(uintptr_t ctx, int dev, int option, int handle_types);

// The managed-memory wing: cuMemPrefetchAsync_v2 (flags 0) and
// cuMemAdvise_v2 with the location as (type, id); pools of a given
// allocation type and location; stream-ordered allocations from a pool
// located on the host, whose addresses cross as C pointers, never as Go's.
int sa_mem_prefetch_async(uintptr_t ctx, uint64_t p, uint64_t n, int loc_type, int loc_id, uintptr_t s);
int sa_mem_advise(uintptr_t ctx, uint64_t p, uint64_t n, int advice, int loc_type, int loc_id);
sa_ret sa_mem_pool_create_at(uintptr_t ctx, int alloc_type, int loc_type, int loc_id);
sa_ptr sa_mem_alloc_host_from_pool_async(uintptr_t ctx, uint64_t size, uintptr_t pool, uintptr_t s);
int sa_mem_free_host_async(uintptr_t ctx, void *p, uintptr_t s);

// The peer and IPC wing: cuDeviceCanAccessPeer, cuCtxEnablePeerAccess,
// cuMemcpyPeerAsync, cuMemPoolSetAccess/GetAccess, pool and pointer
// export/import, IPC event handles and the legacy cuIpc*MemHandle calls.
// 64-byte handles are copied from or to the caller's buffer (borrowed for
// the call).
sa_ret sa_device_can_access_peer(int dev, int peer);
int sa_ctx_enable_peer_access(uintptr_t ctx, uintptr_t peer);
int sa_memcpy_peer_async(uintptr_t ctx, uint64_t dst, uintptr_t dst_ctx, uint64_t src, uintptr_t src_ctx, uint64_t n, uintptr_t s);
int sa_mem_pool_set_access(uintptr_t ctx, uintptr_t pool, int dev, int flags);
sa_ret sa_mem_pool_get_access(uintptr_t ctx, uintptr_t pool, int dev);
sa_ret sa_mem_pool_export_fd(uintptr_t ctx, uintptr_t pool);
int sa_mem_pool_export_fabric(uintptr_t ctx, uintptr_t pool, void *out64);
sa_ret sa_mem_pool_import_fd(uintptr_t ctx, int fd);
sa_ret sa_mem_pool_import_fabric(uintptr_t ctx, const void *in64);
int sa_mem_pool_export_pointer(uintptr_t ctx, uint64_t p, void *out64);
sa_ret sa_mem_pool_import_pointer(uintptr_t ctx, uintptr_t pool, const void *in64);
int sa_ipc_get_event_handle(uintptr_t ctx, uintptr_t e, void *out64);
sa_ret sa_ipc_open_event_handle(uintptr_t ctx, const void *in64);
int sa_ipc_get_mem_handle(uintptr_t ctx, uint64_t p, void *out64);
sa_ret sa_ipc_open_mem_handle(uintptr_t ctx, const void *in64);
int sa_ipc_close_mem_handle(uintptr_t ctx, uint64_t p);

#endif
