// The view a kernel has of a launch: its configuration, its arguments,
// and device memory.
//
// Views of device memory are bounds-checked against the mapped
// allocations of the launch's device; an access outside them is an error
// matching gpu.ErrIllegalAddress, which the kernel returns (failing the
// stream, as a fault would). Byte views alias device memory, so what the
// kernel does to them is what the race detector checks. Atomic operations
// are relaxed: they are neither ordered nor reported.

package sim

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// Launch is one kernel launch, as its Go implementation sees it.
type Launch struct {
	Entry       string   // the PTX entry name
	Grid, Block gpu.Dim3 // zero components are 1
	SharedMem   int
	// Args are the launch arguments, as passed to Device.Launch.
	Args []any

	dev    *Device
	fn     KernelFunc
	stream uint64
}

// Stream returns the ID of the stream the kernel runs on.
func (l *Launch) Stream() uint64 { return l.stream }

func (l *Launch) arg(i int) (any, error) {
	if i < 0 || i >= len(l.Args) {
		return nil, fmt.Errorf("%w: kernel %s: no argument %d of %d", &gpu.Error{Op: "cuLaunchKernel", Code: gpu.ErrInvalidValue}, l.Entry, i, len(l.Args))
	}
	return l.Args[i], nil
}

// ArgUint64 returns 64-bit argument i (a DevicePtr, uint64 or int64).
func (l *Launch) ArgUint64(i int) (uint64, error) {
	a, err := l.arg(i)
	if err != nil {
		return 0, err
	}
	switch v := a.(type) {
	case gpu.DevicePtr:
		return uint64(v), nil
	case uint64:
		return v, nil
	case int64:
		return uint64(v), nil
	}
	return 0, fmt.Errorf("%w: kernel %s: argument %d is %T, not 64-bit", &gpu.Error{Op: "cuLaunchKernel", Code: gpu.ErrInvalidValue}, l.Entry, i, a)
}

// ArgPtr returns argument i as a device pointer.
func (l *Launch) ArgPtr(i int) (gpu.DevicePtr, error) {
	v, err := l.ArgUint64(i)
	return gpu.DevicePtr(v), err
}

// ArgUint32 returns 32-bit argument i (a uint32 or int32).
func (l *Launch) ArgUint32(i int) (uint32, error) {
	a, err := l.arg(i)
	if err != nil {
		return 0, err
	}
	switch v := a.(type) {
	case uint32:
		return v, nil
	case int32:
		return uint32(v), nil
	}
	return 0, fmt.Errorf("%w: kernel %s: argument %d is %T, not 32-bit", &gpu.Error{Op: "cuLaunchKernel", Code: gpu.ErrInvalidValue}, l.Entry, i, a)
}

// Chunks calls fn on consecutive pieces of the n bytes of device memory at
// p; off is each piece's offset from p. Pieces alias device memory. If the
// range is not inside one allocation, Chunks touches nothing and returns
// an error matching gpu.ErrIllegalAddress. An error from fn stops the
// walk and is returned.
func (l *Launch) Chunks(p gpu.DevicePtr, n int, fn func(off int, b []byte) error) error {
	l.dev.touchManaged(p, n)
	return l.dev.chunks("cuLaunchKernel", p, n, fn)
}

// Bytes returns the n bytes at p as one slice aliasing device memory. The
// backing of allocations over 64 MiB is in 2 MiB pages: a range crossing a
// page boundary there is an error matching gpu.ErrNotSupported (use
// Chunks). Outside any allocation: an error matching gpu.ErrIllegalAddress.
func (l *Launch) Bytes(p gpu.DevicePtr, n int) ([]byte, error) {
	var out []byte
	err := l.Chunks(p, n, func(off int, b []byte) error {
		if off > 0 || len(b) < n {
			return fmt.Errorf("sim: kernel %s: [%#x, +%d) crosses a 2 MiB backing page; use Launch.Chunks: %w", l.Entry, uint64(p), n, gpu.ErrNotSupported)
		}
		out = b
		return nil
	})
	return out, err
}

// word returns a pointer to the aligned word of size bytes at p.
func (l *Launch) word(p gpu.DevicePtr, size int) (unsafe.Pointer, error) {
	if uint64(p)%uint64(size) != 0 {
		return nil, fmt.Errorf("%w: kernel %s: %d-byte access at %#x", &gpu.Error{Op: "cuLaunchKernel", Code: gpu.ErrMisalignedAddress}, l.Entry, size, uint64(p))
	}
	b, err := l.Bytes(p, size)
	if err != nil {
		return nil, err
	}
	return unsafe.Pointer(unsafe.SliceData(b)), nil
}

// LoadUint32 atomically loads the uint32 at p (4-byte aligned).
func (l *Launch) LoadUint32(p gpu.DevicePtr) (uint32, error) {
	w, err := l.word(p, 4)
	if err != nil {
		return 0, err
	}
	raceDisable()
	v := atomic.LoadUint32((*uint32)(w))
	raceEnable()
	return v, nil
}

// StoreUint32 atomically stores v at p (4-byte aligned).
func (l *Launch) StoreUint32(p gpu.DevicePtr, v uint32) error {
	w, err := l.word(p, 4)
	if err != nil {
		return err
	}
	raceDisable()
	atomic.StoreUint32((*uint32)(w), v)
	raceEnable()
	return nil
}

// LoadUint64 atomically loads the uint64 at p (8-byte aligned).
func (l *Launch) LoadUint64(p gpu.DevicePtr) (uint64, error) {
	w, err := l.word(p, 8)
	if err != nil {
		return 0, err
	}
	raceDisable()
	v := atomic.LoadUint64((*uint64)(w))
	raceEnable()
	return v, nil
}

// StoreUint64 atomically stores v at p (8-byte aligned).
func (l *Launch) StoreUint64(p gpu.DevicePtr, v uint64) error {
	w, err := l.word(p, 8)
	if err != nil {
		return err
	}
	raceDisable()
	atomic.StoreUint64((*uint64)(w), v)
	raceEnable()
	return nil
}

// CompareAndSwapUint32 is an atomic compare-and-swap of the uint32 at p.
func (l *Launch) CompareAndSwapUint32(p gpu.DevicePtr, old, new uint32) (bool, error) {
	w, err := l.word(p, 4)
	if err != nil {
		return false, err
	}
	raceDisable()
	ok := atomic.CompareAndSwapUint32((*uint32)(w), old, new)
	raceEnable()
	return ok, nil
}

// AddUint32 atomically adds delta to the uint32 at p (4-byte aligned) and
// returns the new value.
func (l *Launch) AddUint32(p gpu.DevicePtr, delta uint32) (uint32, error) {
	w, err := l.word(p, 4)
	if err != nil {
		return 0, err
	}
	raceDisable()
	v := atomic.AddUint32((*uint32)(w), delta)
	raceEnable()
	return v, nil
}

// AddUint64 atomically adds delta to the uint64 at p (8-byte aligned) and
// returns the new value.
func (l *Launch) AddUint64(p gpu.DevicePtr, delta uint64) (uint64, error) {
	w, err := l.word(p, 8)
	if err != nil {
		return 0, err
	}
	raceDisable()
	v := atomic.AddUint64((*uint64)(w), delta)
	raceEnable()
	return v, nil
}

// CompareAndSwapUint64 is an atomic compare-and-swap of the uint64 at p.
func (l *Launch) CompareAndSwapUint64(p gpu.DevicePtr, old, new uint64) (bool, error) {
	w, err := l.word(p, 8)
	if err != nil {
		return false, err
	}
	raceDisable()
	ok := atomic.CompareAndSwapUint64((*uint64)(w), old, new)
	raceEnable()
	return ok, nil
}

// ReportRead tells the race detector that the kernel read b from code it
// does not instrument (a //go:norace loop, much faster under -race than an
// instrumented one). Without -race it does nothing.
func (l *Launch) ReportRead(b []byte) { raceRead(b) }

// ReportWrite is ReportRead for writes.
func (l *Launch) ReportWrite(b []byte) { raceWrite(b) }
