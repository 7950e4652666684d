// Stats: an adaptor that counts what passes through it.
//
// For bytes and for allocations it keeps the current value (handed out and
// not freed), the peak of the current value, and the total ever handed
// out, plus the number of allocations the upstream refused. On request it
// keeps the same counters per stream, attributed to the stream an
// allocation was made on (a free on another stream lowers the allocating
// stream's current value).
//
// Counters are atomics, so the adaptor is cheap enough to leave on; the
// one lock an operation takes is the shard lock of the pointer table
// (ptrtable.go), which every adaptor needs to refuse bad frees.
//
// Invariants:
//   - current bytes and count are the sums over the live table; they change
//     only for allocations the upstream granted and frees it accepted. A
//     bad free, or one the upstream refused, changes nothing.
//   - A free is uncounted before the upstream frees the memory, so an
//     allocation that gets the same memory back is counted after it: peaks
//     never include memory that was handed out twice. If the upstream then
//     refuses the free, the counts are restored (without touching peaks).
//   - peak >= current at every instant a reader can observe through
//     Snapshot (the snapshot clamps a peak read a moment before the current
//     value).

package mr

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// Counter is one statistic: the current value, its high-water mark since
// creation or ResetPeaks, and the total ever added.
type Counter struct {
	Current, Peak, Total uint64
}

// StatsSnapshot is the state of a Stats adaptor (or of one of its streams)
// at one moment.
type StatsSnapshot struct {
	Bytes       Counter // bytes handed out
	Allocations Counter // allocations handed out
	// Failures counts allocations the upstream refused; OutOfMemory is the
	// part of them that matched ErrOutOfMemory.
	Failures, OutOfMemory uint64
}

// StatsOptions configure a Stats adaptor.
type StatsOptions struct {
	// PerStream keeps counters per stream as well (one map lookup more
	// per operation). Counters of a stream are kept for the life of the
	// adaptor.
	PerStream bool
}

// statCounters are the atomics behind one StatsSnapshot.
type statCounters struct {
	bytes, peakBytes, totalBytes atomic.Uint64
	count, peakCount, totalCount atomic.Uint64
	failures, oom                atomic.Uint64
}

func (c *statCounters) add(n int) {
	raisePeak(&c.peakBytes, c.bytes.Add(uint64(n)))
	raisePeak(&c.peakCount, c.count.Add(1))
	c.totalBytes.Add(uint64(n))
	c.totalCount.Add(1)
}

func (c *statCounters) sub(n int) {
	c.bytes.Add(-uint64(n))
	c.count.Add(^uint64(0))
}

// unsub undoes sub after a refused free: the memory was live all along,
// so the peaks are not raised.
func (c *statCounters) unsub(n int) {
	c.bytes.Add(uint64(n))
	c.count.Add(1)
}

func (c *statCounters) fail(err error) {
	c.failures.Add(1)
	if errors.Is(err, ErrOutOfMemory) {
		c.oom.Add(1)
	}
}

func (c *statCounters) snapshot() StatsSnapshot {
	s := StatsSnapshot{
		Bytes:       Counter{Current: c.bytes.Load(), Peak: c.peakBytes.Load(), Total: c.totalBytes.Load()},
		Allocations: Counter{Current: c.count.Load(), Peak: c.peakCount.Load(), Total: c.totalCount.Load()},
		Failures:    c.failures.Load(),
		OutOfMemory: c.oom.Load(),
	}
	s.Bytes.Peak = max(s.Bytes.Peak, s.Bytes.Current)
	s.Allocations.Peak = max(s.Allocations.Peak, s.Allocations.Current)
	return s
}

func (c *statCounters) resetPeaks() {
	c.peakBytes.Store(c.bytes.Load())
	c.peakCount.Store(c.count.Load())
}

// Stats counts the bytes and allocations that pass through it to an
// upstream resource. It is safe for concurrent use.
type Stats struct {
	passThrough
	dev       gpu.Device
	live      ptrTable[gpu.DevicePtr, *statCounters] // the allocating stream's counters, or nil
	all       statCounters
	perStream bool
	streams   sync.Map // Stream.ID -> *statCounters
}

// NewStats returns a Stats adaptor over upstream.
func NewStats(upstream Resource, opts StatsOptions) *Stats {
	return &Stats{passThrough: passThrough{upstream}, dev: upstream.Device(), perStream: opts.PerStream}
}

func (a *Stats) streamCounters(s gpu.Stream) *statCounters {
	if !a.perStream {
		return nil
	}
	id := s.ID()
	if c, ok := a.streams.Load(id); ok {
		return c.(*statCounters)
	}
	c, _ := a.streams.LoadOrStore(id, new(statCounters))
	return c.(*statCounters)
}

// Allocate allocates from the upstream and counts the allocation, or the
// failure.
func (a *Stats) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("stats", a.dev, size, s); zero || err != nil {
		return 0, err
	}
	sc := a.streamCounters(s)
	p, err := a.up.Allocate(size, s)
	if err != nil {
		a.all.fail(err)
		if sc != nil {
			sc.fail(err)
		}
		return 0, fmt.Errorf("stats: %w", err)
	}
	if old, replaced := a.live.insert(p, size, sc, nil); replaced {
		// Freed around the adaptor and handed out again: the old
		// allocation is gone.
		a.all.sub(old.size)
		if old.v != nil {
			old.v.sub(old.size)
		}
	}
	a.all.add(size)
	if sc != nil {
		sc.add(size)
	}
	return p, nil
}

// Deallocate frees p through the upstream and uncounts it. Bad frees are
// refused with typed errors before they reach the upstream.
func (a *Stats) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("stats", a.dev, p, size, s); null || err != nil {
		return err
	}
	_, err := a.live.take(p, size, func(sc *statCounters) error {
		a.all.sub(size)
		if sc != nil {
			sc.sub(size)
		}
		if err := a.up.Deallocate(p, size, s); err != nil {
			a.all.unsub(size)
			if sc != nil {
				sc.unsub(size)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stats: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (a *Stats) Device() gpu.Device { return a.dev }

// Snapshot returns the counters of everything that passed through.
func (a *Stats) Snapshot() StatsSnapshot { return a.all.snapshot() }

// StreamSnapshots returns the counters per stream ID; it is empty unless
// the adaptor was made with PerStream.
func (a *Stats) StreamSnapshots() map[uint64]StatsSnapshot {
	out := make(map[uint64]StatsSnapshot)
	a.streams.Range(func(k, v any) bool {
		out[k.(uint64)] = v.(*statCounters).snapshot()
		return true
	})
	return out
}

// ResetPeaks lowers every peak to its current value.
func (a *Stats) ResetPeaks() {
	a.all.resetPeaks()
	a.streams.Range(func(_, v any) bool {
		v.(*statCounters).resetPeaks()
		return true
	})
}

// Usage reports the adaptor's current and peak bytes as Used and
// PeakUsed. Reserved and PeakReserved are the upstream's if it is a
// UsageReporter, and the same as Used otherwise.
func (a *Stats) Usage() Usage {
	s := a.all.snapshot()
	u := Usage{Used: s.Bytes.Current, PeakUsed: s.Bytes.Peak, Reserved: s.Bytes.Current, PeakReserved: s.Bytes.Peak}
	if ur, ok := a.up.(UsageReporter); ok {
		uu := ur.Usage()
		u.Reserved, u.PeakReserved = uu.Reserved, uu.PeakReserved
	}
	return u
}
