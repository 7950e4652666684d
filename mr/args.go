// Argument checks shared by the resources of this package.
//
// Every resource checks its arguments in the same order, before it touches
// any state, so that a bad call changes nothing: the stream first (nil, then
// another device's), then the size (negative, then too large to align).
// Sizes are rounded up to Alignment only where a resource carves memory
// itself; the driver-backed resources pass the caller's size through.

package mr

import (
	"fmt"
	"math"

	"github.com/streamalloc/streamalloc/gpu"
)

// checkStream reports whether s may be used with a resource of dev: a nil
// stream matches gpu.ErrInvalidHandle, one of another device
// gpu.ErrWrongDevice.
func checkStream(op string, dev gpu.Device, s gpu.Stream) error {
	if s == nil {
		return fmt.Errorf("%s: nil stream: %w", op, gpu.ErrInvalidHandle)
	}
	if s.Device() != dev {
		return fmt.Errorf("%s: stream %d: %w", op, s.ID(), gpu.ErrWrongDevice)
	}
	return nil
}

// checkStreamOf is checkStream for a resource whose name is not a
// constant: the message is only built on error, so the check allocates
// nothing on the hot path.
func checkStreamOf(name, op string, dev gpu.Device, s gpu.Stream) error {
	if s != nil && s.Device() == dev {
		return nil
	}
	return checkStream(name+": "+op, dev, s)
}

// maxAlignable is the largest size that alignUp can round without
// overflowing.
const maxAlignable = math.MaxInt - (Alignment - 1)

// alignUp rounds n (0 <= n <= maxAlignable) up to a multiple of Alignment.
func alignUp(n int) int { return (n + Alignment - 1) &^ (Alignment - 1) }
