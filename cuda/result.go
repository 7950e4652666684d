// Results and errors of driver calls.
//
// Every driver call returns a CUresult; this file gives it a Go type,
// Result, and turns a failed call into an *Error naming the entry point.
// A non-zero Result is itself an error, so the Result constants double as
// sentinels: an *Error whose Code is ErrOutOfMemory matches
// errors.Is(err, cuda.ErrOutOfMemory).
//
// # Matching statuses of other packages
//
// Layers above this one keep their own vocabulary of driver statuses (the
// backend interface's gpu.Code) and must not need this package to speak
// it, while this package must not import them. The rule that joins them:
// a driver status is identified by its CUresult number. Result has a
// DriverCode method that gives the number, and a Result or *Error matches
// any target with a DriverCode method returning the same number. So an
// *Error returned unchanged to the backend interface matches
// gpu.ErrOutOfMemory as well as cuda.ErrOutOfMemory: no translation at the
// boundary, nothing allocated per call, and the not-ready answer of a
// query, polled on hot paths, stays free of allocation when matched.
//
// Invariants: Check returns nil exactly for Success; a match by number
// never allocates.
package cuda

import (
	"errors"
	"fmt"
)

// Result is a CUresult: the status code every driver API call returns.
// A non-zero Result is an error.
type Result int32

// CUresult values used by this package and its callers. The numbers are
// the driver's (cuda.h); the names drop the CUDA_ERROR_ prefix.
const (
	Success              Result = 0
	ErrInvalidValue      Result = 1
	ErrOutOfMemory       Result = 2
	ErrNotInitialized    Result = 3
	ErrDeinitialized     Result = 4
	ErrNoDevice          Result = 100
	ErrInvalidDevice     Result = 101
	ErrInvalidImage      Result = 200
	ErrInvalidContext    Result = 201
	ErrInvalidPTX        Result = 218
	ErrPeerUnsupported   Result = 217
	ErrPeerEnabled       Result = 704
	ErrPeerNotEnabled    Result = 705
	ErrNotFound          Result = 500
	ErrInvalidHandle     Result = 400
	ErrNotReady          Result = 600
	ErrIllegalAddress    Result = 700
	ErrLaunchOutOfRes    Result = 701
	ErrMisalignedAddress Result = 716
	ErrLaunchTimeout     Result = 702
	ErrLaunchFailed      Result = 719
	ErrNotPermitted      Result = 800
	ErrNotSupported      Result = 801
	ErrStreamCapture     Result = 900
	ErrUnknown           Result = 999
)

// resultNames holds the enum names of cuda.h for the codes above, so that
// errors read the same with or without a loaded driver.
var resultNames = map[Result]string{
	Success:              "CUDA_SUCCESS",
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
	ErrNotFound:          "CUDA_ERROR_NOT_FOUND",
	ErrInvalidHandle:     "CUDA_ERROR_INVALID_HANDLE",
	ErrNotReady:          "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress:    "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrLaunchOutOfRes:    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrMisalignedAddress: "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrLaunchTimeout:     "CUDA_ERROR_LAUNCH_TIMEOUT",
	ErrLaunchFailed:      "CUDA_ERROR_LAUNCH_FAILED",
	ErrNotPermitted:      "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported:      "CUDA_ERROR_NOT_SUPPORTED",
	ErrStreamCapture:     "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrUnknown:           "CUDA_ERROR_UNKNOWN",
}

// Name returns the cuda.h name of r, or "CUresult(N)" for a code this
// package does not name.
func (r Result) Name() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error implements error. It is what a sentinel prints when it is not
// wrapped in an *Error.
func (r Result) Error() string { return r.Name() }

// DriverCode returns r's CUresult number, so that statuses of other
// packages that follow the same rule match r.
func (r Result) DriverCode() int32 { return int32(r) }

// driverCoder is a driver status of any package: one that gives its
// CUresult number.
type driverCoder interface{ DriverCode() int32 }

// Is reports whether target is a driver status with r's number: a Result,
// or a status of another package with a DriverCode method (gpu.Code). It
// does not allocate.
func (r Result) Is(target error) bool {
	t, ok := target.(driverCoder)
	return ok && t.DriverCode() == int32(r)
}

// Error is a failed driver call: which call failed and the CUresult it
// returned. Errors.Is matches it against its Code.
type Error struct {
	Op   string // the driver entry point, e.g. "cuMemAllocAsync"
	Code Result
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Code.Name(), int32(e.Code))
}

// Unwrap returns the Result, so errors.Is(err, cuda.ErrNotReady) works.
func (e *Error) Unwrap() error { return e.Code }

// Is reports whether target is a driver status with e's number (see
// Result.Is): cuda.ErrNotReady, or gpu.ErrNotReady above this layer.
// errors.Is would find a Result target through Unwrap too, but Unwrap
// boxes the Code, which allocates for codes above 255; asking Is first
// keeps the common poll, errors.Is(err, ErrNotReady) on a not-ready query,
// free of allocation.
func (e *Error) Is(target error) bool { return e.Code.Is(target) }

// Check returns nil for Success and an *Error naming op otherwise.
func Check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Code: r}
}

// ErrNoDriver is returned by every entry point when libcuda.so.1 cannot be
// loaded (no NVIDIA driver on this machine, or a build without cgo).
var ErrNoDriver = errors.New("cuda: no CUDA driver (libcuda.so.1 could not be loaded)")
