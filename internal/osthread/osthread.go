// Package osthread names the OS thread the calling goroutine runs on, for
// the one driver object that is per thread: the per-thread default stream
// (CU_STREAM_PER_THREAD). The answer is only stable while the goroutine is
// locked to its thread (runtime.LockOSThread, or a cgo callback, which the
// runtime holds on the calling C thread for its length).
package osthread

// ID returns the calling OS thread's ID and true, or 0 and false on a
// system where threads cannot be named (then nothing per thread can be
// supported).
func ID() (int, bool) { return id() }
