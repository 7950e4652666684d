#!/usr/bin/env python3
"""fabric-probe.py asks the CUDA driver directly (libcuda through ctypes, no
streamalloc code) what it answers about fabric handles
(CU_MEM_HANDLE_TYPE_FABRIC, 0x8) on device 0: the attributes, cuMemCreate
of a granule requesting fabric handles (alone, and with POSIX descriptors)
and its exports, the import of a fabric handle of no export, and a pool
made exportable as fabric, exported, imported and destroyed.

    python3 scripts/fabric-probe.py        # the attributes and VMM allocations
    python3 scripts/fabric-probe.py pool   # the pool, run on its own: driver
                                           # 580 once aborted in
                                           # cuMemPoolDestroy of a fabric pool

Each line is one driver call and its CUresult by name and number.
"""
import ctypes
import sys

cu = ctypes.CDLL("libcuda.so.1")
FABRIC, POSIX = 0x8, 0x1


def name(r):
    s = ctypes.c_char_p()
    cu.cuGetErrorName(r, ctypes.byref(s))
    return f"{s.value.decode() if s.value else '?'} ({r})"


def call(what, r):
    print(f"{what}: {name(r)}", flush=True)
    return r


def main():
    call("cuInit", cu.cuInit(0))
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    call("cuDeviceGet(0)", cu.cuDeviceGet(ctypes.byref(dev), 0))
    call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    call("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    v = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(v))
    print(f"driver version {v.value}")
    for attr, what in [(102, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"),
                       (103, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"),
                       (128, "HANDLE_TYPE_FABRIC_SUPPORTED"),
                       (119, "MEMPOOL_SUPPORTED_HANDLE_TYPES")]:
        a = ctypes.c_int(-1)
        r = cu.cuDeviceGetAttribute(ctypes.byref(a), attr, dev)
        print(f"CU_DEVICE_ATTRIBUTE_{what} ({attr}): {a.value:#x} [{name(r)}]")
    if sys.argv[1:] == ["pool"]:
        pool()
    else:
        vmm()


def prop(types, size=64):
    """A CUmemAllocationProp (or CUmemPoolProps, size 128) of pinned device
    memory on device 0 exportable as types."""
    b = (ctypes.c_ubyte * size)()
    i = ctypes.cast(b, ctypes.POINTER(ctypes.c_int32))
    i[0], i[1], i[2], i[3] = 1, types, 1, 0
    return b


def vmm():
    g = ctypes.c_size_t()
    call("cuMemGetAllocationGranularity", cu.cuMemGetAllocationGranularity(ctypes.byref(g), prop(POSIX), 0))
    for types in (FABRIC, POSIX | FABRIC, POSIX):
        h = ctypes.c_uint64()
        r = call(f"cuMemCreate({g.value} bytes, requestedHandleTypes {types:#x})",
                 cu.cuMemCreate(ctypes.byref(h), g, prop(types), ctypes.c_ulonglong(0)))
        if r != 0:
            continue
        for t in (FABRIC, POSIX):
            if t & types == 0:
                continue
            out = (ctypes.c_ubyte * 64)()
            call(f"  cuMemExportToShareableHandle(as {t:#x})",
                 cu.cuMemExportToShareableHandle(out, h, t, ctypes.c_ulonglong(0)))
        call("  cuMemRelease", cu.cuMemRelease(h))
    junk = (ctypes.c_ubyte * 64)(*b"NOTANEXPORT")
    h = ctypes.c_uint64()
    call("cuMemImportFromShareableHandle(a fabric handle of no export)",
         cu.cuMemImportFromShareableHandle(ctypes.byref(h), junk, FABRIC))


def pool():
    p = ctypes.c_void_p()
    r = call("cuMemPoolCreate(handleTypes 0x8)", cu.cuMemPoolCreate(ctypes.byref(p), prop(FABRIC, 128)))
    if r == 0:
        out = (ctypes.c_ubyte * 64)()
        call("cuMemPoolExportToShareableHandle(as 0x8)",
             cu.cuMemPoolExportToShareableHandle(out, p, FABRIC, ctypes.c_ulonglong(0)))
        call("cuMemPoolDestroy", cu.cuMemPoolDestroy(p))
    junk = (ctypes.c_ubyte * 64)(*b"NOTAPOOL")
    q = ctypes.c_void_p()
    call("cuMemPoolImportFromShareableHandle(a fabric handle of no export)",
         cu.cuMemPoolImportFromShareableHandle(ctypes.byref(q), junk, FABRIC, ctypes.c_ulonglong(0)))


main()
