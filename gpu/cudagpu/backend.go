// Package cudagpu implements the gpu backend interface over the real CUDA
// driver (package cuda).
//
// # Design
//
// Open returns the process's one backend: the driver and its primary
// contexts are process-wide, so there is nothing to gain from two. A
// Device is opened once per ordinal and retains that device's primary
// context for the life of the process; every driver call passes that
// context, and package cuda makes it current on whatever OS thread the
// calling goroutine runs on (see package cuda's rule), so nothing here
// locks threads.
//
// # Handles
//
// Streams, events, pools and modules are Go values wrapping a driver
// handle. Each carries the Device it was made on and an atomic "destroyed"
// flag. Every use checks, before the driver sees the handle: a nil handle
// (ErrInvalidHandle), a handle of another device or of another backend
// such as the simulator (ErrWrongDevice), a destroyed one (ErrDestroyed).
// Destroy sets the flag with a compare-and-swap, so a second Destroy
// returns ErrDestroyed and the driver never sees a handle twice. As in
// CUDA, Destroy must not race with other uses of the same handle.
//
// # Sizes
//
// Negative sizes return ErrInvalidValue before any driver call, and so
// does an allocation of zero bytes, as cuMemAlloc does (cuMemAllocAsync
// would accept it; both backends refuse it, so callers see one rule), and
// freeing the null pointer or an empty host slice. Sets and copies of zero
// bytes do nothing once their handles are checked. A size no device can
// hold is the driver's out-of-memory error.
//
// # Errors
//
// Driver errors are the binding's *cuda.Error values, returned wrapped but
// unchanged: each matches the gpu.Code of its CUresult number with
// errors.Is (package cuda's rule), so callers match gpu's sentinels and
// never name package cuda. Open turns cuda.ErrNoDriver into
// gpu.ErrNoDriver, the one error with no number.
//
// # Costs
//
// MallocAsync, FreeAsync, Event.Record and Stream.WaitEvent are one cgo
// call each and allocate no Go memory on success.
package cudagpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// The types of this package implement the interface.
var (
	_ gpu.Backend  = (*Backend)(nil)
	_ gpu.Device   = (*Device)(nil)
	_ gpu.Stream   = (*Stream)(nil)
	_ gpu.Event    = (*Event)(nil)
	_ gpu.MemPool  = (*MemPool)(nil)
	_ gpu.Module   = (*Module)(nil)
	_ gpu.Function = (*Function)(nil)
)

// Backend is the CUDA implementation of gpu.Backend.
type Backend struct {
	mu   sync.Mutex
	devs map[int]*Device
}

var (
	openOnce sync.Once
	theOne   *Backend
	openErr  error
)

// Open returns the CUDA backend, loading and initializing the driver on
// first use. Without a driver the error matches gpu.ErrNoDriver; with a
// driver but no device, gpu.ErrNoDevice. Every call returns the same
// backend (or the same error).
//
// Open is the only place where the driver binding's errors are
// translated: cuda.ErrNoDriver becomes gpu.ErrNoDriver. No later call can
// meet it, since a Backend exists only once the driver has loaded, and
// every driver status matches gpu's Code of the same number as it is.
func Open() (gpu.Backend, error) {
	openOnce.Do(func() {
		if err := cuda.Init(); err != nil {
			if errors.Is(err, cuda.ErrNoDriver) {
				err = gpu.ErrNoDriver
			}
			openErr = fmt.Errorf("cudagpu: open: %w", err)
			return
		}
		theOne = &Backend{devs: make(map[int]*Device)}
	})
	if openErr != nil {
		return nil, openErr
	}
	return theOne, nil
}

// Name is "cuda".
func (b *Backend) Name() string { return "cuda" }

// Simulated is false.
func (b *Backend) Simulated() bool { return false }

// DriverVersion is cuDriverGetVersion's answer (13000 for CUDA 13.0).
func (b *Backend) DriverVersion() (int, error) { return cuda.DriverVersion() }

// DeviceCount is the number of devices the driver sees.
func (b *Backend) DeviceCount() (int, error) { return cuda.DeviceCount() }

// Device opens device ordinal, retaining its primary context for the
// life of the process. The same ordinal always gives the same *Device.
func (b *Backend) Device(ordinal int) (gpu.Device, error) {
	d, err := b.device(ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (b *Backend) device(ordinal int) (*Device, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.devs[ordinal]; ok {
		return d, nil
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cudagpu: device %d: %w", ordinal, err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cudagpu: device %d of %d: %w", ordinal, n, gpu.ErrInvalidDevice)
	}
	d, err := openDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cudagpu: device %d: %w", ordinal, err)
	}
	b.devs[ordinal] = d
	return d, nil
}

func openDevice(ordinal int) (*Device, error) {
	cd, err := cuda.GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	props := gpu.Properties{Ordinal: ordinal}
	if props.Name, err = cd.Name(); err != nil {
		return nil, err
	}
	if props.TotalMemory, err = cd.TotalMem(); err != nil {
		return nil, err
	}
	if props.ComputeMajor, props.ComputeMinor, err = cd.ComputeCapability(); err != nil {
		return nil, err
	}
	pools, err := cd.Attribute(cuda.AttrMemoryPoolsSupported)
	if err != nil {
		return nil, err
	}
	props.MemoryPoolsSupported = pools != 0
	ctx, err := cd.PrimaryCtxRetain()
	if err != nil {
		return nil, err
	}
	d := &Device{ordinal: ordinal, dev: cd, ctx: ctx, props: props, host: make(map[*byte]int), poolHost: make(map[*byte]int)}
	if props.MemoryPoolsSupported {
		h, err := cd.DefaultMemPool()
		if err != nil {
			return nil, errors.Join(err, cd.PrimaryCtxRelease())
		}
		d.defPool = &MemPool{dev: d, h: h, isDefault: true}
	}
	return d, nil
}
