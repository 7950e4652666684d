"""streamalloc as the device allocator of PyTorch and CuPy.

Two lines, before the first CUDA allocation of the process:

    import streamalloc_torch
    streamalloc_torch.use_streamalloc(conf="pool,release_threshold=2GiB")

The library is libstreamalloc.so (scripts/build-capi.sh builds it into
build/capi/); it is found through the path argument, the STREAMALLOC_LIB
environment variable, this file's folder, or the repository's build/capi.
conf uses the grammar of STREAMALLOC_CONF (package pluggable). Unset or
empty, it is "pool,upstream=vmm,mapped_slack,small_at_peak" (pluggable's
Recommended: the pool over mapped virtual memory, below). Otherwise "pool"
(streamalloc's stream-ordered chunked pool over cuMemAlloc, whose big blocks
may split larger free ones unless split_big=false; split_giant lets a size
seen before split even the largest chunks where the pool would give chunks
back to grow, for CuPy's loops of a few array scales) or "async" (the driver's
pool), and options such as release_threshold=, chunk_size=,
log=PATH (an RMM CSV history) and track (live allocations for a pprof
profile). "pool,upstream=vmm" puts the pool over mapped virtual memory
(cuMemAddressReserve, cuMemCreate, cuMemMap): it grows each stream's range
in place, in 2 MiB granules mapped a piece of several at a time, so that
its reserved bytes (the memory mapped) stay close to the live bytes
(wait_decommits makes its layout independent of the device's progress, at
the price of host waits; mapped_slack keeps up to 1% of the peak mapped for
memory that the steps move, rather than unmap and map it each step;
small_at_peak serves a small request at the mapped peak from mapped room
rather than a small chunk of its own;
in_place=false keeps the default pool's chunks, each one physical
allocation in that range, and wait_frees maps a new one only after the
chunks given back are unmapped);
stats() then also gives
address_space_bytes (reserved addresses, no memory), and vmm_fallback is 1
where the driver has no virtual memory management and the pool is over
cuMemAlloc instead (summary() says so).

PyTorch calls sa_torch_alloc/sa_torch_free through
torch.cuda.memory.CUDAPluggableAllocator; CuPy calls sa_cupy_malloc and
sa_cupy_free through cupy.cuda.memory.CFunctionAllocator. With the
pluggable allocator, torch.cuda.memory_stats and friends are not available
(PyTorch's own limitation): use stats() and summary() here.
"""

import ctypes
import os

__all__ = ["use_streamalloc", "stats", "summary", "empty_cache", "reset_peaks",
           "write_profile", "flush_history", "last_error", "library_path"]


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "reserved_bytes", "peak_reserved_bytes", "live_bytes", "peak_live_bytes",
        "allocs", "frees", "live_allocs", "oom_count", "bad_free_count", "error_count",
        "device_allocs", "device_frees", "address_space_bytes", "vmm_fallback")]


_lib = None
_path = None


def library_path(path=None):
    """Returns the path of libstreamalloc.so that use_streamalloc loads."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [path, os.environ.get("STREAMALLOC_LIB"),
                  os.path.join(here, "libstreamalloc.so"),
                  os.path.join(here, "..", "build", "capi", "libstreamalloc.so")]
    for c in candidates:
        if c and os.path.exists(c):
            return os.path.abspath(c)
    raise FileNotFoundError("libstreamalloc.so not found (run scripts/build-capi.sh, or set STREAMALLOC_LIB)")


def _load(path=None):
    global _lib, _path
    if _lib is None:
        _path = library_path(path)
        lib = ctypes.CDLL(_path)
        lib.sa_configure.argtypes = [ctypes.c_char_p]
        lib.sa_configure.restype = ctypes.c_int
        lib.sa_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]
        lib.sa_stats.restype = ctypes.c_int
        lib.sa_release.argtypes = [ctypes.c_int]
        lib.sa_release.restype = ctypes.c_int
        lib.sa_reset_peaks.argtypes = [ctypes.c_int]
        lib.sa_reset_peaks.restype = ctypes.c_int
        lib.sa_write_profile.argtypes = [ctypes.c_char_p]
        lib.sa_write_profile.restype = ctypes.c_int
        lib.sa_flush.restype = ctypes.c_int
        lib.sa_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.sa_last_error.restype = ctypes.c_size_t
        lib.sa_torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.sa_torch_alloc.restype = ctypes.c_void_p
        lib.sa_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.sa_torch_free.restype = None
        _lib = lib
    return _lib


def last_error():
    """The message of the library's last failure, or ''."""
    lib = _load()
    buf = ctypes.create_string_buffer(1024)
    lib.sa_last_error(buf, len(buf))
    return buf.value.decode(errors="replace")


def _check(rc, what):
    if rc != 0:
        raise RuntimeError("streamalloc: %s: %s" % (what, last_error()))


def use_streamalloc(conf=None, torch=True, cupy=False, path=None):
    """Makes streamalloc the device allocator of PyTorch (torch=True) and/or
    CuPy (cupy=True). Call it before the first CUDA allocation; conf (or
    STREAMALLOC_CONF when conf is None) configures the library."""
    lib = _load(path)
    if conf is not None:
        _check(lib.sa_configure(conf.encode()), "configure %r" % conf)
    if torch:
        import torch as _torch
        alloc = _torch.cuda.memory.CUDAPluggableAllocator(_path, "sa_torch_alloc", "sa_torch_free")
        _torch.cuda.memory.change_current_allocator(alloc)
    if cupy:
        import cupy as _cupy
        malloc = ctypes.cast(lib.sa_cupy_malloc, ctypes.c_void_p).value
        free = ctypes.cast(lib.sa_cupy_free, ctypes.c_void_p).value
        allocator = _cupy.cuda.memory.CFunctionAllocator(0, malloc, free, lib)
        _cupy.cuda.set_allocator(allocator.malloc)
    return lib


def stats(device=0):
    """The figures of one device, as a dict (bytes and counts)."""
    lib = _load()
    st = _Stats()
    _check(lib.sa_stats(device, ctypes.byref(st)), "stats of device %d" % device)
    return {name: getattr(st, name) for name, _ in _Stats._fields_}


def _mib(n):
    return "%.1f MiB" % (n / 2**20)


def summary(device=0):
    """A short text report of one device, like torch.cuda.memory_summary."""
    s = stats(device)
    ratio = s["peak_reserved_bytes"] / s["peak_live_bytes"] if s["peak_live_bytes"] else float("nan")
    return "\n".join([
        "streamalloc device %d" % device,
        "  reserved  %s (peak %s)" % (_mib(s["reserved_bytes"]), _mib(s["peak_reserved_bytes"])),
        "  live      %s (peak %s) in %d allocations" % (_mib(s["live_bytes"]), _mib(s["peak_live_bytes"]), s["live_allocs"]),
        "  peak reserved / peak live  %.3f" % ratio,
        "  allocs %d, frees %d, out of memory %d, bad frees %d, other errors %d" % (
            s["allocs"], s["frees"], s["oom_count"], s["bad_free_count"], s["error_count"]),
        "  device allocs %d, device frees %d" % (s["device_allocs"], s["device_frees"]),
    ] + (["  address space %s (reserved addresses, no memory)" % _mib(s["address_space_bytes"])]
         if s["address_space_bytes"] else [])
      + (["  upstream=vmm asked for; the driver has no VMM: the pool is over cuMemAlloc"]
         if s["vmm_fallback"] else []))


def empty_cache(device=-1):
    """Gives cached memory back to the device (all devices for -1)."""
    _check(_load().sa_release(device), "release")


def reset_peaks(device=0):
    """Lowers the peaks of stats() to the current values."""
    _check(_load().sa_reset_peaks(device), "reset peaks")


def write_profile(path):
    """Writes the live allocations as a pprof profile (needs the track option)."""
    _check(_load().sa_write_profile(path.encode()), "write profile")


def flush_history():
    """Writes the buffered memory history (the log= option) to its file."""
    _check(_load().sa_flush(), "flush")
