// Driver calls the simulator models, named for fault injection (FailNext)
// and for error messages. Every gpu.Device, Stream, Event, MemPool and
// Module method that reaches the driver is one Op; an injected failure is
// checked after handle validation (which never reaches the driver) and
// before anything changes, so a failed call leaves no trace.

package sim

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// Op names a driver call, for FailNext.
type Op int

// The driver calls of the gpu interface. OpCopy covers the three copy
// directions.
const (
	OpMalloc                  Op = iota + 1 // cuMemAlloc (Device.Malloc)
	OpFree                                  // cuMemFree (Device.Free)
	OpMallocAsync                           // cuMemAllocAsync
	OpMallocFromPoolAsync                   // cuMemAllocFromPoolAsync
	OpFreeAsync                             // cuMemFreeAsync
	OpMallocManaged                         // cuMemAllocManaged
	OpMallocHost                            // cuMemAllocHost
	OpFreeHost                              // cuMemFreeHost
	OpMemGetInfo                            // cuMemGetInfo
	OpCtxSynchronize                        // cuCtxSynchronize (Device.Synchronize)
	OpStreamCreate                          // cuStreamCreate
	OpStreamDestroy                         // cuStreamDestroy
	OpStreamSynchronize                     // cuStreamSynchronize
	OpStreamQuery                           // cuStreamQuery
	OpStreamWaitEvent                       // cuStreamWaitEvent
	OpEventCreate                           // cuEventCreate
	OpEventDestroy                          // cuEventDestroy
	OpEventRecord                           // cuEventRecord
	OpEventQuery                            // cuEventQuery
	OpEventSynchronize                      // cuEventSynchronize
	OpEventElapsedTime                      // cuEventElapsedTime
	OpDeviceGetDefaultMemPool               // cuDeviceGetDefaultMemPool
	OpMemPoolCreate                         // cuMemPoolCreate
	OpMemPoolDestroy                        // cuMemPoolDestroy
	OpMemPoolGetAttribute                   // cuMemPoolGetAttribute
	OpMemPoolSetAttribute                   // cuMemPoolSetAttribute
	OpMemPoolTrimTo                         // cuMemPoolTrimTo
	OpMemset                                // cuMemsetD8Async
	OpCopy                                  // cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync
	OpModuleLoad                            // cuModuleLoadData
	OpModuleUnload                          // cuModuleUnload
	OpModuleGetFunction                     // cuModuleGetFunction
	OpLaunch                                // cuLaunchKernel
	OpMemPrefetch                           // cuMemPrefetchAsync
	OpMemAdvise                             // cuMemAdvise
	opCount
)

var opNames = [...]string{
	OpMalloc:                  "cuMemAlloc",
	OpFree:                    "cuMemFree",
	OpMallocAsync:             "cuMemAllocAsync",
	OpMallocFromPoolAsync:     "cuMemAllocFromPoolAsync",
	OpFreeAsync:               "cuMemFreeAsync",
	OpMallocManaged:           "cuMemAllocManaged",
	OpMallocHost:              "cuMemAllocHost",
	OpFreeHost:                "cuMemFreeHost",
	OpMemGetInfo:              "cuMemGetInfo",
	OpCtxSynchronize:          "cuCtxSynchronize",
	OpStreamCreate:            "cuStreamCreate",
	OpStreamDestroy:           "cuStreamDestroy",
	OpStreamSynchronize:       "cuStreamSynchronize",
	OpStreamQuery:             "cuStreamQuery",
	OpStreamWaitEvent:         "cuStreamWaitEvent",
	OpEventCreate:             "cuEventCreate",
	OpEventDestroy:            "cuEventDestroy",
	OpEventRecord:             "cuEventRecord",
	OpEventQuery:              "cuEventQuery",
	OpEventSynchronize:        "cuEventSynchronize",
	OpEventElapsedTime:        "cuEventElapsedTime",
	OpDeviceGetDefaultMemPool: "cuDeviceGetDefaultMemPool",
	OpMemPoolCreate:           "cuMemPoolCreate",
	OpMemPoolDestroy:          "cuMemPoolDestroy",
	OpMemPoolGetAttribute:     "cuMemPoolGetAttribute",
	OpMemPoolSetAttribute:     "cuMemPoolSetAttribute",
	OpMemPoolTrimTo:           "cuMemPoolTrimTo",
	OpMemset:                  "cuMemsetD8Async",
	OpCopy:                    "cuMemcpyAsync",
	OpModuleLoad:              "cuModuleLoadData",
	OpModuleUnload:            "cuModuleUnload",
	OpModuleGetFunction:       "cuModuleGetFunction",
	OpLaunch:                  "cuLaunchKernel",
	OpMemPrefetch:             "cuMemPrefetchAsync",
	OpMemAdvise:               "cuMemAdvise",
}

// String returns the driver function's name, e.g. "cuMemAllocAsync".
func (o Op) String() string {
	if o > 0 && o < opCount {
		return opNames[o]
	}
	return fmt.Sprintf("sim.Op(%d)", int(o))
}

// driverErr is the error the driver returns from call name with code.
func driverErr(name string, code gpu.Code) error {
	return &gpu.Error{Op: name, Code: code}
}

// driverErrf is driverErr with a detail message; it still matches code.
func driverErrf(name string, code gpu.Code, format string, args ...any) error {
	return fmt.Errorf("%w: %s", &gpu.Error{Op: name, Code: code}, fmt.Sprintf(format, args...))
}

// wrap is a backend error (ErrDestroyed, ErrWrongDevice, ...) from call
// name.
func wrap(name string, err error) error {
	return fmt.Errorf("%s: %w", name, err)
}

// injected turns an error given to FailNext into what the call returns: a
// gpu.Code becomes a *gpu.Error naming the call, anything else is
// wrapped with the call's name.
func injected(name string, err error) error {
	if r, ok := err.(gpu.Code); ok {
		return &gpu.Error{Op: name, Code: r}
	}
	return wrap(name, err)
}
