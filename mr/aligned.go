// Aligned: an adaptor that hands out memory aligned to more than the 256
// bytes every resource guarantees (a power of two up to MaxAlignment).
//
// It over-allocates: a request of n bytes aligned to a gets n+a-256 bytes
// from the upstream, whose 256-aligned block must contain an a-aligned
// address with n bytes after it, and returns that address. The pointer
// table maps the returned address to the upstream block, so the free goes
// to the upstream with the block's own address and size. Alignments up to
// 256 pass through unchanged (no over-allocation).
//
// Invariants: every live returned address q is recorded with its request
// size and its block (base, upstream size), with base <= q and
// q+size <= base+upstream size; the block is freed exactly once, when q is.
// Bad alignments are refused with an *AlignmentError before the upstream
// is asked.

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// MaxAlignment is the largest alignment Aligned accepts (1 GiB).
const MaxAlignment = 1 << 30

// ErrInvalidAlignment is matched by every *AlignmentError.
var ErrInvalidAlignment = errors.New("mr: invalid alignment")

// AlignmentError reports an alignment that is not a power of two between
// 1 and MaxAlignment.
type AlignmentError struct {
	Alignment int
}

func (e *AlignmentError) Error() string {
	return fmt.Sprintf("mr: alignment %d is not a power of two between 1 and %d", e.Alignment, MaxAlignment)
}

// Is reports whether target is ErrInvalidAlignment.
func (e *AlignmentError) Is(target error) bool { return target == ErrInvalidAlignment }

func checkAlignment(a int) error {
	if a <= 0 || a > MaxAlignment || a&(a-1) != 0 {
		return &AlignmentError{Alignment: a}
	}
	return nil
}

// alignedBlock is the upstream block behind one aligned allocation.
type alignedBlock struct {
	base gpu.DevicePtr
	size int
}

// Aligned hands out memory with a larger alignment than its upstream's.
// It is safe for concurrent use.
type Aligned struct {
	passThrough
	dev   gpu.Device
	align int
	live  ptrTable[gpu.DevicePtr, alignedBlock]
}

// NewAligned returns an adaptor over upstream whose Allocate aligns to
// alignment. An alignment that is not a power of two between 1 and
// MaxAlignment returns an *AlignmentError.
func NewAligned(upstream Resource, alignment int) (*Aligned, error) {
	if err := checkAlignment(alignment); err != nil {
		return nil, fmt.Errorf("aligned: %w", err)
	}
	return &Aligned{passThrough: passThrough{upstream}, dev: upstream.Device(), align: alignment}, nil
}

// Alignment is the alignment Allocate gives.
func (a *Aligned) Alignment() int { return a.align }

// Allocate returns size bytes aligned to the adaptor's alignment.
func (a *Aligned) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return a.AllocateAligned(size, a.align, s)
}

// AllocateAligned returns size bytes aligned to alignment (a power of two
// between 1 and MaxAlignment; otherwise an *AlignmentError), freed with
// Deallocate like any other allocation.
func (a *Aligned) AllocateAligned(size, alignment int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("aligned", a.dev, size, s); err != nil {
		return 0, err
	} else if err := checkAlignment(alignment); err != nil {
		return 0, fmt.Errorf("aligned: allocate: %w", err)
	} else if zero {
		return 0, nil
	}
	alignment = max(alignment, Alignment)
	extra := alignment - Alignment
	if size > maxAlignable-extra {
		return 0, &OutOfMemoryError{Resource: "aligned", Requested: size, Stream: s.ID(),
			Err: fmt.Errorf("%d bytes aligned to %d do not fit in an int", size, alignment)}
	}
	upSize := size + extra
	base, err := a.up.Allocate(upSize, s)
	if err != nil {
		var oom *OutOfMemoryError
		if errors.As(err, &oom) {
			// Report the caller's request, not the padded one.
			return 0, &OutOfMemoryError{Resource: "aligned", Requested: size, Stream: s.ID(),
				Reserved: oom.Reserved, Used: oom.Used, Limit: oom.Limit,
				Err: fmt.Errorf("%d bytes requested upstream for alignment %d: %w", upSize, alignment, err)}
		}
		return 0, fmt.Errorf("aligned: %w", err)
	}
	m := gpu.DevicePtr(alignment - 1)
	q := (base + m) &^ m
	a.live.insert(q, size, alignedBlock{base: base, size: upSize}, nil)
	return q, nil
}

// Deallocate frees p, which Allocate or AllocateAligned returned with the
// same size, by freeing its upstream block. Bad frees are refused with
// typed errors before they reach the upstream.
func (a *Aligned) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("aligned", a.dev, p, size, s); null || err != nil {
		return err
	}
	if _, err := a.live.take(p, size, func(b alignedBlock) error { return a.up.Deallocate(b.base, b.size, s) }); err != nil {
		return fmt.Errorf("aligned: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (a *Aligned) Device() gpu.Device { return a.dev }
