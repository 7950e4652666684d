// Pinned: page-locked host memory (cuMemAllocHost / cuMemFreeHost) for
// staging copies between host and device.
//
// Page-locked memory is what lets the device copy to and from the host
// asynchronously, and what makes those copies fast. It is host memory, so
// it does not fit Resource (which hands out device pointers): Pinned has a
// small API of its own that hands out []byte of exactly the size asked for.
//
// Allocation and free are synchronous and expensive (they change the
// host's page tables), so Pinned is meant for long-lived staging buffers,
// not per-copy allocation. A buffer that an
// asynchronous copy on s may still be reading or writing must not be freed
// before that copy completes: FreeAfter(b, s) synchronizes s first; Free
// is for buffers no enqueued work uses.
//
// Invariants: live (the package's pointer table, ptrtable.go, which also
// remembers recent frees to report double frees) maps the address of every
// buffer handed out and not freed to its length, and its lengths sum to
// Usage().Used (== Reserved: nothing is cached); a failed free leaves the
// buffer live.

package mr

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// Pinned hands out page-locked host memory. It is safe for concurrent use.
type Pinned struct {
	dev   gpu.Device
	live  ptrTable[uintptr, struct{}]
	usage usageMeter
}

// NewPinned returns a Pinned allocator for dev.
func NewPinned(dev gpu.Device) *Pinned {
	return &Pinned{dev: dev}
}

// Device is the device whose context the memory is registered with.
func (p *Pinned) Device() gpu.Device { return p.dev }

// Allocate returns n bytes of page-locked host memory (len and cap n). A
// size of 0 returns nil and no error; a negative one an error matching
// ErrInvalidSize; failure to allocate an *OutOfMemoryError.
func (p *Pinned) Allocate(n int) ([]byte, error) {
	if n < 0 {
		return nil, sizeError("pinned", opAllocate, n)
	}
	if n == 0 {
		return nil, nil
	}
	if p.dev == nil {
		return nil, fmt.Errorf("pinned: allocate: nil device: %w", gpu.ErrInvalidHandle)
	}
	b, err := p.dev.MallocHost(n)
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			u := p.usage.snapshot()
			return nil, &OutOfMemoryError{Resource: "pinned", Requested: n, Reserved: u.Reserved, Used: u.Used, Err: err}
		}
		return nil, fmt.Errorf("pinned: allocate %d bytes: %w", n, err)
	}
	b = b[:n:n]
	p.live.insert(uintptr(unsafe.Pointer(unsafe.SliceData(b))), n, struct{}{}, nil)
	p.usage.addUsed(n)
	p.usage.addReserved(n)
	return b, nil
}

// Free frees b, which Allocate returned (the same start and length), at
// once. No work enqueued on any stream may still use it; see FreeAfter.
// Freeing nil or an empty slice does nothing. A slice that Allocate did
// not return matches ErrUnknownPointer, one freed already ErrDoubleFree,
// one of another length ErrSizeMismatch; none changes anything.
func (p *Pinned) Free(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	n := len(b)
	// Claimed: a racing free of b now fails.
	if _, err := p.live.take(a, n, nil); err != nil {
		return fmt.Errorf("pinned: free: %w", err)
	}
	if err := p.dev.FreeHost(b[:n:n]); err != nil {
		p.live.restore(a, n, struct{}{})
		return fmt.Errorf("pinned: free %#x: %w", a, err)
	}
	p.usage.subUsed(n)
	p.usage.subReserved(n)
	return nil
}

// FreeAfter synchronizes s, so that copies enqueued on s that use b have
// completed, then frees b as Free does. It blocks the host until then.
func (p *Pinned) FreeAfter(b []byte, s gpu.Stream) error {
	if err := checkStream("pinned", "free", p.dev, s); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("pinned: free: synchronize stream %d: %w", s.ID(), err)
	}
	return p.Free(b)
}

// Usage reports the page-locked bytes handed out and not freed (Reserved
// equals Used: nothing is cached).
func (p *Pinned) Usage() Usage { return p.usage.snapshot() }

// ResetPeaks lowers the peaks of Usage to the current values.
func (p *Pinned) ResetPeaks() { p.usage.resetPeaks() }
