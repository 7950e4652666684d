// Limit: an adaptor that refuses allocations over a byte budget.
//
// A Budget is a number of bytes shared by any number of Limit adaptors, on
// any number of devices: a process can give "8 GiB in all" to several
// resources, and the first request that would take the sum over the budget
// fails with an *OutOfMemoryError, whatever the upstreams still hold.
//
// Each allocation is charged its size rounded up to Alignment (what any
// resource hands out at least), before the upstream is asked, so that
// concurrent requests cannot overshoot the budget together; if the
// upstream fails, the charge is given back. A free gives the charge back
// after the upstream accepted it, so the budget never counts memory that
// the upstream still holds as free.
//
// Over an upstream that checks owners (owner.go: a Pool, or adaptors over
// one) Limit keeps no pointer table: the charge of an allocation is its
// size rounded up, which the upstream's exact check of the free's size
// makes known, and a free is refunded only after the upstream accepted it
// for the adaptor's owner. Over any other upstream the table refuses bad
// frees and holds the charges.
//
// Invariants: budget.used is the sum of the charges of the live
// allocations of every Limit sharing it plus the charges of allocations in
// flight, and never exceeds budget.limit (a charge is a compare-and-swap
// that fails rather than overshoot). A Limit's own used bytes are the sum
// of its live allocations' charges.

package mr

import (
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Budget is a number of bytes that Limit adaptors share. It is safe for
// concurrent use.
type Budget struct {
	limit uint64
	used  atomic.Uint64
	peak  atomic.Uint64
}

// NewBudget returns a budget of limit bytes, none of them used.
func NewBudget(limit uint64) *Budget { return &Budget{limit: limit} }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() uint64 { return b.limit }

// Used is the bytes charged against the budget now.
func (b *Budget) Used() uint64 { return b.used.Load() }

// Peak is the most bytes ever charged at once.
func (b *Budget) Peak() uint64 { return max(b.peak.Load(), b.used.Load()) }

// charge takes n bytes if they fit, and reports whether they did, with
// the bytes used when it decided.
func (b *Budget) charge(n uint64) (ok bool, used uint64) {
	for {
		u := b.used.Load()
		if n > b.limit || u > b.limit-n {
			return false, u
		}
		if b.used.CompareAndSwap(u, u+n) {
			raisePeak(&b.peak, u+n)
			return true, u + n
		}
	}
}

func (b *Budget) refund(n uint64) { b.used.Add(-n) }

// Limit is an adaptor that charges every allocation to a Budget. It is
// safe for concurrent use.
type Limit struct {
	passThrough
	dev    gpu.Device
	budget *Budget
	owned
	live ptrTable[gpu.DevicePtr, uint64] // the charge; unused if trusted
	used atomic.Uint64
}

// NewLimit returns an adaptor over upstream that charges budget.
func NewLimit(upstream Resource, budget *Budget) *Limit {
	return &Limit{passThrough: passThrough{upstream}, dev: upstream.Device(), budget: budget,
		owned: ownedOver(upstream)}
}

// Allocate charges the budget and allocates from the upstream. A request
// over the budget fails with an *OutOfMemoryError (matching ErrOutOfMemory)
// naming the budget, without reaching the upstream.
func (l *Limit) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return l.allocate(size, s, l.owner)
}

// AllocateOwned is Allocate for owner o (owner.go).
func (l *Limit) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	return l.allocate(size, s, o)
}

func (l *Limit) allocate(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("limit", l.dev, size, s); zero || err != nil {
		return 0, err
	}
	if size > maxAlignable {
		return 0, &OutOfMemoryError{Resource: "limit", Requested: size, Stream: s.ID(),
			Reserved: l.budget.Used(), Used: l.used.Load(), Limit: l.budget.limit,
			Reason: fmt.Sprintf("%d bytes cannot be charged", size)}
	}
	c := uint64(alignUp(size))
	if ok, used := l.budget.charge(c); !ok {
		return 0, &OutOfMemoryError{Resource: "limit", Requested: size, Stream: s.ID(),
			Reserved: used, Used: l.used.Load(), Limit: l.budget.limit,
			Reason: fmt.Sprintf("over the budget of %s: %s in use, %s more do not fit",
				FormatBytes(l.budget.limit), FormatBytes(used), FormatBytes(c))}
	}
	if l.trusted() {
		p, err := l.oup.AllocateOwned(size, s, o)
		if err != nil {
			l.budget.refund(c)
			return 0, fmt.Errorf("limit: %w", err)
		}
		l.used.Add(c)
		return p, nil
	}
	p, err := l.up.Allocate(size, s)
	if err != nil {
		l.budget.refund(c)
		return 0, fmt.Errorf("limit: %w", err)
	}
	if old, replaced := l.live.insert(p, size, c, nil); replaced {
		// Freed around the adaptor and handed out again.
		l.budget.refund(old.v)
		l.used.Add(-old.v)
	}
	l.used.Add(c)
	return p, nil
}

// Deallocate frees p through the upstream and gives its charge back. Bad
// frees are refused with typed errors before they reach the upstream.
func (l *Limit) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	return l.deallocate(p, size, s, l.owner)
}

// DeallocateOwned is Deallocate for owner o (owner.go).
func (l *Limit) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	return l.deallocate(p, size, s, o)
}

func (l *Limit) deallocate(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if null, err := checkFree("limit", l.dev, p, size, s); null || err != nil {
		return err
	}
	if l.trusted() {
		if err := l.oup.DeallocateOwned(p, size, s, o); err != nil {
			return fmt.Errorf("limit: deallocate: %w", err)
		}
		c := uint64(alignUp(size))
		l.used.Add(-c)
		l.budget.refund(c)
		return nil
	}
	c, err := l.live.take(p, size, func(uint64) error { return l.up.Deallocate(p, size, s) })
	if err != nil {
		return fmt.Errorf("limit: deallocate: %w", err)
	}
	l.used.Add(-c)
	l.budget.refund(c)
	return nil
}

// Device is the upstream's device.
func (l *Limit) Device() gpu.Device { return l.dev }

// Budget is the budget the adaptor charges.
func (l *Limit) Budget() *Budget { return l.budget }

// Used is the bytes charged for this adaptor's live allocations.
func (l *Limit) Used() uint64 { return l.used.Load() }
