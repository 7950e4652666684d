//go:build cgo

// shim.c loads the CUDA driver with dlopen and wraps the entry points that
// package cuda uses. See shim.h for the conventions.
//
// The few CUDA types needed are declared here by their ABI (handles are
// pointers, CUdevice is an int, CUdeviceptr a 64-bit integer, CUresult an
// int enum); no CUDA header is used. The driver exports several versions
// of some entry points; the table below names the one whose ABI matches
// the prototype here (the _v2 forms take 64-bit sizes), and for a few whose
// older form has the same signature it names that as a fallback.
//
// Invariant: after sa_load returned 0, every function pointer is either
// resolved or NULL, and never changes again; wrappers test for NULL
// before each call, so a missing entry point is an error, never a crash.

#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmemoryPool;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;

// CUmemPoolProps as of CUDA 12.2 and 13 (88 bytes on 64-bit): location is
// {CUmemLocationType type; int id}.
typedef struct {
	int allocType;
	int handleTypes;
	int locationType;
	int locationId;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} sa_pool_props;

enum {
	SA_MEM_ALLOCATION_TYPE_PINNED = 1,
	SA_MEM_HANDLE_TYPE_NONE = 0,
	SA_MEM_HANDLE_TYPE_POSIX_FD = 0x1, // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	SA_MEM_HANDLE_TYPE_FABRIC = 0x8,   // CU_MEM_HANDLE_TYPE_FABRIC
	SA_MEM_LOCATION_TYPE_DEVICE = 1,
};

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuGetErrorName)(CUresult, const char **);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
static CUresult (*p_cuDeviceGetMemPool)(CUmemoryPool *, CUdevice);
static CUresult (*p_cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuCtxCreate)(CUcontext *, unsigned, CUdevice);
static CUresult (*p_cuCtxDestroy)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuMemGetInfo)(size_t *, size_t *);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamQuery)(CUstream);
static CUresult (*p_cuStreamWaitEvent)(CUstream, CUevent, unsigned);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventQuery)(CUevent);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventElapsedTime)(float *, CUevent, CUevent);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
static CUresult (*p_cuMemFreeAsync)(CUdeviceptr, CUstream);
static CUresult (*p_cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static CUresult (*p_cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
static CUresult (*p_cuMemAllocHost)(void **, size_t);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemPoolCreate)(CUmemoryPool *, const sa_pool_props *);
static CUresult (*p_cuMemPoolDestroy)(CUmemoryPool);
static CUresult (*p_cuMemPoolGetAttribute)(CUmemoryPool, int, void *);
static CUresult (*p_cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
static CUresult (*p_cuMemPoolTrimTo)(CUmemoryPool, size_t);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
// Foreign-handle wing: which context a stream or context belongs to.
static CUresult (*p_cuStreamGetCtx)(CUstream, CUcontext *);
static CUresult (*p_cuCtxGetDevice)(CUdevice *);

// The capture wing: stream capture, graphs, graph memory.
typedef void *CUgraph;
typedef void *CUgraphExec;
static CUresult (*p_cuStreamBeginCapture)(CUstream, int);
static CUresult (*p_cuStreamEndCapture)(CUstream, CUgraph *);
static CUresult (*p_cuStreamIsCapturing)(CUstream, int *);
// cuStreamGetCaptureInfo: _v3 (CUDA 12.3 on) adds the edge data output
// before the count; _v2 is the form of older drivers. Only status and ID
// are read; the other outputs are optional and passed as NULL.
static CUresult (*p_cuStreamGetCaptureInfo_v3)(CUstream, int *, uint64_t *, CUgraph *,
                                               const void **, const void **, size_t *);
static CUresult (*p_cuStreamGetCaptureInfo_v2)(CUstream, int *, uint64_t *, CUgraph *,
                                               const void **, size_t *);
static CUresult (*p_cuGraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*p_cuGraphLaunch)(CUgraphExec, CUstream);
static CUresult (*p_cuGraphExecDestroy)(CUgraphExec);
static CUresult (*p_cuGraphDestroy)(CUgraph);
static CUresult (*p_cuDeviceGraphMemTrim)(CUdevice);
static CUresult (*p_cuDeviceGetGraphMemAttribute)(CUdevice, int, void *);
static CUresult (*p_cuDeviceSetGraphMemAttribute)(CUdevice, int, void *);
static CUresult (*p_cuThreadExchangeStreamCaptureMode)(int *);

// The virtual-memory wing: address reservations, physical allocations and
// their mappings. CUmemAllocationProp and CUmemAccessDesc by their ABI
// (cuda.h 11.2 on): location is {CUmemLocationType type; int id}; the
// property's allocFlags are compressionType, gpuDirectRDMACapable (bytes),
// usage (a short) and 4 reserved bytes, 32 bytes in all on 64-bit.
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
	int type;                 // CUmemAllocationType
	int requestedHandleTypes; // CUmemAllocationHandleType
	int locationType;         // CUmemLocationType
	int locationId;
	void *win32HandleMetaData;
	unsigned char compressionType;
	unsigned char gpuDirectRDMACapable;
	unsigned short usage;
	unsigned char reserved[4];
} sa_alloc_prop;
typedef struct {
	int locationType;
	int locationId;
	int flags; // CUmemAccess_flags
} sa_access_desc;
enum { SA_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
static CUresult (*p_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*p_cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*p_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const sa_alloc_prop *, unsigned long long);
static CUresult (*p_cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*p_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*p_cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*p_cuMemSetAccess)(CUdeviceptr, size_t, const sa_access_desc *, size_t);
static CUresult (*p_cuMemGetAllocationGranularity)(size_t *, const sa_alloc_prop *, int);
// Sharing a physical allocation: a POSIX descriptor is written to an int
// (export) or passed as the int itself in a void * (import); a fabric
// handle is a 64-byte CUmemFabricHandle written to or read from memory.
static CUresult (*p_cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
static CUresult (*p_cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);

// The managed-memory wing. CUmemLocation is {CUmemLocationType type; int
// id}, 8 bytes, passed by value. cuMemPrefetchAsync_v2 and cuMemAdvise_v2
// (CUDA 12.2 on; the only forms CUDA 13's cuda.h names) take a location;
// the older exports take a device ordinal and are not used.
typedef struct {
	int type;
	int id;
} sa_mem_location;
enum {
	SA_MEM_ALLOCATION_TYPE_MANAGED = 2,
	SA_MEM_LOCATION_TYPE_NONE = 0,
	SA_MEM_LOCATION_TYPE_HOST = 2,
	SA_MEM_LOCATION_TYPE_HOST_NUMA = 3,
};
static CUresult (*p_cuMemPrefetchAsync)(CUdeviceptr, size_t, sa_mem_location, unsigned, CUstream);
static CUresult (*p_cuMemAdvise)(CUdeviceptr, size_t, int, sa_mem_location);

// The peer and IPC wing. CUmemPoolPtrExportData, CUipcEventHandle and
// CUipcMemHandle are opaque 64-byte structs (CU_IPC_HANDLE_SIZE); the
// handles are passed by value to the open calls, as cuda.h declares them.
// A POSIX file descriptor handle travels as the int itself in a void *
// (import) or is written to an int (export); a fabric handle is a 64-byte
// CUmemFabricHandle written to or read from memory.
typedef struct {
	unsigned char reserved[64];
} sa_opaque64;
typedef struct {
	int locationType;
	int locationId;
} sa_location;
static CUresult (*p_cuDeviceCanAccessPeer)(int *, CUdevice, CUdevice);
static CUresult (*p_cuCtxEnablePeerAccess)(CUcontext, unsigned);
static CUresult (*p_cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
static CUresult (*p_cuMemPoolSetAccess)(CUmemoryPool, const sa_access_desc *, size_t);
static CUresult (*p_cuMemPoolGetAccess)(int *, CUmemoryPool, sa_location *);
static CUresult (*p_cuMemPoolExportToShareableHandle)(void *, CUmemoryPool, int, unsigned long long);
static CUresult (*p_cuMemPoolImportFromShareableHandle)(CUmemoryPool *, void *, int, unsigned long long);
static CUresult (*p_cuMemPoolExportPointer)(sa_opaque64 *, CUdeviceptr);
static CUresult (*p_cuMemPoolImportPointer)(CUdeviceptr *, CUmemoryPool, sa_opaque64 *);
static CUresult (*p_cuIpcGetEventHandle)(sa_opaque64 *, CUevent);
static CUresult (*p_cuIpcOpenEventHandle)(CUevent *, sa_opaque64);
static CUresult (*p_cuIpcGetMemHandle)(sa_opaque64 *, CUdeviceptr);
static CUresult (*p_cuIpcOpenMemHandle)(CUdeviceptr *, sa_opaque64, unsigned);
static CUresult (*p_cuIpcCloseMemHandle)(CUdeviceptr);

// One entry point: its name as the Go side knows it (the unversioned API
// name), the exported symbols to try in order, where to store it, and
// whether loading fails without it.
typedef struct {
	const char *api;
	const char *sym[2];
	void **slot;
	int required;
} sa_entry;

#define E(api, s1, s2, req) {#api, {s1, s2}, (void **)&p_##api, req}
static const sa_entry entries[] = {
	E(cuInit, "cuInit", NULL, 1),
	E(cuDriverGetVersion, "cuDriverGetVersion", NULL, 1),
	E(cuGetErrorName, "cuGetErrorName", NULL, 0),
	E(cuDeviceGetCount, "cuDeviceGetCount", NULL, 0),
	E(cuDeviceGet, "cuDeviceGet", NULL, 0),
	E(cuDeviceGetName, "cuDeviceGetName", NULL, 0),
	E(cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL, 0),
	E(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL, 0),
	E(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", NULL, 0),
	E(cuDeviceGetMemPool, "cuDeviceGetMemPool", NULL, 0),
	E(cuDeviceSetMemPool, "cuDeviceSetMemPool", NULL, 0),
	E(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL, 0),
	E(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 0),
	E(cuCtxSetCurrent, "cuCtxSetCurrent", NULL, 0),
	E(cuCtxGetCurrent, "cuCtxGetCurrent", NULL, 0),
	E(cuCtxCreate, "cuCtxCreate_v2", NULL, 0),
	E(cuCtxDestroy, "cuCtxDestroy_v2", NULL, 0),
	E(cuCtxSynchronize, "cuCtxSynchronize", NULL, 0),
	E(cuMemGetInfo, "cuMemGetInfo_v2", NULL, 0),
	E(cuStreamCreate, "cuStreamCreate", NULL, 0),
	E(cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy", 0),
	E(cuStreamSynchronize, "cuStreamSynchronize", NULL, 0),
	E(cuStreamQuery, "cuStreamQuery", NULL, 0),
	E(cuStreamWaitEvent, "cuStreamWaitEvent", NULL, 0),
	E(cuEventCreate, "cuEventCreate", NULL, 0),
	E(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy", 0),
	E(cuEventRecord, "cuEventRecord", NULL, 0),
	E(cuEventQuery, "cuEventQuery", NULL, 0),
	E(cuEventSynchronize, "cuEventSynchronize", NULL, 0),
	E(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", 0),
	E(cuMemAlloc, "cuMemAlloc_v2", NULL, 0),
	E(cuMemFree, "cuMemFree_v2", NULL, 0),
	E(cuMemAllocAsync, "cuMemAllocAsync", NULL, 0),
	E(cuMemFreeAsync, "cuMemFreeAsync", NULL, 0),
	E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", NULL, 0),
	E(cuMemAllocManaged, "cuMemAllocManaged", NULL, 0),
	E(cuMemAllocHost, "cuMemAllocHost_v2", NULL, 0),
	E(cuMemFreeHost, "cuMemFreeHost", NULL, 0),
	E(cuMemsetD8Async, "cuMemsetD8Async", NULL, 0),
	E(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL, 0),
	E(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL, 0),
	E(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL, 0),
	E(cuMemPoolCreate, "cuMemPoolCreate", NULL, 0),
	E(cuMemPoolDestroy, "cuMemPoolDestroy", NULL, 0),
	E(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", NULL, 0),
	E(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", NULL, 0),
	E(cuMemPoolTrimTo, "cuMemPoolTrimTo", NULL, 0),
	E(cuModuleLoadData, "cuModuleLoadData", NULL, 0),
	E(cuModuleUnload, "cuModuleUnload", NULL, 0),
	E(cuModuleGetFunction, "cuModuleGetFunction", NULL, 0),
	E(cuFuncGetParamInfo, "cuFuncGetParamInfo", NULL, 0),
	E(cuLaunchKernel, "cuLaunchKernel", NULL, 0),
	// The capture wing.
	E(cuStreamBeginCapture, "cuStreamBeginCapture_v2", NULL, 0),
	E(cuStreamEndCapture, "cuStreamEndCapture", NULL, 0),
	E(cuStreamIsCapturing, "cuStreamIsCapturing", NULL, 0),
	E(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo_v3", NULL, 0),
	E(cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo_v2", NULL, 0),
	E(cuGraphInstantiate, "cuGraphInstantiateWithFlags", NULL, 0),
	E(cuGraphLaunch, "cuGraphLaunch", NULL, 0),
	E(cuGraphExecDestroy, "cuGraphExecDestroy", NULL, 0),
	E(cuGraphDestroy, "cuGraphDestroy", NULL, 0),
	E(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", NULL, 0),
	E(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", NULL, 0),
	E(cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute", NULL, 0),
	E(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", NULL, 0),
	// Foreign-handle wing.
	E(cuStreamGetCtx, "cuStreamGetCtx", NULL, 0),
	E(cuCtxGetDevice, "cuCtxGetDevice", NULL, 0),
	// The virtual-memory wing.
	E(cuMemAddressReserve, "cuMemAddressReserve", NULL, 0),
	E(cuMemAddressFree, "cuMemAddressFree", NULL, 0),
	E(cuMemCreate, "cuMemCreate", NULL, 0),
	E(cuMemRelease, "cuMemRelease", NULL, 0),
	E(cuMemMap, "cuMemMap", NULL, 0),
	E(cuMemUnmap, "cuMemUnmap", NULL, 0),
	E(cuMemSetAccess, "cuMemSetAccess", NULL, 0),
	E(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", NULL, 0),
	E(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", NULL, 0),
	E(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", NULL, 0),
	// The managed-memory wing.
	E(cuMemPrefetchAsync, "cuMemPrefetchAsync_v2", NULL, 0),
	E(cuMemAdvise, "cuMemAdvise_v2", NULL, 0),
	// The peer and IPC wing.
	E(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", NULL, 0),
	E(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", NULL, 0),
	E(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", NULL, 0),
	E(cuMemPoolSetAccess, "cuMemPoolSetAccess", NULL, 0),
	E(cuMemPoolGetAccess, "cuMemPoolGetAccess", NULL, 0),
	E(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle", NULL, 0),
	E(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle", NULL, 0),
	E(cuMemPoolExportPointer, "cuMemPoolExportPointer", NULL, 0),
	E(cuMemPoolImportPointer, "cuMemPoolImportPointer", NULL, 0),
	E(cuIpcGetEventHandle, "cuIpcGetEventHandle", NULL, 0),
	E(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", NULL, 0),
	E(cuIpcGetMemHandle, "cuIpcGetMemHandle", NULL, 0),
	E(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle", 0),
	E(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", NULL, 0),
};
#undef E

static char load_error[512];

int sa_load(const char *path) {
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *why = dlerror();
		snprintf(load_error, sizeof load_error, "dlopen %s: %s", path, why ? why : "unknown error");
		return 1;
	}
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		const sa_entry *e = &entries[i];
		void *fp = NULL;
		for (int k = 0; k < 2 && fp == NULL && e->sym[k] != NULL; k++) {
			fp = dlsym(lib, e->sym[k]);
		}
		if (fp == NULL && e->required) {
			snprintf(load_error, sizeof load_error, "%s has no %s", path, e->sym[0]);
			// Leave every slot NULL, so that nothing can call into a
			// half-loaded driver.
			for (size_t j = 0; j < sizeof entries / sizeof entries[0]; j++) {
				*entries[j].slot = NULL;
			}
			dlclose(lib);
			return 2;
		}
		*e->slot = fp;
	}
	// The library stays open for the life of the process.
	return 0;
}

const char *sa_load_error(void) { return load_error; }

int sa_has(const char *name) {
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		if (strcmp(entries[i].api, name) == 0) {
			return *entries[i].slot != NULL;
		}
	}
	return -1;
}

// NEED returns SA_NOT_SUPPORTED from the enclosing function (of result
// type int) when an entry point is missing.
#define NEED(fn)                          \
	do {                                  \
		if (p_##fn == NULL) {             \
			return SA_NOT_SUPPORTED;      \
		}                                 \
	} while (0)
// NEEDR is NEED for functions returning a struct with an r field.
#define NEEDR(T, fn)                      \
	do {                                  \
		if (p_##fn == NULL) {             \
			T bad_ = {0};                 \
			bad_.r = SA_NOT_SUPPORTED;    \
			return bad_;                  \
		}                                 \
	} while (0)

// sa_bind makes ctx current on this thread unless it already is. The
// check asks the driver (a thread-local read there) rather than a cache
// of our own, so that code outside this package that changes the current
// context of a thread cannot make us run on the wrong one.
static inline CUresult sa_bind(uintptr_t ctx) {
	CUcontext cur = NULL;
	if (p_cuCtxGetCurrent == NULL || p_cuCtxSetCurrent == NULL) {
		return SA_NOT_SUPPORTED;
	}
	if (p_cuCtxGetCurrent(&cur) == 0 && cur == (CUcontext)ctx) {
		return 0;
	}
	return p_cuCtxSetCurrent((CUcontext)ctx);
}

#define BIND(ctx)                         \
	do {                                  \
		CUresult b_ = sa_bind(ctx);       \
		if (b_ != 0) {                    \
			return b_;                    \
		}                                 \
	} while (0)
#define BINDR(T, ctx)                     \
	do {                                  \
		CUresult b_ = sa_bind(ctx);       \
		if (b_ != 0) {                    \
			T bad_ = {0};                 \
			bad_.r = b_;                  \
			return bad_;                  \
		}                                 \
	} while (0)

// --- Init, versions, errors -------------------------------------------

int sa_init(void) {
	NEED(cuInit);
	return p_cuInit(0);
}

sa_ret sa_driver_version(void) {
	NEEDR(sa_ret, cuDriverGetVersion);
	int v = 0;
	sa_ret out = {p_cuDriverGetVersion(&v), 0};
	out.v = (uint64_t)(int64_t)v;
	return out;
}

int sa_get_error_name(int r, char *buf, int len) {
	NEED(cuGetErrorName);
	const char *s = NULL;
	CUresult res = p_cuGetErrorName(r, &s);
	if (res != 0) {
		return res;
	}
	if (len > 0) {
		snprintf(buf, (size_t)len, "%s", s ? s : "");
	}
	return 0;
}

// --- Devices ----------------------------------------------------------

sa_ret sa_device_count(void) {
	NEEDR(sa_ret, cuDeviceGetCount);
	int n = 0;
	sa_ret out = {p_cuDeviceGetCount(&n), 0};
	out.v = (uint64_t)n;
	return out;
}

sa_ret sa_device_get(int ordinal) {
	NEEDR(sa_ret, cuDeviceGet);
	CUdevice d = 0;
	sa_ret out = {p_cuDeviceGet(&d, ordinal), 0};
	out.v = (uint64_t)d;
	return out;
}

int sa_device_name(int dev, char *buf, int len) {
	NEED(cuDeviceGetName);
	return p_cuDeviceGetName(buf, len, dev);
}

sa_ret sa_device_total_mem(int dev) {
	NEEDR(sa_ret, cuDeviceTotalMem);
	size_t n = 0;
	sa_ret out = {p_cuDeviceTotalMem(&n, dev), 0};
	out.v = n;
	return out;
}

sa_ret sa_device_attribute(int dev, int attr) {
	NEEDR(sa_ret, cuDeviceGetAttribute);
	int v = 0;
	sa_ret out = {p_cuDeviceGetAttribute(&v, attr, dev), 0};
	out.v = (uint64_t)(int64_t)v;
	return out;
}

sa_ret sa_device_default_mem_pool(int dev) {
	NEEDR(sa_ret, cuDeviceGetDefaultMemPool);
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuDeviceGetDefaultMemPool(&p, dev), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

sa_ret sa_device_mem_pool(int dev) {
	NEEDR(sa_ret, cuDeviceGetMemPool);
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuDeviceGetMemPool(&p, dev), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

int sa_device_set_mem_pool(int dev, uintptr_t pool) {
	NEED(cuDeviceSetMemPool);
	return p_cuDeviceSetMemPool(dev, (CUmemoryPool)pool);
}

// --- Contexts ---------------------------------------------------------

sa_ret sa_primary_ctx_retain(int dev) {
	NEEDR(sa_ret, cuDevicePrimaryCtxRetain);
	CUcontext c = NULL;
	sa_ret out = {p_cuDevicePrimaryCtxRetain(&c, dev), 0};
	out.v = (uint64_t)(uintptr_t)c;
	return out;
}

int sa_primary_ctx_release(int dev) {
	NEED(cuDevicePrimaryCtxRelease);
	return p_cuDevicePrimaryCtxRelease(dev);
}

int sa_ctx_set_current(uintptr_t ctx) {
	NEED(cuCtxSetCurrent);
	return p_cuCtxSetCurrent((CUcontext)ctx);
}

sa_ret sa_ctx_get_current(void) {
	NEEDR(sa_ret, cuCtxGetCurrent);
	CUcontext c = NULL;
	sa_ret out = {p_cuCtxGetCurrent(&c), 0};
	out.v = (uint64_t)(uintptr_t)c;
	return out;
}

sa_ret sa_ctx_create(int dev) {
	NEEDR(sa_ret, cuCtxCreate);
	NEEDR(sa_ret, cuCtxSetCurrent);
	NEEDR(sa_ret, cuCtxGetCurrent);
	// cuCtxCreate pushes the new context on this thread; put back what
	// was current so the thread's state is as before the call.
	CUcontext prev = NULL;
	p_cuCtxGetCurrent(&prev);
	CUcontext c = NULL;
	sa_ret out = {p_cuCtxCreate(&c, 0, dev), 0};
	out.v = (uint64_t)(uintptr_t)c;
	p_cuCtxSetCurrent(prev);
	return out;
}

int sa_ctx_destroy(uintptr_t ctx) {
	NEED(cuCtxDestroy);
	return p_cuCtxDestroy((CUcontext)ctx);
}

int sa_ctx_synchronize(uintptr_t ctx) {
	NEED(cuCtxSynchronize);
	BIND(ctx);
	return p_cuCtxSynchronize();
}

sa_meminfo sa_mem_get_info(uintptr_t ctx) {
	NEEDR(sa_meminfo, cuMemGetInfo);
	BINDR(sa_meminfo, ctx);
	size_t f = 0, t = 0;
	sa_meminfo out = {p_cuMemGetInfo(&f, &t), 0, 0};
	out.free_bytes = f;
	out.total_bytes = t;
	return out;
}

// --- Streams and events -----------------------------------------------

sa_ret sa_stream_create(uintptr_t ctx, unsigned flags) {
	NEEDR(sa_ret, cuStreamCreate);
	BINDR(sa_ret, ctx);
	CUstream s = NULL;
	sa_ret out = {p_cuStreamCreate(&s, flags), 0};
	out.v = (uint64_t)(uintptr_t)s;
	return out;
}

int sa_stream_destroy(uintptr_t ctx, uintptr_t s) {
	NEED(cuStreamDestroy);
	BIND(ctx);
	return p_cuStreamDestroy((CUstream)s);
}

int sa_stream_synchronize(uintptr_t ctx, uintptr_t s) {
	NEED(cuStreamSynchronize);
	BIND(ctx);
	return p_cuStreamSynchronize((CUstream)s);
}

int sa_stream_query(uintptr_t ctx, uintptr_t s) {
	NEED(cuStreamQuery);
	BIND(ctx);
	return p_cuStreamQuery((CUstream)s);
}

int sa_stream_wait_event(uintptr_t ctx, uintptr_t s, uintptr_t e) {
	NEED(cuStreamWaitEvent);
	BIND(ctx);
	return p_cuStreamWaitEvent((CUstream)s, (CUevent)e, 0);
}

sa_ret sa_event_create(uintptr_t ctx, unsigned flags) {
	NEEDR(sa_ret, cuEventCreate);
	BINDR(sa_ret, ctx);
	CUevent e = NULL;
	sa_ret out = {p_cuEventCreate(&e, flags), 0};
	out.v = (uint64_t)(uintptr_t)e;
	return out;
}

int sa_event_destroy(uintptr_t ctx, uintptr_t e) {
	NEED(cuEventDestroy);
	BIND(ctx);
	return p_cuEventDestroy((CUevent)e);
}

int sa_event_record(uintptr_t ctx, uintptr_t e, uintptr_t s) {
	NEED(cuEventRecord);
	BIND(ctx);
	return p_cuEventRecord((CUevent)e, (CUstream)s);
}

int sa_event_query(uintptr_t ctx, uintptr_t e) {
	NEED(cuEventQuery);
	BIND(ctx);
	return p_cuEventQuery((CUevent)e);
}

int sa_event_synchronize(uintptr_t ctx, uintptr_t e) {
	NEED(cuEventSynchronize);
	BIND(ctx);
	return p_cuEventSynchronize((CUevent)e);
}

sa_elapsed sa_event_elapsed(uintptr_t ctx, uintptr_t start, uintptr_t end) {
	NEEDR(sa_elapsed, cuEventElapsedTime);
	BINDR(sa_elapsed, ctx);
	float ms = 0;
	sa_elapsed out = {p_cuEventElapsedTime(&ms, (CUevent)start, (CUevent)end), 0};
	out.ms = ms;
	return out;
}

// --- Memory -----------------------------------------------------------

sa_ret sa_mem_alloc(uintptr_t ctx, uint64_t size) {
	NEEDR(sa_ret, cuMemAlloc);
	BINDR(sa_ret, ctx);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemAlloc(&p, (size_t)size), 0};
	out.v = p;
	return out;
}

int sa_mem_free(uintptr_t ctx, uint64_t p) {
	NEED(cuMemFree);
	BIND(ctx);
	return p_cuMemFree((CUdeviceptr)p);
}

sa_ret sa_mem_alloc_async(uintptr_t ctx, uint64_t size, uintptr_t s) {
	NEEDR(sa_ret, cuMemAllocAsync);
	BINDR(sa_ret, ctx);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemAllocAsync(&p, (size_t)size, (CUstream)s), 0};
	out.v = p;
	return out;
}

int sa_mem_free_async(uintptr_t ctx, uint64_t p, uintptr_t s) {
	NEED(cuMemFreeAsync);
	BIND(ctx);
	return p_cuMemFreeAsync((CUdeviceptr)p, (CUstream)s);
}

sa_ret sa_mem_alloc_from_pool_async(uintptr_t ctx, uint64_t size, uintptr_t pool, uintptr_t s) {
	NEEDR(sa_ret, cuMemAllocFromPoolAsync);
	BINDR(sa_ret, ctx);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemAllocFromPoolAsync(&p, (size_t)size, (CUmemoryPool)pool, (CUstream)s), 0};
	out.v = p;
	return out;
}

sa_ret sa_mem_alloc_managed(uintptr_t ctx, uint64_t size, unsigned flags) {
	NEEDR(sa_ret, cuMemAllocManaged);
	BINDR(sa_ret, ctx);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemAllocManaged(&p, (size_t)size, flags), 0};
	out.v = p;
	return out;
}

sa_ptr sa_mem_alloc_host(uintptr_t ctx, uint64_t size) {
	NEEDR(sa_ptr, cuMemAllocHost);
	BINDR(sa_ptr, ctx);
	void *p = NULL;
	sa_ptr out = {p_cuMemAllocHost(&p, (size_t)size), NULL};
	out.p = p;
	return out;
}

int sa_mem_free_host(uintptr_t ctx, void *p) {
	NEED(cuMemFreeHost);
	BIND(ctx);
	return p_cuMemFreeHost(p);
}

int sa_memset_d8_async(uintptr_t ctx, uint64_t p, unsigned char v, uint64_t n, uintptr_t s) {
	NEED(cuMemsetD8Async);
	BIND(ctx);
	return p_cuMemsetD8Async((CUdeviceptr)p, v, (size_t)n, (CUstream)s);
}

int sa_memcpy_htod_async(uintptr_t ctx, uint64_t dst, const void *src, uint64_t n, uintptr_t s) {
	NEED(cuMemcpyHtoDAsync);
	BIND(ctx);
	return p_cuMemcpyHtoDAsync((CUdeviceptr)dst, src, (size_t)n, (CUstream)s);
}

int sa_memcpy_dtoh_async(uintptr_t ctx, void *dst, uint64_t src, uint64_t n, uintptr_t s) {
	NEED(cuMemcpyDtoHAsync);
	BIND(ctx);
	return p_cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, (size_t)n, (CUstream)s);
}

int sa_memcpy_dtod_async(uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t n, uintptr_t s) {
	NEED(cuMemcpyDtoDAsync);
	BIND(ctx);
	return p_cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)n, (CUstream)s);
}

// --- Memory pools -----------------------------------------------------

sa_ret sa_mem_pool_create(uintptr_t ctx, int dev, int handle_types) {
	NEEDR(sa_ret, cuMemPoolCreate);
	BINDR(sa_ret, ctx);
	sa_pool_props props;
	memset(&props, 0, sizeof props);
	props.allocType = SA_MEM_ALLOCATION_TYPE_PINNED;
	props.handleTypes = handle_types;
	props.locationType = SA_MEM_LOCATION_TYPE_DEVICE;
	props.locationId = dev;
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuMemPoolCreate(&p, &props), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

int sa_mem_pool_destroy(uintptr_t ctx, uintptr_t pool) {
	NEED(cuMemPoolDestroy);
	BIND(ctx);
	return p_cuMemPoolDestroy((CUmemoryPool)pool);
}

// Attributes 1 to 3 (the reuse policies) are ints; the others are
// cuuint64_t. Anything else is passed with a 64-bit buffer and left to
// the driver to refuse.
static int sa_attr_is_int(int attr) { return attr >= 1 && attr <= 3; }

sa_ret sa_mem_pool_get_attribute(uintptr_t ctx, uintptr_t pool, int attr) {
	NEEDR(sa_ret, cuMemPoolGetAttribute);
	BINDR(sa_ret, ctx);
	sa_ret out = {0, 0};
	if (sa_attr_is_int(attr)) {
		int v = 0;
		out.r = p_cuMemPoolGetAttribute((CUmemoryPool)pool, attr, &v);
		out.v = (uint64_t)(int64_t)v;
	} else {
		uint64_t v = 0;
		out.r = p_cuMemPoolGetAttribute((CUmemoryPool)pool, attr, &v);
		out.v = v;
	}
	return out;
}

int sa_mem_pool_set_attribute(uintptr_t ctx, uintptr_t pool, int attr, uint64_t v) {
	NEED(cuMemPoolSetAttribute);
	BIND(ctx);
	if (sa_attr_is_int(attr)) {
		int iv = (int)v;
		return p_cuMemPoolSetAttribute((CUmemoryPool)pool, attr, &iv);
	}
	return p_cuMemPoolSetAttribute((CUmemoryPool)pool, attr, &v);
}

int sa_mem_pool_trim_to(uintptr_t ctx, uintptr_t pool, uint64_t keep) {
	NEED(cuMemPoolTrimTo);
	BIND(ctx);
	return p_cuMemPoolTrimTo((CUmemoryPool)pool, (size_t)keep);
}

// --- Modules and launches ---------------------------------------------

sa_ret sa_module_load_data(uintptr_t ctx, const char *image) {
	NEEDR(sa_ret, cuModuleLoadData);
	BINDR(sa_ret, ctx);
	CUmodule m = NULL;
	sa_ret out = {p_cuModuleLoadData(&m, image), 0};
	out.v = (uint64_t)(uintptr_t)m;
	return out;
}

int sa_module_unload(uintptr_t ctx, uintptr_t mod) {
	NEED(cuModuleUnload);
	BIND(ctx);
	return p_cuModuleUnload((CUmodule)mod);
}

sa_ret sa_module_get_function(uintptr_t ctx, uintptr_t mod, const char *name) {
	NEEDR(sa_ret, cuModuleGetFunction);
	BINDR(sa_ret, ctx);
	CUfunction f = NULL;
	sa_ret out = {p_cuModuleGetFunction(&f, (CUmodule)mod, name), 0};
	out.v = (uint64_t)(uintptr_t)f;
	return out;
}

sa_param sa_func_param_info(uintptr_t ctx, uintptr_t f, uint64_t index) {
	NEEDR(sa_param, cuFuncGetParamInfo);
	BINDR(sa_param, ctx);
	size_t off = 0, size = 0;
	sa_param out = {p_cuFuncGetParamInfo((CUfunction)f, (size_t)index, &off, &size), 0, 0};
	out.offset = off;
	out.size = size;
	return out;
}

int sa_launch_kernel(uintptr_t ctx, uintptr_t f,
                     unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, uintptr_t s,
                     const void *vals, int nbytes, const uint32_t *offs, int n) {
	NEED(cuLaunchKernel);
	if (n < 0 || n > SA_MAX_PARAMS || nbytes < 0 || nbytes > SA_MAX_PARAM_BYTES) {
		return 1; // CUDA_ERROR_INVALID_VALUE
	}
	// 16-byte aligned so that every parameter, placed at an offset that
	// is a multiple of its size, is aligned for its type.
	_Alignas(16) unsigned char block[SA_MAX_PARAM_BYTES];
	void *params[SA_MAX_PARAMS + 1];
	if (nbytes > 0) {
		memcpy(block, vals, (size_t)nbytes);
	}
	for (int i = 0; i < n; i++) {
		if (offs[i] >= (uint32_t)nbytes) {
			return 1;
		}
		params[i] = block + offs[i];
	}
	// The driver reads as many parameters as the kernel declares. Should
	// a caller pass too few, the rest point at zeros rather than at
	// whatever the stack holds: a wrong launch, not a wild host read.
	static const unsigned char zeros[SA_MAX_PARAM_BYTES];
	for (int i = n; i <= SA_MAX_PARAMS; i++) {
		params[i] = (void *)zeros;
	}
	BIND(ctx);
	return p_cuLaunchKernel((CUfunction)f, gx, gy, gz, bx, by, bz, shared,
	                        (CUstream)s, params, NULL);
}

// --- CUDA graphs: the capture wing ---------------------------------------

int sa_stream_begin_capture(uintptr_t ctx, uintptr_t s, int mode) {
	NEED(cuStreamBeginCapture);
	BIND(ctx);
	return p_cuStreamBeginCapture((CUstream)s, mode);
}

sa_ret sa_stream_end_capture(uintptr_t ctx, uintptr_t s) {
	NEEDR(sa_ret, cuStreamEndCapture);
	BINDR(sa_ret, ctx);
	CUgraph g = NULL;
	sa_ret out = {p_cuStreamEndCapture((CUstream)s, &g), 0};
	out.v = (uint64_t)(uintptr_t)g;
	return out;
}

sa_ret sa_stream_is_capturing(uintptr_t ctx, uintptr_t s) {
	NEEDR(sa_ret, cuStreamIsCapturing);
	BINDR(sa_ret, ctx);
	int st = 0;
	sa_ret out = {p_cuStreamIsCapturing((CUstream)s, &st), 0};
	out.v = (uint64_t)st;
	return out;
}

sa_capture_info sa_stream_get_capture_info(uintptr_t ctx, uintptr_t s) {
	sa_capture_info out = {SA_NOT_SUPPORTED, 0, 0};
	if (p_cuStreamGetCaptureInfo_v3 == NULL && p_cuStreamGetCaptureInfo_v2 == NULL) {
		return out;
	}
	BINDR(sa_capture_info, ctx);
	int st = 0;
	uint64_t id = 0;
	if (p_cuStreamGetCaptureInfo_v3 != NULL) {
		out.r = p_cuStreamGetCaptureInfo_v3((CUstream)s, &st, &id, NULL, NULL, NULL, NULL);
	} else {
		out.r = p_cuStreamGetCaptureInfo_v2((CUstream)s, &st, &id, NULL, NULL, NULL);
	}
	out.status = st;
	out.id = id;
	return out;
}

sa_ret sa_graph_instantiate(uintptr_t ctx, uintptr_t g, uint64_t flags) {
	NEEDR(sa_ret, cuGraphInstantiate);
	BINDR(sa_ret, ctx);
	CUgraphExec x = NULL;
	sa_ret out = {p_cuGraphInstantiate(&x, (CUgraph)g, (unsigned long long)flags), 0};
	out.v = (uint64_t)(uintptr_t)x;
	return out;
}

int sa_graph_launch(uintptr_t ctx, uintptr_t x, uintptr_t s) {
	NEED(cuGraphLaunch);
	BIND(ctx);
	return p_cuGraphLaunch((CUgraphExec)x, (CUstream)s);
}

int sa_graph_exec_destroy(uintptr_t ctx, uintptr_t x) {
	NEED(cuGraphExecDestroy);
	BIND(ctx);
	return p_cuGraphExecDestroy((CUgraphExec)x);
}

int sa_graph_destroy(uintptr_t ctx, uintptr_t g) {
	NEED(cuGraphDestroy);
	BIND(ctx);
	return p_cuGraphDestroy((CUgraph)g);
}

int sa_device_graph_mem_trim(uintptr_t ctx, int dev) {
	NEED(cuDeviceGraphMemTrim);
	BIND(ctx);
	return p_cuDeviceGraphMemTrim(dev);
}

// The graph memory attributes are all cuuint64_t.
sa_ret sa_device_get_graph_mem_attribute(uintptr_t ctx, int dev, int attr) {
	NEEDR(sa_ret, cuDeviceGetGraphMemAttribute);
	BINDR(sa_ret, ctx);
	uint64_t v = 0;
	sa_ret out = {p_cuDeviceGetGraphMemAttribute(dev, attr, &v), 0};
	out.v = v;
	return out;
}

int sa_device_set_graph_mem_attribute(uintptr_t ctx, int dev, int attr, uint64_t v) {
	NEED(cuDeviceSetGraphMemAttribute);
	BIND(ctx);
	return p_cuDeviceSetGraphMemAttribute(dev, attr, &v);
}

sa_ret sa_thread_exchange_capture_mode(int mode) {
	NEEDR(sa_ret, cuThreadExchangeStreamCaptureMode);
	int m = mode;
	sa_ret out = {p_cuThreadExchangeStreamCaptureMode(&m), 0};
	out.v = (uint64_t)m;
	return out;
}

// --- Foreign-handle wing: contexts of streams and contexts ---------------

sa_ret sa_stream_get_ctx(uintptr_t ctx, uintptr_t s) {
	NEEDR(sa_ret, cuStreamGetCtx);
	// Bound first, so that the null and per-thread streams name this
	// context's.
	BINDR(sa_ret, ctx);
	CUcontext c = NULL;
	sa_ret out = {p_cuStreamGetCtx((CUstream)s, &c), 0};
	out.v = (uint64_t)(uintptr_t)c;
	return out;
}

sa_ret sa_ctx_get_device(uintptr_t ctx) {
	NEEDR(sa_ret, cuCtxGetDevice);
	NEEDR(sa_ret, cuCtxSetCurrent);
	NEEDR(sa_ret, cuCtxGetCurrent);
	// cuCtxGetDevice answers for the current context: make ctx current
	// for the question and put back what was current, so that the
	// thread's state (another library's context) is as before the call.
	CUcontext prev = NULL;
	p_cuCtxGetCurrent(&prev);
	CUresult r = p_cuCtxSetCurrent((CUcontext)ctx);
	if (r != 0) {
		sa_ret bad = {r, 0};
		return bad;
	}
	CUdevice d = 0;
	sa_ret out = {p_cuCtxGetDevice(&d), 0};
	out.v = (uint64_t)d;
	p_cuCtxSetCurrent(prev);
	return out;
}

// --- The virtual-memory wing ---------------------------------------------

// sa_device_prop is the property of pinned device memory on dev,
// exportable as the handle types given (SA_MEM_HANDLE_TYPE_NONE: none).
static sa_alloc_prop sa_device_prop(int dev, int handle_types) {
	sa_alloc_prop p;
	memset(&p, 0, sizeof p);
	p.type = SA_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = handle_types;
	p.locationType = SA_MEM_LOCATION_TYPE_DEVICE;
	p.locationId = dev;
	return p;
}

sa_ret sa_mem_address_reserve(uintptr_t ctx, uint64_t size, uint64_t alignment) {
	NEEDR(sa_ret, cuMemAddressReserve);
	BINDR(sa_ret, ctx);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemAddressReserve(&p, size, alignment, 0, 0), 0};
	out.v = p;
	return out;
}

int sa_mem_address_free(uintptr_t ctx, uint64_t p, uint64_t size) {
	NEED(cuMemAddressFree);
	BIND(ctx);
	return p_cuMemAddressFree(p, size);
}

sa_ret sa_mem_create(uintptr_t ctx, int dev, uint64_t size, int handle_types) {
	NEEDR(sa_ret, cuMemCreate);
	BINDR(sa_ret, ctx);
	sa_alloc_prop prop = sa_device_prop(dev, handle_types);
	CUmemGenericAllocationHandle h = 0;
	sa_ret out = {p_cuMemCreate(&h, size, &prop, 0), 0};
	out.v = h;
	return out;
}

int sa_mem_release(uintptr_t ctx, uint64_t h) {
	NEED(cuMemRelease);
	BIND(ctx);
	return p_cuMemRelease(h);
}

int sa_mem_map(uintptr_t ctx, uint64_t p, uint64_t size, uint64_t offset, uint64_t h) {
	NEED(cuMemMap);
	BIND(ctx);
	return p_cuMemMap(p, size, offset, h, 0);
}

int sa_mem_unmap(uintptr_t ctx, uint64_t p, uint64_t size) {
	NEED(cuMemUnmap);
	BIND(ctx);
	return p_cuMemUnmap(p, size);
}

int sa_mem_set_access(uintptr_t ctx, uint64_t p, uint64_t size, int dev) {
	NEED(cuMemSetAccess);
	BIND(ctx);
	sa_access_desc d = {SA_MEM_LOCATION_TYPE_DEVICE, dev, SA_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return p_cuMemSetAccess(p, size, &d, 1);
}

sa_ret sa_mem_get_allocation_granularity(uintptr_t ctx, int dev, int option, int handle_types) {
	NEEDR(sa_ret, cuMemGetAllocationGranularity);
	BINDR(sa_ret, ctx);
	sa_alloc_prop prop = sa_device_prop(dev, handle_types);
	size_t g = 0;
	sa_ret out = {p_cuMemGetAllocationGranularity(&g, &prop, option), 0};
	out.v = g;
	return out;
}

sa_ret sa_mem_export_fd(uintptr_t ctx, uint64_t h) {
	NEEDR(sa_ret, cuMemExportToShareableHandle);
	BINDR(sa_ret, ctx);
	int fd = -1;
	sa_ret out = {p_cuMemExportToShareableHandle(&fd, h, SA_MEM_HANDLE_TYPE_POSIX_FD, 0), 0};
	out.v = (uint64_t)(int64_t)fd;
	return out;
}

int sa_mem_export_fabric(uintptr_t ctx, uint64_t h, void *out64) {
	NEED(cuMemExportToShareableHandle);
	BIND(ctx);
	sa_opaque64 f;
	memset(&f, 0, sizeof f);
	CUresult r = p_cuMemExportToShareableHandle(&f, h, SA_MEM_HANDLE_TYPE_FABRIC, 0);
	memcpy(out64, &f, sizeof f);
	return r;
}

sa_ret sa_mem_import_fd(uintptr_t ctx, int fd) {
	NEEDR(sa_ret, cuMemImportFromShareableHandle);
	BINDR(sa_ret, ctx);
	CUmemGenericAllocationHandle h = 0;
	sa_ret out = {p_cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, SA_MEM_HANDLE_TYPE_POSIX_FD), 0};
	out.v = h;
	return out;
}

sa_ret sa_mem_import_fabric(uintptr_t ctx, const void *in64) {
	NEEDR(sa_ret, cuMemImportFromShareableHandle);
	BINDR(sa_ret, ctx);
	sa_opaque64 f;
	memcpy(&f, in64, sizeof f);
	CUmemGenericAllocationHandle h = 0;
	sa_ret out = {p_cuMemImportFromShareableHandle(&h, &f, SA_MEM_HANDLE_TYPE_FABRIC), 0};
	out.v = h;
	return out;
}

// --- The managed-memory wing ---------------------------------------------

int sa_mem_prefetch_async(uintptr_t ctx, uint64_t p, uint64_t n, int loc_type, int loc_id, uintptr_t s) {
	NEED(cuMemPrefetchAsync);
	BIND(ctx);
	sa_mem_location loc = {loc_type, loc_id};
	return p_cuMemPrefetchAsync((CUdeviceptr)p, (size_t)n, loc, 0, (CUstream)s);
}

int sa_mem_advise(uintptr_t ctx, uint64_t p, uint64_t n, int advice, int loc_type, int loc_id) {
	NEED(cuMemAdvise);
	BIND(ctx);
	sa_mem_location loc = {loc_type, loc_id};
	return p_cuMemAdvise((CUdeviceptr)p, (size_t)n, advice, loc);
}

// sa_mem_pool_create_at is cuMemPoolCreate of a pool of allocation type
// alloc_type (1 pinned, 2 managed) located at (loc_type, loc_id), with no
// exportable handles.
sa_ret sa_mem_pool_create_at(uintptr_t ctx, int alloc_type, int loc_type, int loc_id) {
	NEEDR(sa_ret, cuMemPoolCreate);
	BINDR(sa_ret, ctx);
	sa_pool_props props;
	memset(&props, 0, sizeof props);
	props.allocType = alloc_type;
	props.handleTypes = SA_MEM_HANDLE_TYPE_NONE;
	props.locationType = loc_type;
	props.locationId = loc_id;
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuMemPoolCreate(&p, &props), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

// sa_mem_alloc_host_from_pool_async is cuMemAllocFromPoolAsync from a pool
// located on the host: the address is host memory, returned as a C pointer.
sa_ptr sa_mem_alloc_host_from_pool_async(uintptr_t ctx, uint64_t size, uintptr_t pool, uintptr_t s) {
	NEEDR(sa_ptr, cuMemAllocFromPoolAsync);
	BINDR(sa_ptr, ctx);
	CUdeviceptr p = 0;
	sa_ptr out = {p_cuMemAllocFromPoolAsync(&p, (size_t)size, (CUmemoryPool)pool, (CUstream)s), NULL};
	out.p = (void *)(uintptr_t)p;
	return out;
}

int sa_mem_free_host_async(uintptr_t ctx, void *p, uintptr_t s) {
	NEED(cuMemFreeAsync);
	BIND(ctx);
	return p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, (CUstream)s);
}

// --- The peer and IPC wing -------------------------------------------------

sa_ret sa_device_can_access_peer(int dev, int peer) {
	NEEDR(sa_ret, cuDeviceCanAccessPeer);
	int can = 0;
	sa_ret out = {p_cuDeviceCanAccessPeer(&can, dev, peer), 0};
	out.v = (uint64_t)can;
	return out;
}

int sa_ctx_enable_peer_access(uintptr_t ctx, uintptr_t peer) {
	NEED(cuCtxEnablePeerAccess);
	BIND(ctx);
	return p_cuCtxEnablePeerAccess((CUcontext)peer, 0);
}

int sa_memcpy_peer_async(uintptr_t ctx, uint64_t dst, uintptr_t dst_ctx, uint64_t src, uintptr_t src_ctx, uint64_t n, uintptr_t s) {
	NEED(cuMemcpyPeerAsync);
	BIND(ctx);
	return p_cuMemcpyPeerAsync((CUdeviceptr)dst, (CUcontext)dst_ctx, (CUdeviceptr)src, (CUcontext)src_ctx, (size_t)n, (CUstream)s);
}

int sa_mem_pool_set_access(uintptr_t ctx, uintptr_t pool, int dev, int flags) {
	NEED(cuMemPoolSetAccess);
	BIND(ctx);
	sa_access_desc d = {SA_MEM_LOCATION_TYPE_DEVICE, dev, flags};
	return p_cuMemPoolSetAccess((CUmemoryPool)pool, &d, 1);
}

sa_ret sa_mem_pool_get_access(uintptr_t ctx, uintptr_t pool, int dev) {
	NEEDR(sa_ret, cuMemPoolGetAccess);
	BINDR(sa_ret, ctx);
	sa_location loc = {SA_MEM_LOCATION_TYPE_DEVICE, dev};
	int flags = 0;
	sa_ret out = {p_cuMemPoolGetAccess(&flags, (CUmemoryPool)pool, &loc), 0};
	out.v = (uint64_t)flags;
	return out;
}

sa_ret sa_mem_pool_export_fd(uintptr_t ctx, uintptr_t pool) {
	NEEDR(sa_ret, cuMemPoolExportToShareableHandle);
	BINDR(sa_ret, ctx);
	int fd = -1;
	sa_ret out = {p_cuMemPoolExportToShareableHandle(&fd, (CUmemoryPool)pool, SA_MEM_HANDLE_TYPE_POSIX_FD, 0), 0};
	out.v = (uint64_t)(int64_t)fd;
	return out;
}

int sa_mem_pool_export_fabric(uintptr_t ctx, uintptr_t pool, void *out64) {
	NEED(cuMemPoolExportToShareableHandle);
	BIND(ctx);
	return p_cuMemPoolExportToShareableHandle(out64, (CUmemoryPool)pool, SA_MEM_HANDLE_TYPE_FABRIC, 0);
}

sa_ret sa_mem_pool_import_fd(uintptr_t ctx, int fd) {
	NEEDR(sa_ret, cuMemPoolImportFromShareableHandle);
	BINDR(sa_ret, ctx);
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuMemPoolImportFromShareableHandle(&p, (void *)(intptr_t)fd, SA_MEM_HANDLE_TYPE_POSIX_FD, 0), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

sa_ret sa_mem_pool_import_fabric(uintptr_t ctx, const void *in64) {
	NEEDR(sa_ret, cuMemPoolImportFromShareableHandle);
	BINDR(sa_ret, ctx);
	sa_opaque64 h;
	memcpy(&h, in64, sizeof h);
	CUmemoryPool p = NULL;
	sa_ret out = {p_cuMemPoolImportFromShareableHandle(&p, &h, SA_MEM_HANDLE_TYPE_FABRIC, 0), 0};
	out.v = (uint64_t)(uintptr_t)p;
	return out;
}

int sa_mem_pool_export_pointer(uintptr_t ctx, uint64_t p, void *out64) {
	NEED(cuMemPoolExportPointer);
	BIND(ctx);
	sa_opaque64 d;
	memset(&d, 0, sizeof d);
	CUresult r = p_cuMemPoolExportPointer(&d, (CUdeviceptr)p);
	memcpy(out64, &d, sizeof d);
	return r;
}

sa_ret sa_mem_pool_import_pointer(uintptr_t ctx, uintptr_t pool, const void *in64) {
	NEEDR(sa_ret, cuMemPoolImportPointer);
	BINDR(sa_ret, ctx);
	sa_opaque64 d;
	memcpy(&d, in64, sizeof d);
	CUdeviceptr p = 0;
	sa_ret out = {p_cuMemPoolImportPointer(&p, (CUmemoryPool)pool, &d), 0};
	out.v = p;
	return out;
}

int sa_ipc_get_event_handle(uintptr_t ctx, uintptr_t e, void *out64) {
	NEED(cuIpcGetEventHandle);
	BIND(ctx);
	sa_opaque64 h;
	memset(&h, 0, sizeof h);
	CUresult r = p_cuIpcGetEventHandle(&h, (CUevent)e);
	memcpy(out64, &h, sizeof h);
	return r;
}

sa_ret sa_ipc_open_event_handle(uintptr_t ctx, const void *in64) {
	NEEDR(sa_ret, cuIpcOpenEventHandle);
	BINDR(sa_ret, ctx);
	sa_opaque64 h;
	memcpy(&h, in64, sizeof h);
	CUevent e = NULL;
	sa_ret out = {p_cuIpcOpenEventHandle(&e, h), 0};
	out.v = (uint64_t)(uintptr_t)e;
	return out;
}

int sa_ipc_get_mem_handle(uintptr_t ctx, uint64_t p, void *out64) {
	NEED(cuIpcGetMemHandle);
	BIND(ctx);
	sa_opaque64 h;
	memset(&h, 0, sizeof h);
	CUresult r = p_cuIpcGetMemHandle(&h, (CUdeviceptr)p);
	memcpy(out64, &h, sizeof h);
	return r;
}

sa_ret sa_ipc_open_mem_handle(uintptr_t ctx, const void *in64) {
	NEEDR(sa_ret, cuIpcOpenMemHandle);
	BINDR(sa_ret, ctx);
	sa_opaque64 h;
	memcpy(&h, in64, sizeof h);
	CUdeviceptr p = 0;
	// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1), the only flag.
	sa_ret out = {p_cuIpcOpenMemHandle(&p, h, 1), 0};
	out.v = p;
	return out;
}

int sa_ipc_close_mem_handle(uintptr_t ctx, uint64_t p) {
	NEED(cuIpcCloseMemHandle);
	BIND(ctx);
	return p_cuIpcCloseMemHandle((CUdeviceptr)p);
}
