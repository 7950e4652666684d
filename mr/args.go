// Argument checks shared by every resource and adaptor of this package.
//
// Allocate(size, s) and Deallocate(p, size, s) check their arguments here,
// in this order, before they touch any state, so that a bad call changes
// nothing and every resource answers the same bad call with the same
// sentinel:
//
//  1. the stream: nil matches gpu.ErrInvalidHandle, a stream of another
//     device gpu.ErrWrongDevice;
//  2. the size: negative matches ErrInvalidSize;
//  3. Allocate of 0 bytes is answered with the null pointer and no error;
//     Deallocate of the null pointer with size 0 returns nil, with any
//     other size it matches ErrSizeMismatch. Either way nothing is touched.
//
// What comes after is each resource's own: a limit on the size, then
// whether the pointer is live. A size too large for the resource, up to
// math.MaxInt, is out of memory (an *OutOfMemoryError), never
// ErrInvalidSize and never an overflow: FixedSize refuses more than its
// block, Limit more than its budget, Aligned and the Pool what they could
// not round up in an int, before any arithmetic on it.
//
// Messages read "<name>: allocate: nil stream", "<name>: allocate -1
// bytes", "<name>: deallocate null pointer as 8 bytes". The resource's
// name and the operation are passed apart and joined only in a failure's
// message, so a check that passes builds no string and allocates nothing.
// The messages are built out of line, so that the checks are small
// enough to be inlined into the resources' Allocate and Deallocate.
//
// A hot path may test the ordinary case itself and call the checks only
// outside it, so that they cost it nothing: the Pool checks a stream once,
// when it first sees it (stream IDs are never reused), and runs
// checkStream only for a stream it does not know; it calls checkAllocSize
// only for a size that is not positive (or larger than any chunk), and
// checkFreeArgs only for the null pointer or a negative size. These two are
// checkAlloc and checkFree without the stream, so the answers and their
// order are the same as everywhere else. An adaptor does the same with
// knownStreams: a stream's device is compared (an interface call and an
// interface comparison, 5-15 ns on the H100 machine's host, at every call
// otherwise) the first time the adaptor sees the stream, and remembered.

package mr

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// The operations named in the checks' messages.
const (
	opAllocate   = "allocate"
	opDeallocate = "deallocate"
)

// checkAlloc checks the arguments of name's Allocate(size, s) on a
// resource of dev (steps 1 to 3 of the file comment). zero reports a
// request of 0 bytes, which the caller answers with the null pointer,
// touching nothing.
func checkAlloc(name string, dev gpu.Device, size int, s gpu.Stream) (zero bool, err error) {
	if !streamOK(dev, s) {
		return false, streamError(name, opAllocate, s)
	}
	return checkAllocSize(name, size)
}

// checkFree checks the arguments of name's Deallocate(p, size, s) on a
// resource of dev (steps 1 to 3 of the file comment). null reports a free
// of the null pointer with size 0, which the caller answers with nil,
// touching nothing.
func checkFree(name string, dev gpu.Device, p gpu.DevicePtr, size int, s gpu.Stream) (null bool, err error) {
	if !streamOK(dev, s) {
		return false, streamError(name, opDeallocate, s)
	}
	return checkFreeArgs(name, p, size)
}

// checkAllocSize is checkAlloc after the stream's check (steps 2 and 3).
func checkAllocSize(name string, size int) (zero bool, err error) {
	if size < 0 {
		return false, sizeError(name, opAllocate, size)
	}
	return size == 0, nil
}

// checkFreeArgs is checkFree after the stream's check (steps 2 and 3).
func checkFreeArgs(name string, p gpu.DevicePtr, size int) (null bool, err error) {
	if size < 0 || p == 0 && size != 0 {
		return false, freeArgsError(name, size)
	}
	return p == 0, nil
}

// checkStream reports whether s may be used with a resource of dev (step 1
// of the file comment): a nil stream matches gpu.ErrInvalidHandle, one of
// another device gpu.ErrWrongDevice.
func checkStream(name, op string, dev gpu.Device, s gpu.Stream) error {
	if !streamOK(dev, s) {
		return streamError(name, op, s)
	}
	return nil
}

// streamOK reports whether s is a stream of dev.
func streamOK(dev gpu.Device, s gpu.Stream) bool { return s != nil && s.Device() == dev }

// The errors of the checks are built out of line, so that the checks are
// small enough to be inlined into their callers.

// streamError is the error of a nil stream or one of another device. A
// stream with no device is a nil stream too: a backend's nil stream
// (a nil *cudagpu.Stream) in a non-nil interface.
//
//go:noinline
func streamError(name, op string, s gpu.Stream) error {
	if s == nil || s.Device() == nil {
		return fmt.Errorf("%s: %s: nil stream: %w", name, op, gpu.ErrInvalidHandle)
	}
	return fmt.Errorf("%s: %s: stream %d: %w", name, op, s.ID(), gpu.ErrWrongDevice)
}

// sizeError is the error of a size that name's op refuses as an argument.
//
//go:noinline
func sizeError(name, op string, size int) error {
	return fmt.Errorf("%s: %s %d bytes: %w", name, op, size, ErrInvalidSize)
}

// freeArgsError is the error of a free with a negative size, or of the
// null pointer with a size other than 0.
//
//go:noinline
func freeArgsError(name string, size int) error {
	if size < 0 {
		return sizeError(name, opDeallocate, size)
	}
	return fmt.Errorf("%s: %s null pointer as %d bytes: %w", name, opDeallocate, size, ErrSizeMismatch)
}

// The errors of a free the checks above let through but the resource
// refuses, worded the same by every resource: a pointer it does not know
// (ErrUnknownPointer), one it has freed (ErrDoubleFree), one live with
// another size (ErrSizeMismatch). The resource wraps them with its name
// and operation.

// pointerError is the error of a free of p that err (ErrUnknownPointer or
// ErrDoubleFree) explains.
func pointerError(p gpu.DevicePtr, err error) error {
	return fmt.Errorf("pointer %#x: %w", uint64(p), err)
}

// sizeMismatchError is the error of a free of p, live with alloc bytes, as
// size bytes.
func sizeMismatchError(p gpu.DevicePtr, alloc, size int) error {
	return fmt.Errorf("pointer %#x of %d bytes freed as %d: %w", uint64(p), alloc, size, ErrSizeMismatch)
}

// maxAlignable is the largest size that alignUp can round without
// overflowing.
const maxAlignable = math.MaxInt - (Alignment - 1)

// alignUp rounds n (0 <= n <= maxAlignable) up to a multiple of Alignment.
func alignUp(n int) int { return (n + Alignment - 1) &^ (Alignment - 1) }

// knownStreams remembers streams that passed the stream check for one
// device, a slot per Fibonacci hash of the stream's ID: stream IDs are
// unique in the process, never reused and never zero, and a stream's
// device never changes, so a stream found in its slot needs no check. A
// stream whose slot another stream took is checked again and takes it
// back; a program's streams have consecutive IDs, which fall in different
// slots up to 34 streams.
type knownStreams [64]atomic.Uint64

// ok reports whether s is a stream of dev, as streamOK does.
func (k *knownStreams) ok(dev gpu.Device, s gpu.Stream) bool {
	if s == nil {
		return false
	}
	id := s.ID()
	sl := &k[id*0x9E3779B97F4A7C15>>58]
	if id != 0 && sl.Load() == id {
		return true
	}
	if s.Device() != dev {
		return false
	}
	sl.Store(id)
	return true
}

// checkAlloc is checkAlloc with the stream checked through k.
func (k *knownStreams) checkAlloc(name string, dev gpu.Device, size int, s gpu.Stream) (zero bool, err error) {
	if !k.ok(dev, s) {
		return false, streamError(name, opAllocate, s)
	}
	return checkAllocSize(name, size)
}

// checkFree is checkFree with the stream checked through k.
func (k *knownStreams) checkFree(name string, dev gpu.Device, p gpu.DevicePtr, size int, s gpu.Stream) (null bool, err error) {
	if !k.ok(dev, s) {
		return false, streamError(name, opDeallocate, s)
	}
	return checkFreeArgs(name, p, size)
}
