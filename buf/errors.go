// Errors of package buf. Each is a sentinel matched with errors.Is; the
// errors returned wrap them with the operation and the values involved.

package buf

import (
	"errors"
	"fmt"
	"reflect"
)

var (
	// ErrNilBuffer: a method was called on a nil *Buffer, a Buffer not made
	// by New, a nil *Vector, or a zero Ref (or one was passed as an operand).
	ErrNilBuffer = errors.New("buf: nil buffer")
	// ErrClosed: the buffer was closed.
	ErrClosed = errors.New("buf: buffer closed")
	// ErrUseAfterFree: a Ref outlived the allocation it was taken from (the
	// buffer was closed or resized since).
	ErrUseAfterFree = errors.New("buf: use after free")
	// ErrOutOfRange: an offset or length reaches outside the buffer.
	ErrOutOfRange = errors.New("buf: range outside the buffer")
	// ErrLength: a whole-buffer copy was given a slice or buffer of another
	// length.
	ErrLength = errors.New("buf: length mismatch")
	// ErrOverlap: a copy within one buffer with overlapping ranges.
	ErrOverlap = errors.New("buf: overlapping copy")
	// ErrAccess: an Access that is not Read, Write or ReadWrite.
	ErrAccess = errors.New("buf: invalid access")
	// ErrGraphUse: Resize of a buffer that the graph of a capture not
	// yet released uses (the graph keeps the old address).
	ErrGraphUse = errors.New("buf: buffer used by a graph")
	// ErrElemType: the element type of a Vector holds pointers (or has size
	// zero), so its values cannot live in device memory.
	ErrElemType = errors.New("buf: element type not allowed in device memory")
)

// ElemTypeError says which element type NewVector refused and why. It
// matches ErrElemType.
type ElemTypeError struct {
	Type   reflect.Type
	Reason string
}

func (e *ElemTypeError) Error() string {
	return fmt.Sprintf("buf: element type %v not allowed in device memory: %s", e.Type, e.Reason)
}

// Is reports whether target is ErrElemType.
func (e *ElemTypeError) Is(target error) bool { return target == ErrElemType }
