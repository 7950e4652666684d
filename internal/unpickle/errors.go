// Errors of the decoder and the encoder.
//
// Every error Decode returns is an *Error: where decoding stopped and one
// of the sentinels below, so that a caller can say both what was wrong
// and where, and tell a hostile pickle (ErrRefused) from a damaged one
// (ErrTruncated, ErrInvalid) or one beyond this decoder's subset
// (ErrUnsupported) or bounds (ErrDigits, ErrDepth).

package unpickle

import (
	"errors"
	"fmt"
)

var (
	// ErrTruncated: the input ends before the pickle does, or an
	// argument's declared length is larger than the bytes left.
	ErrTruncated = errors.New("unpickle: truncated")
	// ErrInvalid: input Python refuses too (its reference unpickler,
	// pickle._Unpickler, or the C one that pickle.load uses): an unknown
	// opcode, a stack underflow, a missing memo entry, a malformed
	// argument, frames that overlap or an argument across a frame's end,
	// an operation on the wrong type, or a dict key or set element Python
	// cannot hash (a list, dict or set).
	ErrInvalid = errors.New("unpickle: invalid")
	// ErrRefused: an opcode that makes Python import a name, construct an
	// object or call a function (GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
	// INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT1, EXT2, EXT4).
	// This decoder never does any of that.
	ErrRefused = errors.New("unpickle: refused: the pickle constructs objects or calls code")
	// ErrUnsupported: valid Python, outside the plain values this package
	// holds: protocol-0 text strings, out-of-band buffers, a protocol
	// above 5, a dict key or set element that is a tuple, a frozenset or
	// an int beyond 64 bits, and a container that contains itself.
	ErrUnsupported = errors.New("unpickle: unsupported")
	// ErrDigits: a decimal integer of more digits than Options.MaxDigits
	// (Python refuses such a pickle too: converting the text is
	// quadratic in its length).
	ErrDigits = errors.New("unpickle: too many decimal digits")
	// ErrDepth: containers nested deeper than Options.MaxDepth.
	ErrDepth = errors.New("unpickle: nested too deep")
)

// Error is a failure to decode: where decoding stopped, the opcode it
// was decoding, and what was wrong (one of the sentinels above, which
// errors.Is matches).
type Error struct {
	// Offset is the number of bytes consumed when decoding stopped: the
	// failing opcode and as much of its argument as was read.
	Offset int64
	// Op is the opcode being decoded, or 0 when the input ended before
	// one.
	Op byte
	// Err is one of the package's sentinels.
	Err error
	// Detail says what was wrong, for people.
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v: %s", e.Err, e.Detail)
}

func (e *Error) Unwrap() error { return e.Err }
