// Package cuda binds the few parts of the CUDA driver API that streamalloc
// needs. The driver is loaded at run time with dlopen("libcuda.so.1")
// behind a small cgo shim, so the package builds with Go and gcc alone, and
// a binary built on a machine without a GPU runs unchanged on one that has
// it. Without a driver every entry point returns ErrNoDriver; without a
// device, ErrNoDevice. Nothing here panics on a missing driver.
//
// This is the only package of the module that uses cgo.
package cuda
