// Borrowed small blocks: over a Grower, a stream that would grow a small
// chunk takes a free block of another stream's small chunk instead, for
// its first poolBorrowMax such requests.
//
// Over a Grower the pool's peak of mapped memory is its live blocks
// rounded out to granules (pool_vgrow.go), and each stream that makes
// small requests keeps at least one 2 MiB small chunk. A stream whose
// small requests are few pins a whole granule for them while another
// stream's small chunk has room: replaying cuda-graph-h100, the graph's
// side stream held a small chunk for two blocks of 8 bytes at the peak,
// and torch-pipeline-2stream-b's second stage one for 72 KiB. With each
// stream's small requests in chunks of its own, 1.01 was out of reach on
// cuda-graph whatever the placement (BENCHMARKS.md, "Lifetime-aware
// placement"). Borrowing took cuda-graph from 1.0365 to 1.0309 and the
// pipeline from 1.0058 to 1.0014 (BENCHMARKS.md, "Small blocks borrowed
// across streams").
//
// So when a small request finds nothing in its stream's lists and no idle
// chunk to steal, and the pool would grow a small chunk (after releasing
// idle ones, as grow does), it first looks through the other streams'
// small chunks for a free block that fits (their own bounded best fit),
// marks it live there and orders the requesting stream after the home's
// work so far (one event, as absorbing a cross-stream free does): the
// home's earlier use of the block, freed in its stream order, completes
// before the requester's work on it. The block stays in its home's
// chunk, in the home's live map like any block; freed on the requester it
// is a cross-stream free, pending at the home until the home orders
// itself after the requester, as any block freed on another stream than
// its home.
//
// A borrow costs the slow path (Pool.mu and an event) on every such
// request, where a chunk of the stream's own would serve the next ones
// from its lists; so a stream borrows at most poolBorrowMax times, then
// grows small chunks of its own. A side stream with a few small requests
// stays within that; a stream that keeps making them pays at most
// poolBorrowMax slow requests. Replaying every trace (BENCHMARKS.md), 16,
// 64 and 256 give the same peaks; unbounded, three-stream-h100's main
// stream borrowed 5,164 times. Over an upstream of fixed chunks nothing
// changes: a chunk's memory is paid for whole there, used or not.
//
// Invariants: a borrowed block is a live block of its home (in the home's
// live map, counted in its chunk's live blocks) like any other, handed to
// the caller only after the requester waits on the home's event;
// poolStream.borrows counts the borrows of the requester, under Pool.mu.

package mr

import "github.com/streamalloc/streamalloc/gpu"

// poolBorrowMax bounds the small blocks one stream borrows; after that
// it grows small chunks of its own.
const poolBorrowMax = 64

// borrowSmall serves a small request of st from a free block of another
// stream's small chunk, or reports false. Caller holds p.mu.
func (p *Pool) borrowSmall(st *poolStream, size, rounded int) (gpu.DevicePtr, bool) {
	if gpu.Capturing(st.s) {
		return 0, false
	}
	for _, o := range p.streams.all() {
		if o == st || gpu.Capturing(o.s) {
			continue
		}
		o.lock()
		if o.dropped {
			o.mu.Unlock()
			continue
		}
		o.quickFlush()
		b := o.take(&o.small, rounded)
		if b == nil {
			o.mu.Unlock()
			continue
		}
		o.markLive(b, size, p.slowOwner)
		o.mu.Unlock()
		st.lock()
		err := st.orderAfter(o)
		st.mu.Unlock()
		if err != nil {
			// Not ordered: the block goes back, free at its home.
			o.lock()
			o.unlive(b)
			o.putFree(b)
			o.mu.Unlock()
			continue
		}
		p.wide.borrows++
		st.borrows++
		return b.ptr, true
	}
	return 0, false
}
