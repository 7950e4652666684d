// Device: one GPU and its primary context; synchronous and stream-ordered
// memory, sets and copies.
//
// Pinned host memory from MallocHost is C memory handed out as a Go
// slice; the device remembers each allocation (its first byte and size)
// so that FreeHost refuses anything else, such as Go memory or a slice
// freed before, with ErrInvalidValue instead of passing it to the driver.

package cudagpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// Device is the CUDA implementation of gpu.Device.
type Device struct {
	ordinal int
	dev     cuda.Device
	ctx     cuda.Context
	props   gpu.Properties
	defPool *MemPool // nil when the device has no memory pools

	hostMu sync.Mutex
	host   map[*byte]int // live MallocHost allocations: first byte -> size
	// poolHost are the live allocations from host-located pools: first
	// byte -> size (managed.go).
	poolHost map[*byte]int

	captures atomic.Int32 // captures begun and not ended (capture.go)
	foreign  handleTable  // raw handle -> wrapper (foreign.go)
	// exportable holds the live physical allocations made by
	// CreateExportablePhysical: gpu.Physical -> the gpu.HandleType set
	// they were made with (vmmshare.go).
	exportable sync.Map
	// fabric is the remembered answer to whether the process may make
	// fabric memory (fabric.go).
	fabric fabricAsk
}

// Context is the device's primary context, for code that calls package
// cuda directly.
func (d *Device) Context() cuda.Context { return d.ctx }

// Handle is the driver's CUdevice.
func (d *Device) Handle() cuda.Device { return d.dev }

// Ordinal is the device's ordinal.
func (d *Device) Ordinal() int { return d.ordinal }

// Properties are read once, when the device is opened.
func (d *Device) Properties() gpu.Properties { return d.props }

// MemGetInfo is cuMemGetInfo.
func (d *Device) MemGetInfo() (free, total uint64, err error) { return d.ctx.MemGetInfo() }

// Synchronize is cuCtxSynchronize.
func (d *Device) Synchronize() error { return d.ctx.Synchronize() }

// Malloc is cuMemAlloc.
func (d *Device) Malloc(n int) (gpu.DevicePtr, error) {
	if err := allocSize("Malloc", n); err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAlloc(uint64(n))
	return gpu.DevicePtr(p), err
}

// Free is cuMemFree.
func (d *Device) Free(p gpu.DevicePtr) error {
	if p == 0 {
		return fmt.Errorf("cudagpu: Free: null pointer: %w", gpu.ErrInvalidValue)
	}
	return d.ctx.MemFree(cuda.DevicePtr(p))
}

// MallocAsync is cuMemAllocAsync on s, from the device's current pool.
func (d *Device) MallocAsync(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	cs, err := d.stream("MallocAsync", s)
	if err != nil {
		return 0, err
	}
	if err := allocSize("MallocAsync", n); err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAllocAsync(uint64(n), cs.h)
	return gpu.DevicePtr(p), err
}

// FreeAsync is cuMemFreeAsync on s.
func (d *Device) FreeAsync(p gpu.DevicePtr, s gpu.Stream) error {
	cs, err := d.stream("FreeAsync", s)
	if err != nil {
		return err
	}
	if p == 0 {
		return fmt.Errorf("cudagpu: FreeAsync: null pointer: %w", gpu.ErrInvalidValue)
	}
	return d.ctx.MemFreeAsync(cuda.DevicePtr(p), cs.h)
}

// MallocFromPoolAsync is cuMemAllocFromPoolAsync.
func (d *Device) MallocFromPoolAsync(n int, pool gpu.MemPool, s gpu.Stream) (gpu.DevicePtr, error) {
	cs, err := d.stream("MallocFromPoolAsync", s)
	if err != nil {
		return 0, err
	}
	cp, err := d.pool("MallocFromPoolAsync", pool)
	if err != nil {
		return 0, err
	}
	if cp.imported {
		return 0, fmt.Errorf("cudagpu: MallocFromPoolAsync: an imported pool allocates nothing: %w", gpu.ErrNotSupported)
	}
	if cp.host {
		return 0, fmt.Errorf("cudagpu: MallocFromPoolAsync: the pool is located on the host (MallocHostFromPoolAsync): %w", gpu.ErrInvalidValue)
	}
	if err := allocSize("MallocFromPoolAsync", n); err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAllocFromPoolAsync(uint64(n), cp.h, cs.h)
	return gpu.DevicePtr(p), err
}

// MallocManaged is cuMemAllocManaged with global attachment.
func (d *Device) MallocManaged(n int) (gpu.DevicePtr, error) {
	if err := allocSize("MallocManaged", n); err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAllocManaged(uint64(n), cuda.MemAttachGlobal)
	return gpu.DevicePtr(p), err
}

// MallocHost is cuMemAllocHost. The slice is C memory, outside the Go
// heap: it stays valid until FreeHost, and must not be used after.
func (d *Device) MallocHost(n int) ([]byte, error) {
	if err := allocSize("MallocHost", n); err != nil {
		return nil, err
	}
	p, err := d.ctx.MemAllocHost(uint64(n))
	if err != nil {
		return nil, err
	}
	b := unsafe.Slice((*byte)(p), n)
	d.hostMu.Lock()
	d.host[&b[0]] = n
	d.hostMu.Unlock()
	return b, nil
}

// FreeHost frees a slice returned by MallocHost (it must start where the
// allocation starts). Anything else, an empty slice included, returns
// ErrInvalidValue and frees nothing.
func (d *Device) FreeHost(b []byte) error {
	if cap(b) == 0 {
		return fmt.Errorf("cudagpu: FreeHost: empty slice: %w", gpu.ErrInvalidValue)
	}
	first := unsafe.SliceData(b)
	d.hostMu.Lock()
	_, ok := d.host[first]
	if ok {
		delete(d.host, first)
	}
	d.hostMu.Unlock()
	if !ok {
		return fmt.Errorf("cudagpu: FreeHost: %p is not a live MallocHost allocation: %w", first, gpu.ErrInvalidValue)
	}
	return d.ctx.MemFreeHost(unsafe.Pointer(first))
}

// DefaultMemPool is the device's default pool. Devices without memory
// pools return ErrNotSupported.
func (d *Device) DefaultMemPool() (gpu.MemPool, error) {
	if d.defPool == nil {
		return nil, fmt.Errorf("cudagpu: device %d has no memory pools: %w", d.ordinal, gpu.ErrNotSupported)
	}
	return d.defPool, nil
}

// NewMemPool creates a pool of device memory on this device.
func (d *Device) NewMemPool() (gpu.MemPool, error) {
	h, err := d.ctx.MemPoolCreate(d.dev)
	if err != nil {
		return nil, err
	}
	p := &MemPool{dev: d, h: h}
	d.foreign.addPool(p)
	return p, nil
}

// MemsetD8Async is cuMemsetD8Async.
func (d *Device) MemsetD8Async(p gpu.DevicePtr, v byte, n int, s gpu.Stream) error {
	cs, err := d.stream("MemsetD8Async", s)
	if err != nil {
		return err
	}
	if err := size("MemsetD8Async", n); err != nil || n == 0 {
		return err
	}
	return d.ctx.MemsetD8Async(cuda.DevicePtr(p), v, uint64(n), cs.h)
}

// CopyHtoDAsync is cuMemcpyHtoDAsync. From Go memory the driver stages
// src before returning, so src may be reused at once; from MallocHost
// memory the copy is truly asynchronous, and src must stay unchanged
// until the stream has passed the copy.
func (d *Device) CopyHtoDAsync(dst gpu.DevicePtr, src []byte, s gpu.Stream) error {
	cs, err := d.stream("CopyHtoDAsync", s)
	if err != nil {
		return err
	}
	if err := d.captureCopy("CopyHtoDAsync", cs, src); err != nil {
		return err
	}
	return d.ctx.MemcpyHtoDAsync(cuda.DevicePtr(dst), src, cs.h)
}

// CopyDtoHAsync is cuMemcpyDtoHAsync. Into Go memory the driver completes
// the copy before returning; into MallocHost memory, dst holds the bytes
// once the stream has been synchronized past the copy.
func (d *Device) CopyDtoHAsync(dst []byte, src gpu.DevicePtr, s gpu.Stream) error {
	cs, err := d.stream("CopyDtoHAsync", s)
	if err != nil {
		return err
	}
	if err := d.captureCopy("CopyDtoHAsync", cs, dst); err != nil {
		return err
	}
	return d.ctx.MemcpyDtoHAsync(dst, cuda.DevicePtr(src), cs.h)
}

// CopyDtoDAsync is cuMemcpyDtoDAsync.
func (d *Device) CopyDtoDAsync(dst, src gpu.DevicePtr, n int, s gpu.Stream) error {
	cs, err := d.stream("CopyDtoDAsync", s)
	if err != nil {
		return err
	}
	if err := size("CopyDtoDAsync", n); err != nil || n == 0 {
		return err
	}
	return d.ctx.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), uint64(n), cs.h)
}

// String is "cuda:N".
func (d *Device) String() string { return fmt.Sprintf("cuda:%d", d.ordinal) }
