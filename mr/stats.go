// Stats: an adaptor that counts what passes through it.
//
// For bytes and for allocations it keeps the current value (handed out and
// not freed), the peak of the current value, and the total ever handed
// out, plus the number of allocations the upstream refused. On request it
// keeps the same counters per stream, attributed to the stream an
// allocation was made on (a free on another stream lowers the allocating
// stream's current value).
//
// Over an upstream that checks owners (owner.go) and without PerStream,
// the adaptor keeps no pointer table and counts per shard of streams (a
// hash of the stream's ID), as stats_owned.go describes; what follows is
// the adaptor over any other upstream, or with PerStream (which must know
// the allocating stream of every free).
//
// Cost. A pair takes the pointer table's shard lock twice (ptrtable.go),
// which every adaptor needs to refuse bad frees. Counters that every
// stream writes would cost more: on the H100 machine's host an atomic add
// costs 9 ns alone and several times that on a line that 16 goroutines
// share. So the adaptor has two modes:
//
//   - Exact, from the start: each operation adds its change to the
//     adaptor-wide current bytes and allocations (flushed) and raises
//     the peaks, as before. The bytes are added with a compare-and-swap,
//     and the first one that fails (another goroutine changed them in
//     between: operations ran at the same moment) switches the adaptor to
//     sharded mode for good.
//   - Sharded: each stream (the stream an allocation was made on) keeps
//     the change of its current values in statStream's unflushed deltas,
//     and adds them to the adaptor-wide values when they reach statQuantum
//     bytes or statCountQuantum allocations either way, as Pool does with
//     its used bytes; a stream that repeats allocate/free pairs then
//     writes only its own cache line.
//
// The totals live beside the pointer table's shards and change under the
// shard's lock, which the insert holds anyway.
//
// Snapshot adds the streams' deltas to the flushed values, so the current
// values it reports are exact when no operation runs concurrently (it
// costs O(streams)); it also raises the peaks to the current values it
// saw. Peaks are exact in exact mode; in sharded mode a peak reached
// between two snapshots while some stream's change was not yet flushed
// may be missed, or one exceeded, by up to statQuantum bytes and
// statCountQuantum allocations per stream.
//
// Invariants:
//   - current bytes and count are the sums over the live table; they change
//     only for allocations the upstream granted and frees it accepted. A
//     bad free, or one the upstream refused, changes nothing.
//   - flushed plus every stream's unflushed deltas is the current value.
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
	// PerStream keeps counters per stream as well (a few atomic adds
	// more per operation, on the stream's own cache line). Counters of a
	// stream are kept for the life of the adaptor.
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

const (
	// statQuantum and statCountQuantum bound how far a stream's current
	// bytes and allocations may drift from the adaptor-wide values before
	// it adds its change, once several streams use the adaptor.
	statQuantum      = 1 << 20
	statCountQuantum = 256
)

// statStream is what Stats keeps of one stream, alone on its cache lines.
type statStream struct {
	// The change of the stream's current bytes and allocations since it
	// last added them to Stats.flushed.
	ubytes, ucount atomic.Int64
	own            statCounters // PerStream: the stream's own counters
	_              [cacheLine]byte
}

// statTotals are the totals of one shard of the pointer table, guarded by
// that shard's lock. The padding keeps two shards' totals a line apart
// wherever the array starts: goroutines on different streams write
// different shards at once.
type statTotals struct {
	bytes, count uint64
	_            [2*cacheLine - 16]byte
}

// Stats counts the bytes and allocations that pass through it to an
// upstream resource. It is safe for concurrent use.
type Stats struct {
	passThrough
	owned     // oup is nil unless the table-free path is used
	dev       gpu.Device
	live      ptrTable[gpu.DevicePtr, *statStream] // the allocating stream
	totals    [ptrShards]statTotals                // beside live's shards
	streams   streamTable[statStream]
	perStream bool

	_ [cacheLine]byte
	// sharded: operations ran at the same moment, and streams keep their
	// changes in their deltas. Read by every operation, written once.
	sharded atomic.Bool
	_       [cacheLine]byte
	// The adaptor-wide current values, to which streams add their deltas
	// in sharded mode, and their peaks.
	bytes, count         atomic.Int64
	peakBytes, peakCount atomic.Uint64
	failures, oom        atomic.Uint64
	// Over a trusted upstream: the flushed totals, the shard that may keep
	// a negative net in exact mode, and the shards of streams
	// (stats_owned.go).
	totalBytes, totalCount atomic.Uint64
	holder                 atomic.Pointer[statShard]
	_                      [cacheLine]byte
	shards                 [statShards]statShard
}

// NewStats returns a Stats adaptor over upstream.
func NewStats(upstream Resource, opts StatsOptions) *Stats {
	a := &Stats{passThrough: passThrough{upstream}, dev: upstream.Device(), perStream: opts.PerStream}
	if !opts.PerStream {
		a.owned = ownedOver(upstream)
	}
	return a
}

// countFailure counts an allocation the upstream refused.
func (a *Stats) countFailure(st *statStream, err error) {
	a.failures.Add(1)
	if errors.Is(err, ErrOutOfMemory) {
		a.oom.Add(1)
	}
	if a.perStream && st != nil {
		st.own.fail(err)
	}
}

// stream returns the state of s, creating it on first use.
func (a *Stats) stream(s gpu.Stream) *statStream {
	id := s.ID()
	if st := a.streams.lookup(id); st != nil {
		return st
	}
	return a.streams.get(id, func() *statStream { return new(statStream) })
}

// change adds d bytes and k allocations to the adaptor-wide values, and
// returns them. The first compare-and-swap that fails switches the adaptor
// to sharded mode.
func (a *Stats) change(d, k int64) (bytes, count int64) {
	for {
		b := a.bytes.Load()
		if a.bytes.CompareAndSwap(b, b+d) {
			bytes = b + d
			break
		}
		a.sharded.Store(true)
	}
	return bytes, a.count.Add(k)
}

// add counts an allocation of n bytes on st.
func (a *Stats) add(st *statStream, n int) {
	if a.sharded.Load() {
		b := st.ubytes.Add(int64(n))
		c := st.ucount.Add(1)
		if (b > 0 && b >= statQuantum) || (c > 0 && c >= statCountQuantum) {
			a.flush(st)
		}
	} else {
		b, c := a.change(int64(n), 1)
		raisePeak(&a.peakBytes, uint64(max(b, 0)))
		raisePeak(&a.peakCount, uint64(max(c, 0)))
	}
	if a.perStream {
		st.own.add(n)
	}
}

// sub uncounts a free of n bytes allocated on st.
func (a *Stats) sub(st *statStream, n int) {
	if a.sharded.Load() {
		b := st.ubytes.Add(-int64(n))
		c := st.ucount.Add(-1)
		if b <= -statQuantum || c <= -statCountQuantum {
			a.flush(st)
		}
	} else {
		a.change(-int64(n), -1)
	}
	if a.perStream {
		st.own.sub(n)
	}
}

// unsub undoes sub after a refused free: the memory was live all along,
// so the peaks are not raised.
func (a *Stats) unsub(st *statStream, n int) {
	if a.sharded.Load() {
		st.ubytes.Add(int64(n))
		st.ucount.Add(1)
	} else {
		a.change(int64(n), 1)
	}
	if a.perStream {
		st.own.unsub(n)
	}
}

// flush adds st's deltas to the adaptor-wide values and raises the peaks.
func (a *Stats) flush(st *statStream) {
	if b := a.bytes.Add(st.ubytes.Swap(0)); b > 0 {
		raisePeak(&a.peakBytes, uint64(b))
	}
	if c := a.count.Add(st.ucount.Swap(0)); c > 0 {
		raisePeak(&a.peakCount, uint64(c))
	}
}

// Allocate allocates from the upstream and counts the allocation, or the
// failure.
func (a *Stats) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if a.trusted() {
		return a.allocateOwned(size, s, a.owner)
	}
	if zero, err := checkAlloc("stats", a.dev, size, s); zero || err != nil {
		return 0, err
	}
	st := a.stream(s)
	p, err := a.up.Allocate(size, s)
	if err != nil {
		a.countFailure(st, err)
		return 0, fmt.Errorf("stats: %w", err)
	}
	tot := &a.totals[a.live.shardIndex(p)]
	old, replaced := a.live.insert(p, size, st, func() {
		tot.bytes += uint64(size)
		tot.count++
	})
	if replaced {
		// Freed around the adaptor and handed out again: the old
		// allocation is gone.
		a.sub(old.v, old.size)
	}
	a.add(st, size)
	return p, nil
}

// Deallocate frees p through the upstream and uncounts it. Bad frees are
// refused with typed errors before they reach the upstream.
func (a *Stats) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if a.trusted() {
		return a.deallocateOwned(p, size, s, a.owner)
	}
	if null, err := checkFree("stats", a.dev, p, size, s); null || err != nil {
		return err
	}
	_, err := a.live.take(p, size, func(st *statStream) error {
		a.sub(st, size)
		if err := a.up.Deallocate(p, size, s); err != nil {
			a.unsub(st, size)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stats: deallocate: %w", err)
	}
	return nil
}

// AllocateOwned is Allocate for owner o (owner.go).
func (a *Stats) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if a.trusted() {
		return a.allocateOwned(size, s, o)
	}
	return a.Allocate(size, s)
}

// DeallocateOwned is Deallocate for owner o (owner.go).
func (a *Stats) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if a.trusted() {
		return a.deallocateOwned(p, size, s, o)
	}
	return a.Deallocate(p, size, s)
}

// Device is the upstream's device.
func (a *Stats) Device() gpu.Device { return a.dev }

// Snapshot returns the counters of everything that passed through.
func (a *Stats) Snapshot() StatsSnapshot {
	var s StatsSnapshot
	if a.trusted() {
		a.snapshotOwned(&s)
		raisePeak(&a.peakBytes, s.Bytes.Current)
		raisePeak(&a.peakCount, s.Allocations.Current)
		s.Bytes.Peak = max(a.peakBytes.Load(), s.Bytes.Current)
		s.Allocations.Peak = max(a.peakCount.Load(), s.Allocations.Current)
		s.Failures, s.OutOfMemory = a.failures.Load(), a.oom.Load()
		return s
	}
	b, c := a.bytes.Load(), a.count.Load()
	for _, st := range a.streams.all() {
		b += st.ubytes.Load()
		c += st.ucount.Load()
	}
	s.Bytes.Current, s.Allocations.Current = uint64(max(b, 0)), uint64(max(c, 0))
	raisePeak(&a.peakBytes, s.Bytes.Current)
	raisePeak(&a.peakCount, s.Allocations.Current)
	s.Bytes.Peak = max(a.peakBytes.Load(), s.Bytes.Current)
	s.Allocations.Peak = max(a.peakCount.Load(), s.Allocations.Current)
	for i := range a.totals {
		a.live.underShard(i, func() {
			s.Bytes.Total += a.totals[i].bytes
			s.Allocations.Total += a.totals[i].count
		})
	}
	s.Failures, s.OutOfMemory = a.failures.Load(), a.oom.Load()
	return s
}

// StreamSnapshots returns the counters per stream ID; it is empty unless
// the adaptor was made with PerStream.
func (a *Stats) StreamSnapshots() map[uint64]StatsSnapshot {
	out := make(map[uint64]StatsSnapshot)
	if !a.perStream {
		return out
	}
	a.streams.each(func(id uint64, st *statStream) {
		out[id] = st.own.snapshot()
	})
	return out
}

// ResetPeaks lowers every peak to its current value.
func (a *Stats) ResetPeaks() {
	// Every stream's delta is added first, so that the adaptor-wide
	// values are the current ones and no later flush raises a peak over
	// a value that was never current.
	if a.trusted() {
		for i := range a.shards {
			a.flushOwned(&a.shards[i])
		}
	}
	for _, st := range a.streams.all() {
		a.flush(st)
		st.own.resetPeaks()
	}
	a.peakBytes.Store(uint64(max(a.bytes.Load(), 0)))
	a.peakCount.Store(uint64(max(a.count.Load(), 0)))
}

// Usage reports the adaptor's current and peak bytes as Used and
// PeakUsed. Reserved and PeakReserved are the upstream's if it is a
// UsageReporter, and the same as Used otherwise.
func (a *Stats) Usage() Usage {
	s := a.Snapshot()
	u := Usage{Used: s.Bytes.Current, PeakUsed: s.Bytes.Peak, Reserved: s.Bytes.Current, PeakReserved: s.Bytes.Peak}
	if ur, ok := a.up.(UsageReporter); ok {
		uu := ur.Usage()
		u.Reserved, u.PeakReserved = uu.Reserved, uu.PeakReserved
	}
	return u
}
