// Device, managed and pinned host memory; sets and copies.
//
// Sizes are uint64 here, as in the driver; the layer above rejects
// negative sizes before they get this far. MemAllocAsync and MemFreeAsync
// are the hot calls of the whole module: one cgo call each, the pointer
// returned by value from C, no Go allocation unless the call fails.
//
// Copies from and to Go memory are pageable copies: the driver copies a
// host source into its own staging memory before cuMemcpyHtoDAsync
// returns, and completes a copy into pageable host memory before
// cuMemcpyDtoHAsync returns, so the Go buffer is only borrowed for the
// call, as cgo requires. Copies from and to pinned memory (MemAllocHost)
// are truly asynchronous; that memory is not Go's, so the driver may use
// it after the call returns.

package cuda

import "unsafe"

// DevicePtr is a CUdeviceptr.
type DevicePtr uint64

// MemAttachGlobal is CU_MEM_ATTACH_GLOBAL: managed memory accessible from
// any stream.
const MemAttachGlobal uint32 = 1

// MemAlloc allocates size bytes of device memory (cuMemAlloc: synchronous,
// and slow). A size the device cannot hold gives an *Error matching
// ErrOutOfMemory; size 0 gives one matching ErrInvalidValue.
func (c Context) MemAlloc(size uint64) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemAlloc(c, size)
	if r != Success {
		return 0, &Error{Op: "cuMemAlloc", Code: r}
	}
	return DevicePtr(p), nil
}

// MemFree frees memory from MemAlloc or MemAllocManaged.
func (c Context) MemFree(p DevicePtr) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemFree", rawMemFree(c, p))
}

// MemAllocAsync allocates size bytes in stream order on s from the
// device's current pool (cuMemAllocAsync).
func (c Context) MemAllocAsync(size uint64, s Stream) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemAllocAsync(c, size, s)
	if r != Success {
		return 0, &Error{Op: "cuMemAllocAsync", Code: r}
	}
	return DevicePtr(p), nil
}

// MemFreeAsync frees p in stream order on s (cuMemFreeAsync).
func (c Context) MemFreeAsync(p DevicePtr, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if r := rawMemFreeAsync(c, p, s); r != Success {
		return &Error{Op: "cuMemFreeAsync", Code: r}
	}
	return nil
}

// MemAllocFromPoolAsync allocates size bytes in stream order on s from
// pool (cuMemAllocFromPoolAsync); free with MemFreeAsync.
func (c Context) MemAllocFromPoolAsync(size uint64, pool MemPool, s Stream) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if pool == 0 {
		return 0, &Error{Op: "cuMemAllocFromPoolAsync", Code: ErrInvalidHandle}
	}
	r, p := rawMemAllocFromPoolAsync(c, size, pool, s)
	if r != Success {
		return 0, &Error{Op: "cuMemAllocFromPoolAsync", Code: r}
	}
	return DevicePtr(p), nil
}

// MemAllocManaged allocates size bytes of managed memory with the given
// attach flags (MemAttachGlobal); free with MemFree.
func (c Context) MemAllocManaged(size uint64, flags uint32) (DevicePtr, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemAllocManaged(c, size, flags)
	if r != Success {
		return 0, &Error{Op: "cuMemAllocManaged", Code: r}
	}
	return DevicePtr(p), nil
}

// MemAllocHost allocates size bytes of page-locked host memory
// (cuMemAllocHost) and returns its address. The memory is C memory: the Go
// garbage collector does not know it, and only MemFreeHost frees it.
func (c Context) MemAllocHost(size uint64) (unsafe.Pointer, error) {
	if err := c.ok(); err != nil {
		return nil, err
	}
	r, p := rawMemAllocHost(c, size)
	if r != Success {
		return nil, &Error{Op: "cuMemAllocHost", Code: r}
	}
	return p, nil
}

// MemFreeHost frees memory from MemAllocHost.
func (c Context) MemFreeHost(p unsafe.Pointer) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemFreeHost", rawMemFreeHost(c, p))
}

// MemsetD8Async sets n bytes at p to v, in stream order on s.
func (c Context) MemsetD8Async(p DevicePtr, v byte, n uint64, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemsetD8Async", rawMemsetD8Async(c, p, v, n, s))
}

// MemcpyHtoDAsync copies src to dst in stream order on s. src may be
// reused as soon as the call returns (see the file comment).
func (c Context) MemcpyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", rawMemcpyHtoDAsync(c, dst, unsafe.Pointer(&src[0]), uint64(len(src)), s))
}

// MemcpyDtoHAsync copies len(dst) bytes from src into dst in stream order
// on s. Into Go memory the copy has completed when the call returns; into
// pinned memory, once s has been synchronized past it.
func (c Context) MemcpyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", rawMemcpyDtoHAsync(c, unsafe.Pointer(&dst[0]), src, uint64(len(dst)), s))
}

// MemcpyDtoDAsync copies n bytes from src to dst in stream order on s.
func (c Context) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuMemcpyDtoDAsync", rawMemcpyDtoDAsync(c, dst, src, n, s))
}
