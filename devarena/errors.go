// Errors of the host side. Each is a sentinel that callers match with
// errors.Is; the errors returned wrap them with the operation and the
// offending value.

package devarena

import (
	"errors"

	"github.com/streamalloc/streamalloc/mr"
)

var (
	// ErrInvalidSize: a region size of zero, below zero or above MaxSize.
	// It is mr.ErrInvalidSize, so callers that handle resources' size
	// errors handle this one too.
	ErrInvalidSize = mr.ErrInvalidSize
	// ErrInvalidAlign: an alignment that is not a power of two from
	// MinAlign to MaxAlign.
	ErrInvalidAlign = errors.New("devarena: invalid alignment")
	// ErrClosed: the arena or set was closed.
	ErrClosed = errors.New("devarena: arena closed")
)
