// Stats over an upstream that checks owners (owner.go), without
// PerStream: no pointer table, and counters that each shard of streams
// keeps on its own cache lines.
//
// The upstream refuses every bad free exactly and changes nothing, so the
// adaptor counts a free after the upstream accepted it, from the size the
// upstream checked; it needs no record per allocation. What it keeps:
//
//   - per shard of streams (statShard), two words that only the operations
//     on its streams add to: alloc, the bytes and allocations handed out on
//     them since its last flush, and free, the bytes and allocations freed
//     on them since then, each packed as bytes<<statPackBits | count. A
//     free counts on the shard of the stream it is made on, whatever stream
//     allocated: the adaptor-wide values are sums, and without PerStream
//     nothing is reported per stream.
//   - A stream's shard is statShards' Fibonacci hash of its ID, computed,
//     not looked up: no table of streams, no state created on a stream's
//     first use, and the pair's only write is one atomic add to its shard's
//     line. Streams get consecutive IDs (gpu.NewStreamID), and any 34
//     consecutive IDs fall in 34 different shards, so the streams of a
//     program rarely share one; two that do share its words, which stays
//     exact (they are atomics) and costs only the contention of the line.
//     Below, "stream" in the flush rules means a shard.
//   - adaptor-wide, the flushed current bytes and allocations (Stats.bytes,
//     Stats.count), the flushed totals and the peaks. A flush moves a
//     stream's two words into them (swapping each word to zero, so that
//     every amount is counted in exactly one place).
//
// When a stream flushes. Its net (alloc minus free) is what it adds to the
// flushed current value. An allocation that makes the net positive
// flushes, and the peaks are raised to the flushed values: so the flushed
// value is never below the current one while nets are at most zero, and a
// peak is exact when reached. A repeated allocate/free pair on a stream
// goes 0, -n, 0, -n...: after its first allocation it never flushes, and
// writes only its own line (one atomic add per operation).
//
// Exact mode (the start): at most one stream, the holder, may keep a
// negative net; a free on any other stream flushes at once, and an
// allocation on another stream first flushes the holder's net and becomes
// the holder. While operations do not overlap, the flushed value minus the
// holder's net is the current value, and the peaks are exact, whatever
// streams are used. The holder changes with a compare-and-swap; the first
// that fails (two streams changed holders at the same moment) switches the
// adaptor to sharded mode for good, in which every stream may keep a
// negative net down to -statQuantum bytes or -statCountQuantum allocations
// before it flushes. A peak reached in sharded mode can then be overstated
// by up to those amounts per stream (the flushed value counts memory that
// another stream freed and has not flushed), never missed.
//
// A word also flushes before its packed count or bytes could overflow
// (statPackCount, statPackBytes), which bounds the totals' delay too.
//
// Invariants: the current value is Stats.bytes plus every stream's net,
// the total is the flushed total plus every stream's alloc word; both change
// only for allocations the upstream granted and frees it accepted.
// Snapshot is exact when no operation runs concurrently.

package mr

import (
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

const (
	statPackBits = 16
	// statPackCount and statPackBytes bound a packed word's count and
	// bytes: a word at or past either flushes, far below overflow.
	statPackCount = 1 << (statPackBits - 1)
	statPackBytes = 1 << 40
)

const (
	statShardBits = 6
	statShards    = 1 << statShardBits
)

// statShard is one shard of the streams' words (the file comment). The
// padding keeps two shards' words 128 bytes apart wherever the array
// starts: off one line, and off the pair of lines a core's adjacent-line
// prefetcher fetches together.
type statShard struct {
	alloc, free atomic.Uint64
	_           [2*cacheLine - 16]byte
}

// shard returns the shard of stream s.
func (a *Stats) shard(s gpu.Stream) *statShard {
	return &a.shards[s.ID()*0x9E3779B97F4A7C15>>(64-statShardBits)]
}

func statPack(n int) uint64          { return uint64(n)<<statPackBits | 1 }
func statBytes(w uint64) int64       { return int64(w >> statPackBits) }
func statCount(w uint64) int64       { return int64(w & (1<<statPackBits - 1)) }
func statFull(w uint64) bool         { return statCount(w) >= statPackCount || statBytes(w) >= statPackBytes }
func statNet(a, f uint64) int64      { return statBytes(a) - statBytes(f) }
func statNetCount(a, f uint64) int64 { return statCount(a) - statCount(f) }

// allocateOwned is Allocate over a trusted upstream without PerStream.
func (a *Stats) allocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	p, err := a.oup.AllocateOwned(size, s, o)
	if err != nil {
		// Bad arguments are refused, not counted as failures.
		if _, aerr := checkAlloc("stats", a.dev, size, s); aerr != nil {
			return 0, aerr
		}
		a.countFailure(nil, err)
		return 0, fmt.Errorf("stats: %w", err)
	}
	if size == 0 {
		return p, nil
	}
	st := a.shard(s)
	w := st.alloc.Add(statPack(size))
	if a.sharded.Load() {
		if statNet(w, st.free.Load()) > 0 || statFull(w) {
			a.flushOwned(st)
		}
		return p, nil
	}
	if h := a.holder.Load(); h != st {
		// Another stream may hold a negative net: flush it first, so
		// that the flushed value is the current one, then take over.
		if h != nil {
			a.flushOwned(h)
		}
		if !a.holder.CompareAndSwap(h, st) {
			a.sharded.Store(true)
		}
		a.flushOwned(st)
		return p, nil
	}
	if statNet(w, st.free.Load()) > 0 || statFull(w) {
		a.flushOwned(st)
	}
	return p, nil
}

// deallocateOwned is Deallocate over a trusted upstream without PerStream.
func (a *Stats) deallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if err := a.oup.DeallocateOwned(p, size, s, o); err != nil {
		return fmt.Errorf("stats: deallocate: %w", err)
	}
	if p == 0 {
		return nil
	}
	st := a.shard(s)
	w := st.free.Add(statPack(size))
	if a.sharded.Load() {
		if statFull(w) {
			a.flushOwned(st)
		} else if al := st.alloc.Load(); statNet(al, w) <= -statQuantum || statNetCount(al, w) <= -statCountQuantum {
			a.flushOwned(st)
		}
		return nil
	}
	if a.holder.Load() != st || statFull(w) {
		a.flushOwned(st)
	}
	return nil
}

// flushOwned moves st's words into the adaptor-wide values and raises the
// peaks to them.
func (a *Stats) flushOwned(st *statShard) {
	al, fr := st.alloc.Swap(0), st.free.Swap(0)
	if al == 0 && fr == 0 {
		return
	}
	if b := a.bytes.Add(statNet(al, fr)); b > 0 {
		raisePeak(&a.peakBytes, uint64(b))
	}
	if c := a.count.Add(statNetCount(al, fr)); c > 0 {
		raisePeak(&a.peakCount, uint64(c))
	}
	if al != 0 {
		a.totalBytes.Add(uint64(statBytes(al)))
		a.totalCount.Add(uint64(statCount(al)))
	}
}

// snapshotOwned is Snapshot's current values and totals without a table.
func (a *Stats) snapshotOwned(s *StatsSnapshot) {
	b, c := a.bytes.Load(), a.count.Load()
	tb, tc := a.totalBytes.Load(), a.totalCount.Load()
	for i := range a.shards {
		st := &a.shards[i]
		al, fr := st.alloc.Load(), st.free.Load()
		b += statNet(al, fr)
		c += statNetCount(al, fr)
		tb += uint64(statBytes(al))
		tc += uint64(statCount(al))
	}
	s.Bytes.Current, s.Allocations.Current = uint64(max(b, 0)), uint64(max(c, 0))
	s.Bytes.Total, s.Allocations.Total = tb, tc
}
