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
// A Limit's own used bytes. A budget charged by one Limit alone (the
// common case) holds that Limit's used bytes already, so that Limit keeps
// no counter of its own: its pair is the budget's two locked instructions,
// the charge and the refund, where a counter of its own would add two more
// (an atomic add costs 10-14 ns on the H100 machine's host). The budget's
// first Limit starts so (sole); when a second Limit is made over the same
// budget, it sets budgetShared, the top bit of the budget's word, and adds
// the word's bytes at that instant to the first Limit's counter. Every
// charge and refund of the first Limit reads that bit in the same atomic
// operation that changes the word, and counts its bytes in its own counter
// too if the bit was set: an amount charged before the switch is in the
// bytes the switch added, one charged after is counted by its operation,
// and a refund after the switch takes back either. Every later Limit
// counts its own from the start.
//
// The hot path. Over an upstream that checks owners, Allocate and
// Deallocate make one call into the adaptor: Allocate charges the budget
// with one compare-and-swap when the charge stays under the budget's peak
// (so under its limit, and the peak is not raised) and calls the
// upstream, which checks the stream (args.go's first check): a request on
// a bad stream holds its charge until the upstream refuses it, as any
// request the upstream refuses does, and changes nothing a caller sees
// after the call. Every other request takes the checked path, which checks
// the stream before the charge, as before. Deallocate frees through the
// upstream and refunds with one atomic add. A pair is those two locked
// instructions and two interface calls (on the H100 machine's host a
// compare-and-swap costs 14-17 ns and an atomic add 10-12: the pair is
// 22-24 ns over the pool's; the stream check skipped was an interface
// call and 5-10 ns).
//
// Why the budget is one word. Credit drawn from the budget in batches by
// each stream, so that a pair changes only its stream's word, would still
// take two locked instructions a pair (a stream may be used by several
// goroutines): two atomic adds cost 22-24 ns alone on the H100 machine's
// host, against 25-30 ns for this pair's compare-and-swap and add
// (BenchmarkHostCosts), a few nanoseconds at most. And it would give up
// the budget's exact Used and Peak: credit a stream holds is neither used
// nor free, and the peak of the streams' sum is not known without a word
// they all change.
//
// Invariants: budget.used (without budgetShared) is the sum of the charges
// of the live allocations of every Limit sharing it plus the charges of
// allocations in flight, and never exceeds the budget's limit (a charge is
// a compare-and-swap that fails rather than overshoot); budgetShared is
// set once a second Limit exists and never cleared. A Limit's own used
// bytes are the sum of its live allocations' charges: the budget's bytes
// while it is sole and the budget is not shared, its counter otherwise.

package mr

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Budget is a number of bytes that Limit adaptors share. It is safe for
// concurrent use.
type Budget struct {
	limit uint64
	most  uint64        // the most bytes charged at once: limit, at most budgetMax
	used  atomic.Uint64 // the bytes charged, and budgetShared
	peak  atomic.Uint64
	first atomic.Pointer[limitUsed] // the counter of the budget's first Limit
}

// budgetShared is set in Budget.used once two Limits charge the budget
// (the file comment). Charges never take the bytes there: budgetMax is
// the most a budget holds, whatever its limit.
const (
	budgetShared = 1 << 63
	budgetMax    = budgetShared - 1
)

// NewBudget returns a budget of limit bytes, none of them used.
func NewBudget(limit uint64) *Budget { return &Budget{limit: limit, most: min(limit, budgetMax)} }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() uint64 { return b.limit }

// Used is the bytes charged against the budget now.
func (b *Budget) Used() uint64 { return b.used.Load() &^ budgetShared }

// Peak is the most bytes ever charged at once.
func (b *Budget) Peak() uint64 { return max(b.peak.Load(), b.Used()) }

// charge takes n bytes if they fit, and reports whether they did, with
// the bytes used when it decided and whether the budget was shared then.
func (b *Budget) charge(n uint64) (ok bool, used uint64, shared bool) {
	lim := b.most
	for {
		v := b.used.Load()
		u := v &^ budgetShared
		if n > lim || u > lim-n {
			return false, u, v&budgetShared != 0
		}
		if b.used.CompareAndSwap(v, v+n) {
			raisePeak(&b.peak, u+n)
			return true, u + n, v&budgetShared != 0
		}
	}
}

// refund gives n charged bytes back, and reports whether the budget was
// shared then.
func (b *Budget) refund(n uint64) (shared bool) { return b.used.Add(-n)&budgetShared != 0 }

// attach makes the Limit whose counter is u one of the budget's Limits,
// and reports whether it is the first. A second one shares the budget (the
// file comment). The budget keeps the first Limit's counter, not the
// Limit, which stays free to be collected with its upstream.
func (b *Budget) attach(u *limitUsed) (first bool) {
	if b.first.CompareAndSwap(nil, u) {
		return true
	}
	f := b.first.Load()
	for {
		v := b.used.Load()
		if v&budgetShared != 0 {
			return false
		}
		if b.used.CompareAndSwap(v, v|budgetShared) {
			f.used.Add(v)
			f.counted.Store(true)
			return false
		}
	}
}

// Limit is an adaptor that charges every allocation to a Budget. It is
// safe for concurrent use.
type Limit struct {
	// What the hot path reads comes first, on one cache line.
	passThrough
	dev    gpu.Device
	budget *Budget
	owned
	// sole: the budget's first Limit, which counts its used bytes in used
	// only from the moment the budget is shared.
	sole bool
	*limitUsed
	known knownStreams                    // streams checked (args.go)
	live  ptrTable[gpu.DevicePtr, uint64] // the charge; unused if trusted
}

// limitUsed is a Limit's own count of its used bytes. counted: used holds
// them (set at once, or for the budget's first Limit once the budget's
// bytes at the moment it was shared were added to it).
type limitUsed struct {
	used    atomic.Uint64
	counted atomic.Bool
}

// NewLimit returns an adaptor over upstream that charges budget.
func NewLimit(upstream Resource, budget *Budget) *Limit {
	l := &Limit{passThrough: passThrough{upstream}, dev: upstream.Device(), budget: budget,
		owned: ownedOver(upstream), limitUsed: new(limitUsed)}
	l.sole = budget.attach(l.limitUsed)
	return l
}

// count adds d (a charge, or minus one) to the adaptor's own counter
// unless the adaptor is sole and the budget was not shared at the
// operation that changed the budget by d.
func (l *Limit) count(d uint64, shared bool) {
	if shared || !l.sole {
		l.used.Add(d)
	}
}

// charge charges c to the budget, and counts it.
func (l *Limit) charge(c uint64) (ok bool, used uint64) {
	ok, used, shared := l.budget.charge(c)
	if ok {
		l.count(c, shared)
	}
	return ok, used
}

// refund gives c back to the budget, and uncounts it.
func (l *Limit) refund(c uint64) { l.count(-c, l.budget.refund(c)) }

// Allocate charges the budget and allocates from the upstream. A request
// over the budget fails with an *OutOfMemoryError (matching ErrOutOfMemory)
// naming the budget, without reaching the upstream.
func (l *Limit) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	// The hot path (the file comment) is written out here and in
	// AllocateOwned, so that a pair makes one call into the adaptor each
	// way. uint(size-1) < maxAlignable is 0 < size <= maxAlignable.
	if l.oup != nil && uint(size-1) < maxAlignable {
		if c := uint64(alignUp(size)); l.chargeOnce(c) {
			p, err := l.oup.AllocateOwned(size, s, l.owner)
			if err != nil {
				return 0, l.refused(c, err)
			}
			return p, nil
		}
	}
	return l.allocate(size, s, l.owner)
}

// AllocateOwned is Allocate for owner o (owner.go).
func (l *Limit) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if l.oup != nil && uint(size-1) < maxAlignable {
		if c := uint64(alignUp(size)); l.chargeOnce(c) {
			p, err := l.oup.AllocateOwned(size, s, o)
			if err != nil {
				return 0, l.refused(c, err)
			}
			return p, nil
		}
	}
	return l.allocate(size, s, o)
}

// chargeOnce charges c to the budget, and counts it, if it fits without
// raising the budget's peak and no other charge or refund changes the
// budget's word between the load and the compare-and-swap; otherwise it
// changes nothing, and the caller takes the checked path (allocate), which
// tries again. The hot path leaves the stream's check to the upstream, so
// a request on a bad stream may be charged until the upstream refuses it;
// keeping under the peak, it changes nothing a caller can see after the
// call (TestAdaptorsOverOwnedBadInput).
func (l *Limit) chargeOnce(c uint64) bool {
	b := l.budget
	v := b.used.Load()
	// Under the peak is under the limit: the peak never passed it.
	if v&^budgetShared+c > b.peak.Load() || !b.used.CompareAndSwap(v, v+c) {
		return false
	}
	l.count(c, v&budgetShared != 0)
	return true
}

// refused gives back the charge c of an allocation the upstream refused
// with err, and returns err wrapped.
//
//go:noinline
func (l *Limit) refused(c uint64, err error) error {
	l.refund(c)
	return fmt.Errorf("limit: %w", err)
}

// allocate is Allocate checked step by step (args.go): the path of every
// request over an upstream that does not check owners, and of those the
// hot path does not serve (a size out of range, a charge that did not fit
// or met another charge).
func (l *Limit) allocate(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if zero, err := l.known.checkAlloc("limit", l.dev, size, s); zero || err != nil {
		return 0, err
	}
	if size > maxAlignable {
		return 0, &OutOfMemoryError{Resource: "limit", Requested: size, Stream: s.ID(),
			Reserved: l.budget.Used(), Used: l.Used(), Limit: l.budget.limit,
			Reason: fmt.Sprintf("%d bytes cannot be charged", size)}
	}
	c := uint64(alignUp(size))
	if ok, used := l.charge(c); !ok {
		return 0, &OutOfMemoryError{Resource: "limit", Requested: size, Stream: s.ID(),
			Reserved: used, Used: l.Used(), Limit: l.budget.limit,
			Reason: fmt.Sprintf("over the budget of %s: %s in use, %s more do not fit",
				FormatBytes(l.budget.limit), FormatBytes(used), FormatBytes(c))}
	}
	if l.trusted() {
		p, err := l.oup.AllocateOwned(size, s, o)
		if err != nil {
			l.refund(c)
			return 0, fmt.Errorf("limit: %w", err)
		}
		return p, nil
	}
	p, err := l.up.Allocate(size, s)
	if err != nil {
		l.refund(c)
		return 0, fmt.Errorf("limit: %w", err)
	}
	if old, replaced := l.live.insert(p, size, c, nil); replaced {
		// Freed around the adaptor and handed out again.
		l.refund(old.v)
	}
	return p, nil
}

// Deallocate frees p through the upstream and gives its charge back. Bad
// frees are refused with typed errors and give nothing back: over an
// upstream that checks owners (owner.go) the upstream refuses them, over
// any other the adaptor does before they reach the upstream.
func (l *Limit) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	// Written out as in Allocate.
	if l.oup != nil {
		// The upstream checks the arguments as args.go orders them and
		// changes nothing for a free it refuses; only one it accepted is
		// refunded (a free of the null pointer refunds nothing).
		if err := l.oup.DeallocateOwned(p, size, s, l.owner); err != nil {
			return freeRefused(err)
		}
		if p != 0 {
			l.refund(uint64(alignUp(size)))
		}
		return nil
	}
	return l.deallocate(p, size, s)
}

// DeallocateOwned is Deallocate for owner o (owner.go).
func (l *Limit) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if l.oup != nil {
		if err := l.oup.DeallocateOwned(p, size, s, o); err != nil {
			return freeRefused(err)
		}
		if p != 0 {
			l.refund(uint64(alignUp(size)))
		}
		return nil
	}
	return l.deallocate(p, size, s)
}

// freeRefused is the error of a free the upstream refused with err.
//
//go:noinline
func freeRefused(err error) error { return fmt.Errorf("limit: deallocate: %w", err) }

// deallocate is Deallocate over an upstream that does not check owners:
// the pointer table refuses bad frees and holds the charges.
func (l *Limit) deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := l.known.checkFree("limit", l.dev, p, size, s); null || err != nil {
		return err
	}
	c, err := l.live.take(p, size, func(uint64) error { return l.up.Deallocate(p, size, s) })
	if err != nil {
		return fmt.Errorf("limit: deallocate: %w", err)
	}
	l.refund(c)
	return nil
}

// Device is the upstream's device.
func (l *Limit) Device() gpu.Device { return l.dev }

// Budget is the budget the adaptor charges.
func (l *Limit) Budget() *Budget { return l.budget }

// Used is the bytes charged for this adaptor's live allocations. While
// the adaptor is its budget's only Limit it is the budget's Used, which
// counts an allocation from its charge, before the upstream answers.
func (l *Limit) Used() uint64 {
	if l.sole {
		if v := l.budget.used.Load(); v&budgetShared == 0 {
			return v
		}
		for !l.counted.Load() {
			// A second Limit is adding the budget's bytes to used.
			runtime.Gosched()
		}
	}
	return l.used.Load()
}
