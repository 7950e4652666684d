//go:build amd64

// callers: the return addresses of the calling goroutine's stack, read by
// following frame pointers, for Tracking's allocation stacks.
//
// Why. runtime.Callers resolves each frame with the runtime's full unwinder
// (function table, PC-value tables, inline expansion): about 50 ns a frame,
// so a 16-frame stack costs more than the allocation it describes. On amd64
// every Go function that calls another keeps a frame pointer: its frame
// holds, at the address in BP, the caller's BP and, one word above, the
// return address into the caller. Following that chain costs two loads a
// frame. The return addresses are the PCs runtime.Callers would give for
// the same frames (runtime.CallersFrames expands inlined calls from them
// the same way), so symbolizing stays where it was: when a report asks.
// The Go runtime's execution tracer unwinds the same way.
//
// Where the chain stops. It is followed only through frames of Go code
// outside the runtime, and through runtime.deferreturn and runtime.gopanic
// (Go functions that call deferred functions): a return address into any
// other function of package runtime (runtime.goexit at the bottom of every goroutine, runtime.main, the
// gateway of a call from C into Go, reflection's call trampolines) or into
// code that is not Go ends the stack, because the frame below such a
// return address may not hold a frame pointer (C code need not keep one).
// So a stack that reaches Go through a cgo callback ends at the callback,
// which runtime.Callers would show continuing into the runtime's gateway
// only. A Go assembly function without a frame of its own does not move
// BP, so the chain skips its caller's frame: that frame is missing from
// the stack, nothing is read out of bounds.
//
// Which return addresses are Go code outside the runtime is decided by
// runtime.FuncForPC once per address and remembered in pcKinds, a table
// the walk reads with plain loads. An address not yet in it ends the walk
// early; it is classified outside the walk, and the walk starts again.
// The multiply that picks an address's bucket is also the one the stack
// hash takes of it (pcMix, hashPCs), so callersFPHash folds the hash in as
// it walks.
// The walk holds the frame pointer as an unsafe.Pointer: if a call moved
// the goroutine's stack, the runtime would adjust it with the frames'
// saved frame pointers (the walk calls nothing but, in a race-detector
// build, the detector's checks), and the runtime does not move a stack
// while its goroutine is stopped between calls.

package mr

import (
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// getfp returns the frame pointer of the function that calls it.
func getfp() unsafe.Pointer

// pcKinds remembers, for return addresses seen before, whether the walk
// may go on through them: one of the four slots of bucket hash(pc) holds
// pc (go on and record it), pc|pcSkip (go on, do not record: a wrapper
// the compiler generated, which runtime.Callers does not show either) or
// ^pc (stop). An address that finds none of these is a miss.
var pcKinds [1 << 12]atomic.Uintptr

const (
	pcWays = 4
	// pcSkip marks a wrapper; user-space addresses on amd64 are below
	// 1<<47, so the bit is free and ^pc has it set with others.
	pcSkip = 1 << 62
)

func pcBucket(pc uintptr) int { return pcBucketOf(pcMix(pc)) }

func pcBucketOf(m uint64) int { return int(m>>(64-12)) &^ (pcWays - 1) }

// callersFP stores in buf the return addresses of the calling goroutine's
// frames, innermost first, after skipping skip of them (0: the caller of
// callersFP's caller), and returns how many it stored. Not inlined: the
// frames it skips are its own and walkFP's.
//
//go:noinline
func callersFP(skip int, buf []uintptr) int {
	for range 64 { // each pass classifies one new address
		n, _, miss := walkFP(skip+2, buf)
		if miss == 0 {
			return n
		}
		classifyPC(miss)
	}
	// Addresses that keep evicting each other: ask the runtime.
	return runtime.Callers(skip+3, buf)
}

// callersFPHash is callersFP that also returns hashPCs of the addresses it
// stored, folded in during the walk from the multiply the walk makes of
// each address anyway, so that a stack is not read a second time to be
// hashed.
//
//go:noinline
func callersFPHash(skip int, buf []uintptr) (int, uint64) {
	for range 64 {
		n, h, miss := walkFP(skip+2, buf)
		if miss == 0 {
			return n, hashFinish(h, n)
		}
		classifyPC(miss)
	}
	n := runtime.Callers(skip+3, buf)
	return n, hashPCs(buf[:n])
}

// walkFP is the walk of the file comment: no calls, only loads. It stops
// at the first address not yet classified and returns it as miss. h is
// the stack hash of the stored addresses before hashFinish.
//
//go:noinline
func walkFP(skip int, buf []uintptr) (n int, h uint64, miss uintptr) {
	fp := getfp() // walkFP's own frame: its return address is into callersFP
	for fp != nil && n < len(buf) {
		pc := *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		m := pcMix(pc)
		b := pcBucketOf(m)
		var k uintptr
		for i := range pcWays {
			if e := pcKinds[b+i].Load(); e == pc || e == pc|pcSkip || e == ^pc {
				k = e
				break
			}
		}
		switch k {
		case pc:
			if skip > 0 {
				skip--
			} else {
				buf[n] = pc
				n++
				h = hashStep(h, m)
			}
		case pc | pcSkip:
		case ^pc:
			return n, h, 0
		default:
			return n, h, pc
		}
		fp = *(*unsafe.Pointer)(fp)
	}
	return n, h, 0
}

// classifyPC records whether the walk may go on through return address pc:
// it may if pc is in a Go function outside the runtime, and records pc
// unless that function is a wrapper the compiler generated.
func classifyPC(pc uintptr) {
	e := ^pc
	if f := runtime.FuncForPC(pc - 1); f != nil {
		name := f.Name()
		switch {
		case name == "runtime.deferreturn" || name == "runtime.gopanic":
			// Go functions of the runtime that call deferred functions:
			// their frames keep a frame pointer, and runtime.Callers
			// does not show the first.
			e = pc | pcSkip
		case !strings.HasPrefix(name, "runtime.") && !strings.HasPrefix(name, "runtime/"):
			e = pc
			if file, _ := f.FileLine(pc - 1); file == "<autogenerated>" || strings.Contains(name, ".gowrap") {
				e = pc | pcSkip
			}
		}
	}
	b := pcBucket(pc)
	for i := range pcWays {
		if pcKinds[b+i].CompareAndSwap(0, e) {
			return
		}
	}
	pcKinds[b+int(pc)%pcWays].Store(e) // a full bucket: evict one
}
