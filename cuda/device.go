// Devices and their primary contexts.
//
// A Device is the driver's CUdevice, an ordinal-like handle got from
// GetDevice. Its primary context is the one context per device that every
// user of the runtime API shares; PrimaryCtxRetain takes a reference and
// PrimaryCtxRelease drops it, and the context lives while references
// remain. Contexts of our own (CtxCreate) exist for tests of cross-context
// misuse and are not otherwise needed.

package cuda

import "fmt"

// Device is a CUdevice.
type Device int32

// Context is a CUcontext. The zero Context is no context.
type Context uintptr

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int32

// Device attributes used by streamalloc; the values are cuda.h's.
const (
	AttrMultiprocessorCount  DeviceAttribute = 16
	AttrComputeCapabilityMaj DeviceAttribute = 75
	AttrComputeCapabilityMin DeviceAttribute = 76
	AttrManagedMemory        DeviceAttribute = 83
	AttrMemoryPoolsSupported DeviceAttribute = 115
)

// DeviceCount is the number of devices the driver sees. With no device it
// returns an error matching ErrNoDevice (cuInit fails that way).
func DeviceCount() (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, n := rawDeviceCount()
	if r != Success {
		return 0, &Error{Op: "cuDeviceGetCount", Code: r}
	}
	return int(n), nil
}

// GetDevice returns the device of the given ordinal; an ordinal out of
// range returns an error matching ErrInvalidDevice.
func GetDevice(ordinal int) (Device, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal > 1<<30 {
		return 0, &Error{Op: "cuDeviceGet", Code: ErrInvalidDevice}
	}
	r, d := rawDeviceGet(int32(ordinal))
	if r != Success {
		return 0, &Error{Op: "cuDeviceGet", Code: r}
	}
	return Device(int32(d)), nil
}

// Name is the device's product name.
func (d Device) Name() (string, error) {
	if err := ready(); err != nil {
		return "", err
	}
	r, s := rawDeviceName(d)
	if r != Success {
		return "", &Error{Op: "cuDeviceGetName", Code: r}
	}
	return s, nil
}

// TotalMem is the device's memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, n := rawDeviceTotalMem(d)
	if r != Success {
		return 0, &Error{Op: "cuDeviceTotalMem", Code: r}
	}
	return n, nil
}

// Attribute reads a device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, v := rawDeviceAttribute(d, a)
	if r != Success {
		return 0, &Error{Op: "cuDeviceGetAttribute", Code: r}
	}
	return int(int64(v)), nil
}

// ComputeCapability returns the device's major and minor compute
// capability.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMaj); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(AttrComputeCapabilityMin); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// PrimaryCtxRetain takes a reference to the device's primary context,
// creating it if needed. Balance it with PrimaryCtxRelease.
func (d Device) PrimaryCtxRetain() (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, c := rawPrimaryCtxRetain(d)
	if r != Success {
		return 0, &Error{Op: "cuDevicePrimaryCtxRetain", Code: r}
	}
	return Context(c), nil
}

// PrimaryCtxRelease drops a reference taken by PrimaryCtxRetain; the
// context is destroyed when the last one goes.
func (d Device) PrimaryCtxRelease() error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuDevicePrimaryCtxRelease", rawPrimaryCtxRelease(d))
}

// DefaultMemPool is the device's default stream-ordered memory pool.
func (d Device) DefaultMemPool() (MemPool, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, p := rawDeviceDefaultMemPool(d)
	if r != Success {
		return 0, &Error{Op: "cuDeviceGetDefaultMemPool", Code: r}
	}
	return MemPool(p), nil
}

// MemPool is the device's current pool, the one cuMemAllocAsync draws
// from (the default pool unless SetMemPool changed it).
func (d Device) MemPool() (MemPool, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, p := rawDeviceMemPool(d)
	if r != Success {
		return 0, &Error{Op: "cuDeviceGetMemPool", Code: r}
	}
	return MemPool(p), nil
}

// SetMemPool makes p the device's current pool.
func (d Device) SetMemPool(p MemPool) error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuDeviceSetMemPool", rawDeviceSetMemPool(d, p))
}

// String is "cuda:N".
func (d Device) String() string { return fmt.Sprintf("cuda:%d", int32(d)) }

// CurrentContext is the context current on the calling OS thread (zero
// if none). Since goroutines move between threads, it is only meaningful
// to tests and diagnostics.
func CurrentContext() (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, c := rawCtxGetCurrent()
	if r != Success {
		return 0, &Error{Op: "cuCtxGetCurrent", Code: r}
	}
	return Context(c), nil
}

// SetCurrent makes c current on the calling OS thread. Calls of this
// package do not need it (they bind their context themselves); it is here
// for code that hands the thread to other CUDA code.
func (c Context) SetCurrent() error {
	if err := ready(); err != nil {
		return err
	}
	return check("cuCtxSetCurrent", rawCtxSetCurrent(c))
}

// CtxCreate creates a new context of its own on d (not the primary one),
// leaving the calling thread's current context as it was. Destroy it with
// Destroy. streamalloc uses it only to test that handles of one context
// are refused by another.
func CtxCreate(d Device) (Context, error) {
	if err := ready(); err != nil {
		return 0, err
	}
	r, c := rawCtxCreate(d)
	if r != Success {
		return 0, &Error{Op: "cuCtxCreate", Code: r}
	}
	return Context(c), nil
}

// Destroy destroys a context made by CtxCreate. Never call it on a
// primary context.
func (c Context) Destroy() error {
	if err := ready(); err != nil {
		return err
	}
	if c == 0 {
		return &Error{Op: "cuCtxDestroy", Code: ErrInvalidContext}
	}
	return check("cuCtxDestroy", rawCtxDestroy(c))
}

// Synchronize waits for all work in the context (cuCtxSynchronize).
func (c Context) Synchronize() error {
	if err := c.ok(); err != nil {
		return err
	}
	return check("cuCtxSynchronize", rawCtxSynchronize(c))
}

// MemGetInfo returns the free and total memory of the context's device.
func (c Context) MemGetInfo() (free, total uint64, err error) {
	if err := c.ok(); err != nil {
		return 0, 0, err
	}
	r, f, t := rawMemGetInfo(c)
	if r != Success {
		return 0, 0, &Error{Op: "cuMemGetInfo", Code: r}
	}
	return f, t, nil
}

// ok is the check every context method starts with: the driver is ready
// and the context is not zero (binding a null context would leave the
// thread with none, and the call would fail less clearly).
func (c Context) ok() error {
	if err := ready(); err != nil {
		return err
	}
	if c == 0 {
		return errNullContext
	}
	return nil
}

var errNullContext = &Error{Op: "cuCtxSetCurrent", Code: ErrInvalidContext}
