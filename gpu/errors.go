// The error vocabulary of the backend interface.
//
// A backend reports two kinds of failure:
//
//   - A driver status: what the CUDA driver returns (or, on the simulator,
//     what it would return). Its Code is a CUresult number from cuda.h, and
//     it reads as cuda.h names it ("CUDA_ERROR_OUT_OF_MEMORY"). A backend
//     returns it as an *Error naming the driver call, usually wrapped with
//     detail; the exported Code constants are the sentinels callers match
//     with errors.Is.
//   - A backend error the driver has no code for: ErrNoDriver, ErrDestroyed,
//     ErrWrongDevice, and for foreign handles ErrForeignContext and
//     ErrWrongThread.
//
// The vocabulary lives here, with the interface, so that a backend without
// the driver (the simulator, or any new one) needs nothing but this package
// to speak it, and links no driver binding.
//
// # Matching across packages
//
// A driver status is identified by its number alone. Code has a
// DriverCode method that gives the number, and Code.Is matches any target
// whose DriverCode is the same number; the driver binding (package cuda)
// gives its own Result and *Error values the same method and the same
// rule, without importing this package. So an error straight from the
// driver binding matches gpu.ErrOutOfMemory with errors.Is, with no
// translation at the backend boundary and without allocating (the not-ready
// answer of a stream or event query is polled on hot paths), and a status
// from this package matches the binding's sentinel of the same number.
// The numbers of the constants below are cuda.h's, so both agree.
//
// ErrNoDriver is not a driver status (no driver answered); the CUDA
// backend returns it when the driver library cannot be loaded.
//
// # Invariants
//
//   - Every Code constant's value is the CUresult of the same name in cuda.h,
//     and Code.Error is that name.
//   - errors.Is(err, c) for a Code c holds for an *Error, a Code, or any
//     error from the driver binding with the same number, however wrapped.
//   - A match never allocates: *Error.Is answers before errors.Is unwraps
//     (unwrapping boxes the Code, which allocates for numbers above 255).
package gpu

import (
	"fmt"
	"strconv"
)

// Code is a driver status: a CUresult number from cuda.h. A non-zero Code
// is an error, so the constants below are sentinels for errors.Is.
type Code int32

// Driver statuses a backend returns. The values are cuda.h's CUresult
// numbers; the names drop the CUDA_ERROR_ prefix.
const (
	ErrInvalidValue      Code = 1   // CUDA_ERROR_INVALID_VALUE: an argument is out of range
	ErrOutOfMemory       Code = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrNotInitialized    Code = 3   // CUDA_ERROR_NOT_INITIALIZED
	ErrDeinitialized     Code = 4   // CUDA_ERROR_DEINITIALIZED: the driver is shutting down
	ErrNoDevice          Code = 100 // CUDA_ERROR_NO_DEVICE
	ErrInvalidDevice     Code = 101 // CUDA_ERROR_INVALID_DEVICE: an ordinal out of range
	ErrInvalidImage      Code = 200 // CUDA_ERROR_INVALID_IMAGE: a module image the driver cannot load
	ErrInvalidContext    Code = 201 // CUDA_ERROR_INVALID_CONTEXT
	ErrInvalidPTX        Code = 218 // CUDA_ERROR_INVALID_PTX: PTX that does not compile
	ErrPeerUnsupported   Code = 217 // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: the topology does not let one device access the other
	ErrPeerEnabled       Code = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	ErrPeerNotEnabled    Code = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
	ErrInvalidHandle     Code = 400 // CUDA_ERROR_INVALID_HANDLE
	ErrIllegalState      Code = 401 // CUDA_ERROR_ILLEGAL_STATE: not valid in the object's state (a capture begun twice, ended when none runs)
	ErrNotFound          Code = 500 // CUDA_ERROR_NOT_FOUND: a kernel or symbol name not in the module
	ErrNotReady          Code = 600 // CUDA_ERROR_NOT_READY: work is still running (not a failure)
	ErrIllegalAddress    Code = 700 // CUDA_ERROR_ILLEGAL_ADDRESS: a kernel or copy touched unmapped memory
	ErrLaunchOutOfRes    Code = 701 // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
	ErrLaunchTimeout     Code = 702 // CUDA_ERROR_LAUNCH_TIMEOUT
	ErrMisalignedAddress Code = 716 // CUDA_ERROR_MISALIGNED_ADDRESS: a misaligned word access in a kernel
	ErrLaunchFailed      Code = 719 // CUDA_ERROR_LAUNCH_FAILED: a kernel failed while running
	ErrNotPermitted      Code = 800 // CUDA_ERROR_NOT_PERMITTED
	ErrNotSupported      Code = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrStreamCapture     Code = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: not allowed while a stream is captured
	ErrUnknown           Code = 999 // CUDA_ERROR_UNKNOWN
)

// Driver statuses of stream capture (cuda.h 900-908).
const (
	// ErrStreamCaptureUnsupported is ErrStreamCapture by cuda.h's full
	// name: the call is not permitted while the stream (or, in global
	// mode, any stream) is capturing.
	ErrStreamCaptureUnsupported = ErrStreamCapture
	// ErrStreamCaptureInvalidated: an earlier error invalidated the
	// capture; it can only be ended.
	ErrStreamCaptureInvalidated Code = 901
	// ErrStreamCaptureMerge: the call would merge two independent captures.
	ErrStreamCaptureMerge Code = 902
	// ErrStreamCaptureUnmatched: the capture was not begun on this stream.
	ErrStreamCaptureUnmatched Code = 903
	// ErrStreamCaptureUnjoined: the capture forked into a stream that did
	// not join back into the stream it began on.
	ErrStreamCaptureUnjoined Code = 904
	// ErrStreamCaptureIsolation: the call would make the capture depend on
	// work outside it.
	ErrStreamCaptureIsolation Code = 905
	// ErrStreamCaptureImplicit: an implicit dependency on the legacy stream.
	ErrStreamCaptureImplicit Code = 906
	// ErrCapturedEvent: the event was last recorded in a capture.
	ErrCapturedEvent Code = 907
	// ErrStreamCaptureWrongThread: a non-relaxed capture ended on another
	// thread than the one that began it.
	ErrStreamCaptureWrongThread Code = 908
)

// codeNames are cuda.h's names of the codes above.
var codeNames = map[Code]string{
	ErrInvalidValue:      "CUDA_ERROR_INVALID_VALUE",
	ErrOutOfMemory:       "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized:    "CUDA_ERROR_NOT_INITIALIZED",
	ErrDeinitialized:     "CUDA_ERROR_DEINITIALIZED",
	ErrNoDevice:          "CUDA_ERROR_NO_DEVICE",
	ErrInvalidDevice:     "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidImage:      "CUDA_ERROR_INVALID_IMAGE",
	ErrInvalidContext:    "CUDA_ERROR_INVALID_CONTEXT",
	ErrInvalidPTX:        "CUDA_ERROR_INVALID_PTX",
	ErrPeerUnsupported:   "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
	ErrPeerEnabled:       "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	ErrPeerNotEnabled:    "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	ErrInvalidHandle:     "CUDA_ERROR_INVALID_HANDLE",
	ErrIllegalState:      "CUDA_ERROR_ILLEGAL_STATE",
	ErrNotFound:          "CUDA_ERROR_NOT_FOUND",
	ErrNotReady:          "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress:    "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrLaunchOutOfRes:    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrLaunchTimeout:     "CUDA_ERROR_LAUNCH_TIMEOUT",
	ErrMisalignedAddress: "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrLaunchFailed:      "CUDA_ERROR_LAUNCH_FAILED",
	ErrNotPermitted:      "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported:      "CUDA_ERROR_NOT_SUPPORTED",
	ErrStreamCapture:     "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrUnknown:           "CUDA_ERROR_UNKNOWN",

	ErrStreamCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrStreamCaptureMerge:       "CUDA_ERROR_STREAM_CAPTURE_MERGE",
	ErrStreamCaptureUnmatched:   "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	ErrStreamCaptureUnjoined:    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	ErrStreamCaptureIsolation:   "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	ErrStreamCaptureImplicit:    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	ErrCapturedEvent:            "CUDA_ERROR_CAPTURED_EVENT",
	ErrStreamCaptureWrongThread: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
}

// Error returns cuda.h's name of c ("CUDA_ERROR_OUT_OF_MEMORY"), or
// "CUresult(N)" for a number this package does not name.
func (c Code) Error() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "CUresult(" + strconv.Itoa(int(c)) + ")"
}

// DriverCode returns c's CUresult number. Errors of the driver binding
// match a target with the same DriverCode, which is how they match the
// constants of this package.
func (c Code) DriverCode() int32 { return int32(c) }

// driverCoder is a driver status of any package: a Code, or a result of
// the driver binding.
type driverCoder interface{ DriverCode() int32 }

// Is reports whether target is a driver status with c's number, of this
// package or of the driver binding, so that errors.Is(c, cuda.ErrX) holds
// too. It does not allocate.
func (c Code) Is(target error) bool {
	t, ok := target.(driverCoder)
	return ok && t.DriverCode() == int32(c)
}

// Error is a failed driver call: the call (a driver entry point such as
// "cuMemAllocAsync") and the status it returned. It matches its Code with
// errors.Is. Backends without the driver return it for what the driver
// would have refused.
type Error struct {
	Op   string
	Code Code
}

// Error reads "cuMemAllocAsync: CUDA_ERROR_OUT_OF_MEMORY (2)".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Code.Error(), int32(e.Code))
}

// Unwrap returns the Code, so errors.As(err, &code) finds it.
func (e *Error) Unwrap() error { return e.Code }

// Is reports whether target is a driver status with e's number (see
// Code.Is). It is asked before Unwrap, which would box the Code, so
// matching stays free of allocation.
func (e *Error) Is(target error) bool { return e.Code.Is(target) }

// ErrNoDriver is returned when no CUDA driver can be loaded (no NVIDIA
// driver on the machine, or a build without cgo).
var ErrNoDriver error = errorString("gpu: no CUDA driver (libcuda.so.1 could not be loaded)")

// Backend errors that the driver has no code for.
var (
	// ErrDestroyed: the stream, event, pool or module was destroyed.
	ErrDestroyed error = errorString("gpu: handle used after Destroy")
	// ErrWrongDevice: a handle of one device was passed to another.
	ErrWrongDevice error = errorString("gpu: handle belongs to another device")
	// ErrForeignContext: a handle or context other than the device's
	// primary context, which streamalloc does not support (foreign.go).
	ErrForeignContext error = errorString("gpu: handle of a context other than the device's primary context")
	// ErrWrongThread: a per-thread default stream used from an OS thread
	// other than the one that adopted it (foreign.go). It matches
	// ErrDestroyed too: from any other thread the stream can take no work,
	// as if destroyed, so code that falls back when a stream is gone
	// (synchronizing the device instead of waiting on the stream, as
	// resources do when they release memory last used there) does the same
	// here.
	ErrWrongThread error = wrongThread{}
)

type wrongThread struct{}

func (wrongThread) Error() string { return "gpu: per-thread default stream used on another OS thread" }

// Is makes ErrWrongThread match ErrDestroyed.
func (wrongThread) Is(target error) bool { return target == ErrDestroyed }

type errorString string

func (e errorString) Error() string { return string(e) }
