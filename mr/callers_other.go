//go:build !amd64

// callers on architectures where callers_fp.go does not follow frame
// pointers: runtime.Callers.

package mr

import "runtime"

// callersFP stores in buf the return addresses of the calling goroutine's
// frames, innermost first, after skipping skip of them (0: the caller of
// callersFP's caller), and returns how many it stored.
func callersFP(skip int, buf []uintptr) int { return runtime.Callers(skip+3, buf) }

// callersFPHash is callersFP that also returns hashPCs of the addresses it
// stored.
//
//go:noinline
func callersFPHash(skip int, buf []uintptr) (int, uint64) {
	n := runtime.Callers(skip+3, buf)
	return n, hashPCs(buf[:n])
}
