// Foreign handles: streams, events, pools and contexts made by code that is
// not streamalloc (PyTorch, CuPy, cuBLAS, a Go service's own cgo).
//
// A foreign handle is borrowed, never owned. Adopting one wraps it in a
// Stream, Event or MemPool of this interface, so that every resource,
// adaptor, buffer and the sanitizer use it like one of their own; the
// wrapper's Destroy forgets the wrapper and never destroys the handle,
// which stays its owner's to destroy (after the wrapper is forgotten: a
// handle value the driver reuses for a new object must not meet a wrapper
// of the old one).
//
// Invariants every backend keeps:
//
//   - Adopting the same raw handle twice returns the same wrapper (the same
//     interface value, so the same Stream.ID), until the wrapper is
//     destroyed; adopting the raw handle of one of our own streams, events
//     or pools returns that object itself. A device keeps one map from raw
//     handle to wrapper; a wrapper leaves it only through Destroy, so a
//     program that adopts handles it later destroys must destroy the
//     wrappers first, and a long-lived program that adopts an unbounded
//     number of short-lived handles must destroy their wrappers.
//   - An adopted stream has a fresh ID from NewStreamID, different from
//     every other stream's, and a re-adoption after Destroy gets a new one
//     (per-stream state that resources keep under the old ID is then that
//     of a stream that no longer receives work).
//   - The legacy default stream (raw handle 0, CU_STREAM_LEGACY's meaning
//     of the null stream) and the per-thread default stream (raw handle
//     StreamPerThread, CU_STREAM_PER_THREAD) are streams too. The legacy
//     stream is one per device. The per-thread stream is one per OS thread,
//     as in the driver: its wrapper belongs to the OS thread that adopted
//     it, and using it from another thread returns ErrWrongThread before
//     anything reaches the driver, because the driver would silently use
//     that other thread's stream. Go code must therefore hold the
//     goroutine on its thread (runtime.LockOSThread) while it uses one, as
//     a cgo callback from C code is held for the length of the call.
//   - Only the primary context of a device is supported: a stream (or a
//     context handed to ContextAdopter) of another context is refused with
//     ErrForeignContext. Every resource works in the primary context,
//     which the runtime API (and so PyTorch, CuPy and cuBLAS) uses too.
//     Events and pools are not checked against contexts: the driver has no
//     query for an event's context, and pools belong to a device.
package gpu

// StreamPerThread is the raw handle of the per-thread default stream
// (CU_STREAM_PER_THREAD, cudaStreamPerThread).
const StreamPerThread uintptr = 0x2

// StreamLegacy is the raw handle of the legacy default stream, the null
// stream (0, which the driver reads as CU_STREAM_LEGACY's stream).
const StreamLegacy uintptr = 0

// Adopter is implemented by the devices of both backends: it wraps handles
// made elsewhere (see the package's section on foreign handles above) and
// exposes the device's current pool.
type Adopter interface {
	// AdoptStream wraps raw, a CUstream (or cudaStream_t, the same
	// handle) of this device's primary context: 0 is the legacy default
	// stream and StreamPerThread the calling OS thread's per-thread
	// default stream. The wrapper does not own the stream.
	AdoptStream(raw uintptr) (Stream, error)
	// AdoptEvent wraps raw, a CUevent, without owning it. Zero returns an
	// error matching ErrInvalidHandle. Whether it can time is the
	// creator's choice; ElapsedSince reports the driver's answer.
	AdoptEvent(raw uintptr) (Event, error)
	// AdoptMemPool wraps raw, a CUmemoryPool of this device, without
	// owning it: the wrapper's Destroy never destroys the pool. Zero
	// returns an error matching ErrInvalidHandle; the raw handle of the
	// default pool returns the default pool itself.
	AdoptMemPool(raw uintptr) (MemPool, error)
	// CurrentMemPool is the pool MallocAsync draws from
	// (cuDeviceGetMemPool): the default pool unless SetCurrentMemPool, or
	// other code in the process through the driver, changed it.
	CurrentMemPool() (MemPool, error)
	// SetCurrentMemPool makes p the device's current pool
	// (cuDeviceSetMemPool), for the whole process.
	SetCurrentMemPool(p MemPool) error
}

// RawHandle is implemented by the streams, events and pools of both
// backends, our own and adopted ones: Raw is the driver handle as an
// integer (a CUstream, CUevent or CUmemoryPool on CUDA; the simulator's own
// numbering on the simulator), for code outside streamalloc. A handle of a
// destroyed object must not be used.
type RawHandle interface {
	Raw() uintptr
}

// ContextAdopter is implemented by the backends: AdoptContext returns the
// device whose primary context raw is (a CUcontext), and an error matching
// ErrForeignContext for any other context. Zero returns an error matching
// ErrInvalidHandle.
type ContextAdopter interface {
	AdoptContext(raw uintptr) (Device, error)
}

// RawOf returns the raw handle of a stream, event or pool, and false for a
// value that has none (a wrapper of another package that does not expose
// it).
func RawOf(h any) (uintptr, bool) {
	r, ok := h.(RawHandle)
	if !ok || h == nil {
		return 0, false
	}
	return r.Raw(), true
}
