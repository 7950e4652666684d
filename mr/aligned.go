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
// Over an upstream that checks owners (owner.go: a Pool, or adaptors over
// one) the adaptor allocates and frees for an Owner of its own, and keeps
// the allocations at its alignment in alignedSlots (aligned_slots.go)
// without a lock; the upstream refuses bad frees for it, and the table
// holds only what the slots cannot.
//
// Over such an upstream, Allocate at the adaptor's alignment and every
// free of an allocation in the slots make one call into the adaptor (the
// hot path written out in Allocate and Deallocate), with the upstream's
// call and the slots' two locked instructions; the rest is out of line.
//
// Invariants: every live returned address q is recorded, in the slots or
// in the table, with its block (base, upstream size), and in the table
// with its request size, with base <= q and q+size <= base+upstream size;
// the block is freed exactly once, when q is. Bad alignments are refused
// with an *AlignmentError before the upstream is asked.

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
	// What the hot path reads comes first: the slots (nil unless
	// trusted), the padding an allocation at the adaptor's alignment
	// asks for (extra), the largest request that padding leaves in an
	// int, and the alignment's mask.
	passThrough
	owned
	slots     *alignedSlots
	pad, most int
	mask      gpu.DevicePtr
	dev       gpu.Device
	align     int
	known     knownStreams // streams checked (args.go)
	live      ptrTable[gpu.DevicePtr, alignedBlock]
}

// NewAligned returns an adaptor over upstream whose Allocate aligns to
// alignment. An alignment that is not a power of two between 1 and
// MaxAlignment returns an *AlignmentError.
func NewAligned(upstream Resource, alignment int) (*Aligned, error) {
	if err := checkAlignment(alignment); err != nil {
		return nil, fmt.Errorf("aligned: %w", err)
	}
	a := &Aligned{passThrough: passThrough{upstream}, dev: upstream.Device(), align: alignment,
		owned: ownedOver(upstream)}
	a.pad = a.extra()
	a.most = maxAlignable - a.pad
	a.mask = gpu.DevicePtr(max(alignment, Alignment) - 1)
	if a.trusted() {
		a.slots = new(alignedSlots)
	}
	return a, nil
}

// upAllocate and upDeallocate reach the upstream, for the adaptor's
// owner if it checks owners.
func (a *Aligned) upAllocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if a.trusted() {
		return a.oup.AllocateOwned(size, s, a.owner)
	}
	return a.up.Allocate(size, s)
}

func (a *Aligned) upDeallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if a.trusted() {
		return a.oup.DeallocateOwned(p, size, s, a.owner)
	}
	return a.up.Deallocate(p, size, s)
}

// extra is the padding an allocation at the adaptor's alignment asks for.
func (a *Aligned) extra() int { return max(a.align, Alignment) - Alignment }

// Alignment is the alignment Allocate gives.
func (a *Aligned) Alignment() int { return a.align }

// Allocate returns size bytes aligned to the adaptor's alignment.
func (a *Aligned) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	// The hot path (over an upstream that checks owners, a size the
	// padding leaves in an int) is written out here, so that a request
	// makes one call into the adaptor: allocate's, with the upstream's
	// checks (the stream first of all, as args.go orders them; the size
	// and the alignment are good).
	if a.slots != nil && uint(size-1) < uint(a.most) {
		base, err := a.oup.AllocateOwned(size+a.pad, s, a.owner)
		if err != nil {
			return 0, a.upstreamFailed(size, a.mask+1, s, err)
		}
		q := (base + a.mask) &^ a.mask
		if a.slots.insert(q, uint64(q-base)/Alignment) {
			return q, nil
		}
		a.live.insert(q, size, alignedBlock{base: base, size: size + a.pad}, nil)
		return q, nil
	}
	return a.AllocateAligned(size, a.align, s)
}

// AllocateAligned returns size bytes aligned to alignment (a power of two
// between 1 and MaxAlignment; otherwise an *AlignmentError), freed with
// Deallocate like any other allocation.
func (a *Aligned) AllocateAligned(size, alignment int, s gpu.Stream) (gpu.DevicePtr, error) {
	if a.slots != nil && alignment == a.align && size > 0 && size <= maxAlignable-a.extra() {
		// The upstream checks owners, and the stream first of all, as
		// args.go orders the checks: the size and alignment are good.
		return a.allocate(size, max(alignment, Alignment), s)
	}
	if zero, err := a.known.checkAlloc("aligned", a.dev, size, s); err != nil {
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
	return a.allocate(size, alignment, s)
}

// allocate is AllocateAligned of checked arguments: size > 0, alignment a
// power of two from Alignment on, and size plus the padding an int.
func (a *Aligned) allocate(size, alignment int, s gpu.Stream) (gpu.DevicePtr, error) {
	upSize := size + alignment - Alignment
	base, err := a.upAllocate(upSize, s)
	if err != nil {
		return 0, a.upstreamFailed(size, gpu.DevicePtr(alignment), s, err)
	}
	m := gpu.DevicePtr(alignment - 1)
	q := (base + m) &^ m
	if a.slots != nil && alignment == max(a.align, Alignment) && a.slots.insert(q, uint64(q-base)/Alignment) {
		return q, nil
	}
	a.live.insert(q, size, alignedBlock{base: base, size: upSize}, nil)
	return q, nil
}

// upstreamFailed is the error of a request of size bytes aligned to
// alignment that the upstream refused with err: an out-of-memory error
// names the caller's request, not the padded one.
//
//go:noinline
func (a *Aligned) upstreamFailed(size int, alignment gpu.DevicePtr, s gpu.Stream, err error) error {
	var oom *OutOfMemoryError
	if errors.As(err, &oom) {
		upSize := size + int(alignment) - Alignment
		return &OutOfMemoryError{Resource: "aligned", Requested: size, Stream: s.ID(),
			Reserved: oom.Reserved, Used: oom.Used, Limit: oom.Limit,
			Err: fmt.Errorf("%d bytes requested upstream for alignment %d: %w", upSize, alignment, err)}
	}
	return fmt.Errorf("aligned: %w", err)
}

// Deallocate frees p, which Allocate or AllocateAligned returned with the
// same size, by freeing its upstream block. Bad frees are refused with
// typed errors and change nothing. A free of an allocation kept in the
// slots (over an upstream that checks owners) reaches the upstream with
// its block's address and the size the free implies, and the upstream
// refuses a wrong one; any other free is checked before it reaches the
// upstream.
func (a *Aligned) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if a.slots != nil && p != 0 && size >= 0 {
		// A live allocation of the slots: the upstream checks the stream
		// before anything else, as args.go orders the checks.
		if sl, w := a.slots.find(p, uint64(a.mask)); sl != nil {
			if size > a.most {
				return a.freeTooLarge(p, size, s)
			}
			base := p - gpu.DevicePtr(w&uint64(a.mask))*Alignment
			if err := a.oup.DeallocateOwned(base, size+a.pad, s, a.owner); err != nil {
				return a.freeRefused(p, base, size, s, w, err)
			}
			if !a.slots.bury(sl, w) {
				a.buryStale(p, w)
			}
			return nil
		}
	}
	return a.freeInTable(p, size, s)
}

// errOtherBlock refuses, in buryStale, a table record of another block.
var errOtherBlock = errors.New("aligned: another block")

// buryStale makes dead a record of p with w's block after a free freed
// that block through w, found stale in its slot: another free of p found
// w first and buried it, having freed through it the block of p's next
// allocation, which the upstream placed as w's (aligned_slots.go). That
// allocation's record is a word equal to w or, if it found no slot free,
// the table's; a record of p with w's block in the table goes first, as
// it holds a size and a word does not: what is left records a live
// allocation of p with w's block, if there is one, whatever its size.
//
//go:noinline
func (a *Aligned) buryStale(p gpu.DevicePtr, w uint64) {
	base := p - gpu.DevicePtr(w&uint64(a.mask))*Alignment
	if r, ok := a.live.lookup(p); ok && r.v.base == base {
		_, err := a.live.take(p, r.size, func(b alignedBlock) error {
			if b.base != base {
				return errOtherBlock
			}
			return nil
		})
		if err == nil {
			return
		}
	}
	a.slots.buryEqual(p, w)
}

// freeInTable frees p, which the slots do not hold live, through the
// adaptor's pointer table.
func (a *Aligned) freeInTable(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := a.known.checkFree("aligned", a.dev, p, size, s); null || err != nil {
		return err
	}
	_, err := a.live.take(p, size, func(b alignedBlock) error { return a.upDeallocate(b.base, b.size, s) })
	if err != nil && a.slots != nil && errors.Is(err, ErrUnknownPointer) &&
		a.slots.freed(p, uint64(max(a.align, Alignment)-1)) {
		err = pointerError(p, ErrDoubleFree)
	}
	if err != nil {
		return fmt.Errorf("aligned: deallocate: %w", err)
	}
	return nil
}

// freeTooLarge is the error of a free of p, live in the slots, as size
// bytes, more than any allocation at the adaptor's alignment: the
// stream's error if the stream is bad (args.go's order), else a size
// mismatch.
//
//go:noinline
func (a *Aligned) freeTooLarge(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if !a.known.ok(a.dev, s) {
		return streamError("aligned", opDeallocate, s)
	}
	return fmt.Errorf("aligned: deallocate: pointer %#x freed as %d bytes, more than any allocation: %w",
		uint64(p), size, ErrSizeMismatch)
}

// freeRefused is the outcome of a free of p as size bytes whose live
// word w, the first in p's slots, names a block at base that the upstream
// refused with err.
//
// The word may be stale (aligned_slots.go): another free of p freed its
// block and has not buried it yet, and the upstream handed p out again
// at another offset, recorded in another slot or, with none free, in the
// table. The upstream refuses the stale block (as unknown, freed, or of
// another size), so before the free is refused, p's other live words and
// the table are tried: if one of them is p's record, the free frees it.
// Otherwise the error is the upstream's first refusal, or its size
// mismatch if another record of p was refused for its size. A free that
// lost a race with another free of p is refused by the upstream as a
// double free, or as an unknown pointer once the block was merged or
// reused: that is a double free too if the winner buried p's word.
//
//go:noinline
func (a *Aligned) freeRefused(p, base gpu.DevicePtr, size int, s gpu.Stream, w uint64, err error) error {
	if errors.Is(err, ErrUnknownPointer) || errors.Is(err, ErrDoubleFree) || errors.Is(err, ErrSizeMismatch) {
		tried := [alignedProbe]uint64{w}
		for n := 1; n < len(tried); n++ {
			sl, v := a.slots.findOther(p, uint64(a.mask), tried[:n])
			if sl == nil {
				break
			}
			tried[n] = v
			b := p - gpu.DevicePtr(v&uint64(a.mask))*Alignment
			e := a.oup.DeallocateOwned(b, size+a.pad, s, a.owner)
			if e == nil {
				if !a.slots.bury(sl, v) {
					a.buryStale(p, v)
				}
				return nil
			}
			if errors.Is(e, ErrSizeMismatch) && !errors.Is(err, ErrSizeMismatch) {
				base, err = b, e
			}
		}
		if _, ok := a.live.lookup(p); ok {
			return a.freeInTable(p, size, s)
		}
	}
	switch {
	case errors.Is(err, ErrSizeMismatch):
		return fmt.Errorf("aligned: deallocate: pointer %#x freed as %d bytes, not its size (its block %#x as %d): %w",
			uint64(p), size, uint64(base), size+a.pad, err)
	case errors.Is(err, ErrUnknownPointer) && a.slots.freed(p, uint64(a.mask)):
		err = pointerError(p, ErrDoubleFree)
	}
	return fmt.Errorf("aligned: deallocate: %w", err)
}

// Device is the upstream's device.
func (a *Aligned) Device() gpu.Device { return a.dev }
