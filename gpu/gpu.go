// Package gpu is the backend interface that every memory resource of
// streamalloc is written against: devices, streams, events, synchronous and
// stream-ordered memory, the driver's memory pools, sets and copies, and
// kernel launches.
//
// Two packages implement it: gpu/cudagpu, over the real driver (package
// cuda), and gpu/sim, a simulated GPU that behaves like the driver for
// everything streamalloc touches. Code above this layer never learns which
// one it runs on, so all of it can be tested without a GPU.
//
// # Stream order
//
// Every method whose name ends in Async, and Launch, enqueues work on a
// stream and returns at once. Work on one stream runs in the order it was
// enqueued. Work on two streams is unordered unless an event orders it:
// e.Record(s1) then s2.WaitEvent(e) makes everything enqueued on s2 after the
// wait run after everything enqueued on s1 before the record. The host sees
// results only after Stream.Synchronize, Event.Synchronize, or a Query that
// returned nil.
//
// # Handles
//
// Streams, events, pools and modules are handles. Using a nil handle
// returns an error matching ErrInvalidHandle; using a destroyed one returns
// an error matching ErrDestroyed; a handle of one device passed to another
// returns an error matching ErrWrongDevice (so does a handle of another
// backend, such as a simulator's stream given to a CUDA device). None of
// them reaches the driver, where such a handle is undefined behaviour.
// Destroy must not race with other uses of the same handle (as in CUDA
// itself).
//
// # Sizes
//
// Sizes are ints, counted in bytes. A negative size returns an error
// matching ErrInvalidValue; a size no device could hold returns one matching
// ErrOutOfMemory.
//
// # Errors
//
// The driver's statuses are Code values, cuda.h's CUresult numbers under
// cuda.h's names; a backend returns them as an *Error naming the driver
// call. Backend errors the driver has no code for are ErrNoDriver,
// ErrDestroyed and ErrWrongDevice. Match all of them with errors.Is: the
// CUDA backend's errors come from the driver binding unchanged and match
// the Code of their number (see errors.go).
package gpu

import (
	"sync/atomic"
	"time"
)

// DevicePtr is an address in a device's (virtual) memory. Zero is the null
// pointer and is never returned by a successful allocation of a non-zero
// size.
type DevicePtr uint64

// Backend is one implementation of the interface: the real driver or the
// simulator.
type Backend interface {
	// Name is "cuda" or "sim".
	Name() string
	// Simulated reports whether devices are simulated.
	Simulated() bool
	// DriverVersion is the driver's version as cuDriverGetVersion reports
	// it (1000*major + 10*minor).
	DriverVersion() (int, error)
	// DeviceCount is the number of devices.
	DeviceCount() (int, error)
	// Device opens device ordinal (retaining its primary context on CUDA).
	// An ordinal out of range returns an error matching ErrInvalidDevice.
	// Opening the same ordinal twice returns the same Device.
	Device(ordinal int) (Device, error)
}

// Properties describe a device.
type Properties struct {
	Name                 string
	Ordinal              int
	TotalMemory          uint64
	ComputeMajor         int
	ComputeMinor         int
	MemoryPoolsSupported bool
	Simulated            bool
}

// Device is one GPU and its primary context. All methods are safe for
// concurrent use by many goroutines.
type Device interface {
	Ordinal() int
	Properties() Properties
	// MemGetInfo is cuMemGetInfo: free and total device memory in bytes.
	MemGetInfo() (free, total uint64, err error)
	// Synchronize waits for all work on the device (cuCtxSynchronize).
	Synchronize() error

	// NewStream creates a non-blocking stream.
	NewStream() (Stream, error)
	// NewEvent creates an event; timing events can measure elapsed time,
	// others are cheaper to record and wait on.
	NewEvent(timing bool) (Event, error)

	// Malloc and Free are cuMemAlloc and cuMemFree: synchronous.
	Malloc(size int) (DevicePtr, error)
	Free(p DevicePtr) error
	// MallocAsync and FreeAsync are cuMemAllocAsync and cuMemFreeAsync on
	// the device's current pool (the default pool unless changed).
	MallocAsync(size int, s Stream) (DevicePtr, error)
	FreeAsync(p DevicePtr, s Stream) error
	// MallocFromPoolAsync is cuMemAllocFromPoolAsync; free with FreeAsync.
	MallocFromPoolAsync(size int, pool MemPool, s Stream) (DevicePtr, error)
	// MallocManaged is cuMemAllocManaged (global attach); free with Free.
	MallocManaged(size int) (DevicePtr, error)
	// MallocHost is cuMemAllocHost: page-locked host memory, returned as a
	// slice of exactly size bytes. Free it with FreeHost.
	MallocHost(size int) ([]byte, error)
	FreeHost(b []byte) error

	// DefaultMemPool is the device's default stream-ordered pool.
	DefaultMemPool() (MemPool, error)
	// NewMemPool creates a pool of device memory on this device.
	NewMemPool() (MemPool, error)

	// MemsetD8Async sets n bytes at p to v.
	MemsetD8Async(p DevicePtr, v byte, n int, s Stream) error
	// CopyHtoDAsync copies src to dst. Ordinary Go memory may be reused
	// once the call returns (the driver stages it); MallocHost memory is
	// read when the stream reaches the copy and must not be written until
	// the copy has completed.
	CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error
	// CopyDtoHAsync copies len(dst) bytes from src into dst. dst holds the
	// bytes once the stream has been synchronized past the copy.
	CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error
	// CopyDtoDAsync copies n bytes from src to dst.
	CopyDtoDAsync(dst, src DevicePtr, n int, s Stream) error

	// LoadModule loads PTX text. On the simulator, every .entry of the
	// text must have a Go implementation registered with sim.RegisterKernel.
	LoadModule(ptx string) (Module, error)
	// Launch enqueues f on s. Arguments are DevicePtr, int32, uint32, int64,
	// uint64, float32 or float64, in the order of the kernel's parameters.
	Launch(f Function, grid, block Dim3, sharedMem int, s Stream, args ...any) error

	// Adopter wraps streams, events and pools made elsewhere (foreign.go).
	Adopter
}

// Stream is a queue of work on a device.
type Stream interface {
	// ID is unique among all streams of the process and never reused, so
	// resources can key per-stream state by it. It is never zero.
	ID() uint64
	Device() Device
	// Synchronize blocks until all work enqueued so far has completed.
	Synchronize() error
	// Query returns nil if all work enqueued so far has completed and an
	// error matching ErrNotReady if not.
	Query() error
	// WaitEvent makes work enqueued on the stream after this call wait
	// until e completes. It does not block the host.
	WaitEvent(e Event) error
	// Destroy releases the stream once its work is done. Work already
	// enqueued still runs.
	Destroy() error
}

// streamIDs is the one counter behind every backend's stream IDs.
var streamIDs atomic.Uint64

// NewStreamID returns a stream ID never returned before in this process;
// the first is 1. Backends number their streams with it, so that IDs stay
// unique when several backends (the GPU and a simulator) share a process.
func NewStreamID() uint64 { return streamIDs.Add(1) }

// Event marks a point in a stream.
type Event interface {
	Device() Device
	// Record captures the work enqueued on s so far; the event completes
	// when that work has completed. Re-recording moves the event.
	Record(s Stream) error
	// Query returns nil if the event has completed (or was never
	// recorded) and an error matching ErrNotReady if not.
	Query() error
	// Synchronize blocks until the event has completed.
	Synchronize() error
	// ElapsedSince is the time between start's completion and this
	// event's; both must be timing events that have completed.
	ElapsedSince(start Event) (time.Duration, error)
	Destroy() error
}

// PoolAttr is a CUmemPool_attribute.
type PoolAttr int

// Pool attributes; the values are cuda.h's. The three reuse policies are
// booleans (0 or 1); the rest are byte counts. The two high-water marks may
// only be set to 0, which resets them.
const (
	PoolReuseFollowEventDependencies   PoolAttr = 1
	PoolReuseAllowOpportunistic        PoolAttr = 2
	PoolReuseAllowInternalDependencies PoolAttr = 3
	PoolReleaseThreshold               PoolAttr = 4
	PoolReservedMemCurrent             PoolAttr = 5
	PoolReservedMemHigh                PoolAttr = 6
	PoolUsedMemCurrent                 PoolAttr = 7
	PoolUsedMemHigh                    PoolAttr = 8
)

// MemPool is a driver stream-ordered memory pool (CUmemoryPool).
type MemPool interface {
	Device() Device
	// Attribute reads a; Set writes it. An attribute outside the list
	// above returns an error matching ErrInvalidValue.
	Attribute(a PoolAttr) (uint64, error)
	SetAttribute(a PoolAttr, v uint64) error
	// TrimTo releases unused memory until the pool holds at most
	// minBytesToKeep reserved bytes, as far as allocations allow.
	TrimTo(minBytesToKeep uint64) error
	// Destroy destroys a pool made by NewMemPool. Destroying the default
	// pool returns an error matching ErrInvalidValue.
	Destroy() error
}

// Module is a loaded PTX module.
type Module interface {
	// Function looks a kernel up by its entry name; an unknown name
	// returns an error matching ErrNotFound.
	Function(name string) (Function, error)
	Unload() error
}

// Function is a kernel in a loaded module.
type Function interface {
	Name() string
}

// Dim3 is a grid or block shape. Zero components count as 1.
type Dim3 struct{ X, Y, Z int }
