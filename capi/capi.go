// Command capi is the C ABI of streamalloc, built by
// scripts/build-capi.sh as libstreamalloc.so (go build -buildmode=c-shared,
// with the Go runtime's monitor kept awake: the script says why; a plain
// go build gives a library whose calls after an idle spell wake the
// monitor), with the public header streamalloc.h next to this file. Each
// exported function converts its C arguments, calls
// package pluggable's process-wide allocator, and converts the answer:
// nothing else, so that everything the library does is tested on the
// simulator in package pluggable. Every export recovers panics too (the
// allocator's methods do already; this covers the conversions), because
// a Go panic crossing into C would abort the host.
//
// Pointers: device addresses cross as void* (as PyTorch and CuPy want
// them) and are never Go pointers; the garbage collector ignores them, as
// it ignores every pointer outside the Go heap. The two allocation entry
// points return them as uintptr_t, which the C ABIs this builds for
// (System V on x86-64, AAPCS64) return in the same register as a void*,
// so that the public header's void* prototypes hold: a Go function
// exported with a pointer result has the runtime check on every return
// that the result is no Go pointer (cgocheck), a look-up of the heap's
// arenas and the module's data that touches several cache lines of a
// call that the host's work has made cold.
package main

/*
#define SA_NO_PROTOTYPES
#include "streamalloc.h"
*/
import "C"

import (
	"unsafe"

	"github.com/streamalloc/streamalloc/pluggable"
)

func main() {}

var a = pluggable.Default

// ptr turns a device address into the void* the host expects.
func ptr(p uintptr) unsafe.Pointer { return unsafe.Add(nil, p) }

// addr is a device address returned as uintptr_t (see the file comment).
func addr(p uintptr) C.uintptr_t { return C.uintptr_t(p) }

// status is the C convention: 0 for success, -1 for failure.
func status(err error) C.int {
	if err != nil {
		return -1
	}
	return 0
}

// cbool is a flag of sa_stats_t: 1 or 0.
func cbool(b bool) C.uint64_t {
	if b {
		return 1
	}
	return 0
}

//export sa_torch_alloc
func sa_torch_alloc(size C.size_t, device C.int, stream unsafe.Pointer) C.uintptr_t {
	defer a.Recover("sa_torch_alloc")
	return addr(a.Alloc(uint64(size), int(device), uintptr(stream)))
}

//export sa_torch_free
func sa_torch_free(p unsafe.Pointer, size C.size_t, device C.int, stream unsafe.Pointer) {
	defer a.Recover("sa_torch_free")
	a.Free(uintptr(p), uint64(size), int(device), uintptr(stream))
}

//export sa_cupy_malloc
func sa_cupy_malloc(param unsafe.Pointer, size C.size_t, device C.int) C.uintptr_t {
	defer a.Recover("sa_cupy_malloc")
	return addr(a.AllocNoStream(uint64(size), int(device)))
}

//export sa_cupy_free
func sa_cupy_free(param, p unsafe.Pointer, device C.int) {
	defer a.Recover("sa_cupy_free")
	a.FreeNoSize(uintptr(p), int(device))
}

//export sa_configure
func sa_configure(conf *C.char) C.int {
	defer a.Recover("sa_configure")
	if conf == nil {
		return status(a.Configure(""))
	}
	return status(a.Configure(C.GoString(conf)))
}

//export sa_stats
func sa_stats(device C.int, out *C.sa_stats_t) (rc C.int) {
	defer a.Recover("sa_stats")
	rc = -1
	st, err := a.Stats(int(device))
	if err != nil || out == nil {
		return -1
	}
	*out = C.sa_stats_t{
		reserved_bytes: C.uint64_t(st.Reserved), peak_reserved_bytes: C.uint64_t(st.PeakReserved),
		live_bytes: C.uint64_t(st.Live), peak_live_bytes: C.uint64_t(st.PeakLive),
		allocs: C.uint64_t(st.Allocs), frees: C.uint64_t(st.Frees), live_allocs: C.uint64_t(st.LiveAllocs),
		oom_count: C.uint64_t(st.OOMs), bad_free_count: C.uint64_t(st.BadFrees), error_count: C.uint64_t(st.Errors),
		device_allocs: C.uint64_t(st.DeviceAllocs), device_frees: C.uint64_t(st.DeviceFrees),
		address_space_bytes: C.uint64_t(st.AddressSpace), vmm_fallback: cbool(st.VMMFallback),
	}
	return 0
}

//export sa_reset_peaks
func sa_reset_peaks(device C.int) C.int {
	defer a.Recover("sa_reset_peaks")
	return status(a.ResetPeaks(int(device)))
}

//export sa_release
func sa_release(device C.int) C.int {
	defer a.Recover("sa_release")
	return status(a.Release(int(device)))
}

//export sa_write_profile
func sa_write_profile(path *C.char) C.int {
	defer a.Recover("sa_write_profile")
	if path == nil {
		return -1
	}
	return status(a.WriteProfile(C.GoString(path)))
}

//export sa_flush
func sa_flush() C.int {
	defer a.Recover("sa_flush")
	return status(a.Flush())
}

//export sa_last_error
func sa_last_error(buf *C.char, n C.size_t) C.size_t {
	defer a.Recover("sa_last_error")
	msg := a.LastError()
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(dst[:len(dst)-1], msg)
		dst[k] = 0
	}
	return C.size_t(len(msg))
}

//export sa_sim_stream_create
func sa_sim_stream_create(device C.int) unsafe.Pointer {
	defer a.Recover("sa_sim_stream_create")
	s, err := a.SimNewStream(int(device))
	if err != nil {
		return nil
	}
	return ptr(s)
}

//export sa_sim_stream_destroy
func sa_sim_stream_destroy(device C.int, stream unsafe.Pointer) C.int {
	defer a.Recover("sa_sim_stream_destroy")
	return status(a.SimDestroyStream(int(device), uintptr(stream)))
}
