// Binning: requests sorted into size classes ("bins"), each served by its
// own resource, normally a FixedSize; requests larger than the largest bin
// go to the upstream.
//
// Small allocations are the most frequent and the most prone to
// fragmentation; serving each size class from blocks of exactly that size
// makes them O(1) and keeps them from splitting the upstream's memory. The
// bins are powers of two from MinSize to MaxSize, plus any the caller adds;
// the bins Binning creates take their chunks from the upstream.
//
// A free is routed by its size to the same bin its allocation went to, so
// the fast path is one search in a small sorted slice. Only when the bin
// does not know the pointer as live does Binning look further (the large
// allocations, then every FixedSize bin) to tell a wrong size
// (ErrSizeMismatch) from an unknown pointer or a double free.
//
// Invariants: bins is sorted by size, sizes distinct and multiples of
// Alignment; sizes mirrors it; start[k] is the index of the first bin whose
// size exceeds 1<<(k-1) (len(bins) if none); an allocation of n bytes is served by the first bin whose size
// is >= n, or by the upstream (recorded in large) if there is none, and
// freed through the same. Stream order, cross-stream frees and their events
// are the bins' business (FixedSize: same stream at once, another after an
// event wait) and the upstream's.

package mr

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// Bin is a size class served by a resource of the caller's.
type Bin struct {
	// Size is the largest request the bin serves, rounded up to Alignment.
	Size int
	// Resource serves the bin's requests. It must handle any size up to
	// Size.
	Resource Resource
}

// BinningOptions configure a Binning resource.
type BinningOptions struct {
	// MinSize and MaxSize bound the power-of-two bins Binning creates:
	// one FixedSize bin for each power of two from MinSize (rounded up to
	// a power of two of at least Alignment) to MaxSize. Both zero means
	// 256 B to 1 MiB; MaxSize below MinSize creates none.
	MinSize, MaxSize int
	// BlocksPerChunk is passed to the FixedSize bins (zero: their
	// default).
	BlocksPerChunk int
	// Bins are added to (or replace, for the same size) the power-of-two
	// bins.
	Bins []Bin
}

// Binning is a resource that serves size classes from bins and larger
// requests from an upstream. It is safe for concurrent use.
type Binning struct {
	up    Resource
	dev   gpu.Device
	bins  []binEntry
	sizes []int     // bins[i].size, for the search
	start [65]int32 // start[k]: the first bin above 1<<(k-1), where bin's search begins
	large ptrTable[gpu.DevicePtr, gpu.Stream]
	// usage counts every live allocation (Used) and the large allocations
	// and chunks of the created bins (Reserved); the created bins count
	// their own operations into it directly.
	usage usageMeter
}

type binEntry struct {
	size  int
	r     Resource
	fixed *FixedSize // r, if it is a FixedSize
	owned bool       // created by Binning, closed by Close
}

// NewBinning returns a Binning resource over upstream.
func NewBinning(upstream Resource, opts BinningOptions) (*Binning, error) {
	if upstream == nil {
		return nil, fmt.Errorf("binning: nil upstream: %w", gpu.ErrInvalidHandle)
	}
	lo, hi := opts.MinSize, opts.MaxSize
	if lo == 0 && hi == 0 {
		lo, hi = 256, 1<<20
	}
	if lo < 0 || hi < 0 || hi > 1<<40 || opts.BlocksPerChunk < 0 {
		return nil, fmt.Errorf("binning: bins %d..%d: %w", opts.MinSize, opts.MaxSize, ErrInvalidSize)
	}
	r := &Binning{up: upstream, dev: upstream.Device()}
	for _, b := range opts.Bins {
		if b.Resource == nil || b.Size <= 0 || b.Size > maxAlignable {
			return nil, fmt.Errorf("binning: bin of %d bytes: %w", b.Size, ErrInvalidSize)
		}
		if b.Resource.Device() != r.dev {
			return nil, fmt.Errorf("binning: bin of %d bytes: %w", b.Size, gpu.ErrWrongDevice)
		}
		size := alignUp(b.Size)
		fixed, _ := b.Resource.(*FixedSize)
		r.bins = slices.DeleteFunc(r.bins, func(e binEntry) bool { return e.size == size })
		r.bins = append(r.bins, binEntry{size: size, r: b.Resource, fixed: fixed})
	}
	size := max(Alignment, 1<<bits.Len(uint(max(lo, 1)-1)))
	for ; size <= hi; size *= 2 {
		if slices.ContainsFunc(r.bins, func(e binEntry) bool { return e.size == size }) {
			continue
		}
		f, err := newFixedSize(fmt.Sprintf("binning: bin %d", size), upstream,
			FixedSizeOptions{BlockSize: size, BlocksPerChunk: opts.BlocksPerChunk})
		if err != nil {
			return nil, err
		}
		f.meter = &r.usage
		r.bins = append(r.bins, binEntry{size: size, r: f, fixed: f, owned: true})
	}
	slices.SortFunc(r.bins, func(a, b binEntry) int { return a.size - b.size })
	r.sizes = make([]int, len(r.bins))
	for i, b := range r.bins {
		r.sizes[i] = b.size
	}
	for k := range r.start {
		// n with bits.Len(n-1) == k is above 1<<(k-1).
		r.start[k] = int32(len(r.sizes))
		if i := slices.IndexFunc(r.sizes, func(size int) bool { return k == 0 || size > 1<<(k-1) }); i >= 0 {
			r.start[k] = int32(i)
		}
	}
	return r, nil
}

// Device is the upstream's device.
func (r *Binning) Device() gpu.Device { return r.dev }

// BinSizes returns the sizes of the bins, ascending.
func (r *Binning) BinSizes() []int {
	out := make([]int, len(r.bins))
	for i, b := range r.bins {
		out[i] = b.size
	}
	return out
}

// bin returns the bin serving n > 0 bytes, or nil for the upstream.
func (r *Binning) bin(n int) *binEntry {
	// Start at the first bin larger than the power of two below n; with
	// power-of-two bins that is the answer, with others a step or two
	// before it.
	i := int(r.start[bits.Len(uint(n-1))])
	for i < len(r.sizes) && r.sizes[i] < n {
		i++
	}
	if i == len(r.sizes) {
		return nil
	}
	return &r.bins[i]
}

// Allocate serves size bytes from the smallest bin that holds them, or
// from the upstream.
func (r *Binning) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("binning", r.dev, size, s); zero || err != nil {
		return 0, err
	}
	var p gpu.DevicePtr
	var err error
	b := r.bin(size)
	if b != nil {
		p, err = b.r.Allocate(size, s)
	} else {
		p, err = r.up.Allocate(size, s)
	}
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			u := r.Usage()
			return 0, &OutOfMemoryError{Resource: "binning", Requested: size, Stream: s.ID(),
				Reserved: u.Reserved, Used: u.Used, Err: err}
		}
		return 0, fmt.Errorf("binning: allocate %d bytes: %w", size, err)
	}
	switch {
	case b == nil:
		r.large.insert(p, size, s, nil)
		r.usage.addReserved(size)
		r.usage.addUsed(size)
	case !b.owned:
		r.usage.addUsed(size)
	}
	return p, nil
}

// Deallocate frees p through the bin (or upstream) its size selects.
func (r *Binning) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("binning", r.dev, p, size, s); null || err != nil {
		return err
	}
	b := r.bin(size)
	if b == nil {
		alloc, err := r.large.take(p, size, nil)
		if err != nil {
			err = r.diagnose(p, size, err)
		}
		if err != nil {
			return fmt.Errorf("binning: deallocate: %w", err)
		}
		if err := r.up.Deallocate(p, size, s); err != nil {
			r.large.restore(p, size, alloc)
			return fmt.Errorf("binning: deallocate: %w", err)
		}
		r.usage.subReserved(size)
		r.usage.subUsed(size)
		return nil
	}
	if err := b.r.Deallocate(p, size, s); err != nil {
		if errors.Is(err, ErrUnknownPointer) || errors.Is(err, ErrDoubleFree) {
			err = r.diagnose(p, size, err)
		}
		return fmt.Errorf("binning: deallocate: %w", err)
	}
	if !b.owned {
		r.usage.subUsed(size)
	}
	return nil
}

// diagnose turns an unknown pointer or double free into a size mismatch
// when p is live elsewhere in this resource with another size (the address
// may have been a large allocation once and a bin's block now, or the
// reverse).
func (r *Binning) diagnose(p gpu.DevicePtr, size int, err error) error {
	if e, ok := r.large.lookup(p); ok && e.size != size {
		return sizeMismatchError(p, e.size, size)
	}
	for _, b := range r.bins {
		if b.fixed == nil {
			continue
		}
		if n, ok := b.fixed.liveSize(p); ok && n != size {
			return sizeMismatchError(p, n, size)
		}
	}
	return err
}

// Usage reports what Binning holds: Used is every live allocation's size;
// Reserved is the chunks of the bins it created plus the large
// allocations, plus (current value only, not in PeakReserved) what bins
// given in BinningOptions.Bins report if they are UsageReporters.
func (r *Binning) Usage() Usage {
	u := r.usage.snapshot()
	for _, b := range r.bins {
		if b.owned {
			continue
		}
		if ur, ok := b.r.(UsageReporter); ok {
			u.Reserved += ur.Usage().Reserved
		}
	}
	return u
}

// ResetPeaks lowers the peaks of Usage to the current values.
func (r *Binning) ResetPeaks() { r.usage.resetPeaks() }

// Release releases the cached memory of every bin that is a Releaser.
func (r *Binning) Release() error {
	var errs []error
	for _, b := range r.bins {
		if rel, ok := b.r.(Releaser); ok {
			if err := rel.Release(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("binning: release: %w", err)
	}
	return nil
}

// Close closes the bins Binning created (bins given in the options are the
// caller's). It fails while allocations are live in them.
func (r *Binning) Close() error {
	var errs []error
	for _, b := range r.bins {
		if b.owned {
			if err := b.fixed.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
