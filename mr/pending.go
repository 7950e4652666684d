// Pending-free accounting.
//
// A resource whose Deallocate only enqueues the free (cuMemFreeAsync, or a
// pool that hands a block back to its upstream in stream order) cannot say
// when the memory is really free: the free runs when the stream reaches it.
// PendingFrees keeps the books for such a resource:
//
//	outstanding = live + pending
//
// where live bytes are handed out and not freed, and pending bytes are freed
// by an enqueued free that is not known to have completed. A reap queries
// (or synchronizes) the streams that hold pending frees and releases only
// the bytes of the streams whose work is known to be complete.
//
// Invariants, all guarded by mu and true whenever mu is not held:
//
//   - pending is the sum of e.bytes over all entries e, and pendingFrees the
//     sum of e.frees: the per-stream tallies and the totals never drift,
//     because they only ever change together, under mu.
//   - pending <= outstanding (live is never negative); Add refuses to move
//     more bytes to pending than are live, and RemoveLive refuses to remove
//     more than are live.
//   - e.claimed <= e.bytes for every entry: a reap claims a part of a
//     stream's tally before it queries or synchronizes the stream (outside
//     mu), and afterwards either releases exactly that part (the stream's
//     work was complete) or gives the claim back (it was not, or the call
//     failed). Bytes added to a stream while a reap is running are above the
//     claim and stay pending for the next reap, so a free that races with a
//     reap is never released before the stream was checked after it was
//     enqueued, and never counted twice.
//   - Two reaps may run at once; each claims only what no other reap has
//     claimed, so no byte is released twice.
//
// When the check of one stream fails, the reap stops: that stream's claim
// and the claims on every stream it has not checked yet are given back, so
// all of those bytes stay pending for the next reap, and the error is
// returned with the bytes reaped until then.
//
// Ordering rule for callers: Add must be called after the free was enqueued
// on the stream (after FreeAsync returned), so that any reap that claims
// the bytes checks the stream after the free is in its queue.
//
// The hot path, Add, takes one uncontended mutex and does one map lookup; an
// entry for a stream stays in the map while the stream is in use, so Add
// does not allocate in steady state. An entry that several reaps in a row
// found empty is removed (and recycled), so destroyed streams do not
// accumulate.

package mr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// ErrAccounting is returned when a caller asks PendingFrees to move or
// remove more bytes than it holds; nothing is changed.
var ErrAccounting = errors.New("mr: accounting error")

// Reaper is implemented by resources that keep pending-free accounting.
// Reap releases the bytes whose enqueued frees are known to have completed:
// with wait false it only queries streams and never blocks the host; with
// wait true it synchronizes them. It returns the bytes released. On error,
// everything not released stays pending for the next Reap.
type Reaper interface {
	Reap(wait bool) (reaped uint64, err error)
}

// idleReaps is how many reaps in a row must find a stream's entry empty
// before the entry is dropped. Keeping it a little while keeps Add
// allocation-free for streams that free now and then.
const idleReaps = 4

// maxSpare bounds the number of dropped entries kept for reuse.
const maxSpare = 64

// PendingFrees is pending-free accounting for one resource. The zero value
// is ready to use. It is safe for concurrent use.
//
// A resource calls AddLive(n) when it hands out n bytes, Add(s, n) once the
// free of those bytes is enqueued on s, and RemoveLive(n) for bytes it
// takes back at once (a synchronous free, an allocation rolled back).
// Outstanding is then what the resource may still hold, and Reap (or Reap
// through the resource, as a Reaper) lowers it as frees complete.
type PendingFrees struct {
	mu           sync.Mutex
	streams      map[uint64]*pendingStream
	spare        []*pendingStream
	scratch      []pendingClaim
	outstanding  uint64 // live + pending bytes
	pending      uint64 // sum of e.bytes
	pendingFrees uint64 // sum of e.frees
	liveCount    uint64 // live allocations

	// Copies of outstanding and pending, stored under mu, so that the
	// getters need no lock. Each load returns a value the field had.
	outstandingA atomic.Uint64
	pendingA     atomic.Uint64
}

// pendingStream is the tally of one stream.
type pendingStream struct {
	s        gpu.Stream
	id       uint64
	bytes    uint64 // bytes freed on s, not known complete
	frees    uint64 // number of those frees
	claimed  uint64 // bytes of bytes that running reaps are checking
	claimedN uint64 // frees of frees that running reaps are checking
	idle     int    // consecutive reaps that found the entry empty
	failed   bool   // the last check of s failed
}

// pendingClaim is the part of one stream's tally that a reap checks.
// id and s are copied from the entry under mu: once a claim is given back
// another reap may drop and recycle the entry.
type pendingClaim struct {
	e      *pendingStream
	id     uint64
	s      gpu.Stream
	failed bool
	bytes  uint64
	frees  uint64
}

// StreamPending is one stream's pending tally, as Streams reports it.
type StreamPending struct {
	Stream uint64 // Stream.ID
	Bytes  uint64 // bytes whose free is enqueued on the stream and not known complete
	Frees  uint64 // how many frees those are
}

// AddLive counts n bytes (one allocation) as handed out.
func (p *PendingFrees) AddLive(n uint64) {
	p.mu.Lock()
	p.outstanding += n
	p.liveCount++
	p.outstandingA.Store(p.outstanding)
	p.mu.Unlock()
}

// RemoveLive uncounts n live bytes (one allocation) that were released at
// once, not in stream order: a synchronous free, or an allocation rolled
// back. Removing more than is live returns an error matching ErrAccounting
// and changes nothing.
func (p *PendingFrees) RemoveLive(n uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if live := p.outstanding - p.pending; n > live || p.liveCount == 0 {
		return fmt.Errorf("mr: pending frees: remove %d live bytes of %d (%d allocations): %w",
			n, live, p.liveCount, ErrAccounting)
	}
	p.outstanding -= n
	p.liveCount--
	p.outstandingA.Store(p.outstanding)
	return nil
}

// Add records that a free of n live bytes (one allocation) was enqueued on
// s: the bytes move from live to pending and stay outstanding until a reap
// finds s's work complete. Call it after the free is enqueued. A nil stream
// returns an error matching gpu.ErrInvalidHandle, and moving more than is
// live one matching ErrAccounting; neither changes anything.
func (p *PendingFrees) Add(s gpu.Stream, n uint64) error {
	if s == nil {
		return fmt.Errorf("mr: pending frees: add %d bytes: nil stream: %w", n, gpu.ErrInvalidHandle)
	}
	id := s.ID()
	p.mu.Lock()
	if live := p.outstanding - p.pending; n > live || p.liveCount == 0 {
		p.mu.Unlock()
		return fmt.Errorf("mr: pending frees: add %d bytes on stream %d with %d live bytes (%d allocations): %w",
			n, id, live, p.liveCount, ErrAccounting)
	}
	e := p.streams[id]
	if e == nil {
		e = p.newEntry(s, id)
	}
	e.bytes += n
	e.frees++
	e.idle = 0
	p.pending += n
	p.pendingFrees++
	p.liveCount--
	p.pendingA.Store(p.pending)
	p.mu.Unlock()
	return nil
}

// newEntry makes the entry for stream id. Called with mu held.
func (p *PendingFrees) newEntry(s gpu.Stream, id uint64) *pendingStream {
	if p.streams == nil {
		p.streams = make(map[uint64]*pendingStream)
	}
	var e *pendingStream
	if n := len(p.spare); n > 0 {
		e = p.spare[n-1]
		p.spare[n-1] = nil
		p.spare = p.spare[:n-1]
	} else {
		e = new(pendingStream)
	}
	*e = pendingStream{s: s, id: id}
	p.streams[id] = e
	return e
}

// Outstanding is live plus pending bytes.
func (p *PendingFrees) Outstanding() uint64 { return p.outstandingA.Load() }

// Pending is the bytes whose free is enqueued and not known complete.
func (p *PendingFrees) Pending() uint64 { return p.pendingA.Load() }

// Live is the bytes handed out and not freed.
func (p *PendingFrees) Live() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outstanding - p.pending
}

// Counts returns live and pending bytes and the number of live allocations
// and pending frees, all from one moment.
func (p *PendingFrees) Counts() (liveBytes, pendingBytes, liveAllocs, pendingFrees uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outstanding - p.pending, p.pending, p.liveCount, p.pendingFrees
}

// Streams returns the tally of every stream that holds pending frees,
// ordered by stream ID, from one moment.
func (p *PendingFrees) Streams() []StreamPending {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]StreamPending, 0, len(p.streams))
	for _, e := range p.streams {
		if e.bytes != 0 || e.frees != 0 {
			out = append(out, StreamPending{Stream: e.id, Bytes: e.bytes, Frees: e.frees})
		}
	}
	slices.SortFunc(out, func(a, b StreamPending) int { return cmp.Compare(a.Stream, b.Stream) })
	return out
}

// Check verifies the invariants in the file comment and returns an error
// matching ErrAccounting describing the first one that does not hold. It
// exists for tests (of PendingFrees and of the resources that use it); it
// never fails unless the accounting is broken.
func (p *PendingFrees) Check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var bytes, frees uint64
	for id, e := range p.streams {
		if e.id != id {
			return fmt.Errorf("mr: pending frees: entry of stream %d filed under %d: %w", e.id, id, ErrAccounting)
		}
		if e.claimed > e.bytes || e.claimedN > e.frees {
			return fmt.Errorf("mr: pending frees: stream %d claims %d of %d bytes (%d of %d frees): %w",
				id, e.claimed, e.bytes, e.claimedN, e.frees, ErrAccounting)
		}
		bytes += e.bytes
		frees += e.frees
	}
	switch {
	case bytes != p.pending || frees != p.pendingFrees:
		return fmt.Errorf("mr: pending frees: streams hold %d bytes in %d frees, total says %d in %d: %w",
			bytes, frees, p.pending, p.pendingFrees, ErrAccounting)
	case p.pending > p.outstanding:
		return fmt.Errorf("mr: pending frees: %d pending bytes exceed %d outstanding: %w",
			p.pending, p.outstanding, ErrAccounting)
	case p.outstandingA.Load() != p.outstanding || p.pendingA.Load() != p.pending:
		return fmt.Errorf("mr: pending frees: lock-free copies disagree: %w", ErrAccounting)
	}
	return nil
}

// Reap releases the pending bytes of every stream whose work is known to be
// complete and returns how many bytes it released. With wait false it calls
// Stream.Query, never blocks, and leaves streams that are not ready
// pending; with wait true it calls Stream.Synchronize. A stream destroyed
// after its frees were enqueued cannot be asked: with wait true its device
// is synchronized instead, with wait false its bytes stay pending.
//
// Streams are checked in the order of their IDs, except that streams whose
// last check failed go after the others, so that a stream in a lasting
// error state (a sticky kernel fault) does not keep the healthy ones
// pending forever. If checking one fails, the reap stops there: the bytes
// of that stream and of every stream after it stay pending, and the error
// is returned (wrapped, naming the stream) with the bytes released before
// it.
func (p *PendingFrees) Reap(wait bool) (reaped uint64, err error) {
	return p.reap(nil, wait)
}

// ReapContext is Reap(true) with its waits bounded by ctx (context.go):
// when ctx ends, the stream being waited for and every stream not yet
// checked stay pending, as after a failure but without counting as one,
// and the error matches ctx.Err(). A stream destroyed after its frees were
// enqueued is still found complete by synchronizing the device, which ctx
// cannot interrupt.
func (p *PendingFrees) ReapContext(ctx context.Context) (reaped uint64, err error) {
	return p.reap(ctx, true)
}

// reap is Reap, with the waits bounded by ctx if it is not nil.
func (p *PendingFrees) reap(ctx context.Context, wait bool) (reaped uint64, err error) {
	p.mu.Lock()
	claims := p.scratch[:0]
	p.scratch = nil
	for id, e := range p.streams {
		if e.bytes == e.claimed {
			if e.bytes == 0 && e.claimed == 0 && e.frees == 0 {
				if e.idle++; e.idle >= idleReaps {
					delete(p.streams, id)
					if len(p.spare) < maxSpare {
						*e = pendingStream{}
						p.spare = append(p.spare, e)
					}
				}
			}
			continue
		}
		c := pendingClaim{e: e, id: e.id, s: e.s, failed: e.failed, bytes: e.bytes - e.claimed, frees: e.frees - e.claimedN}
		e.claimed += c.bytes
		e.claimedN += c.frees
		claims = append(claims, c)
	}
	p.mu.Unlock()
	slices.SortFunc(claims, func(a, b pendingClaim) int {
		if a.failed != b.failed {
			if b.failed {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})

	for i, c := range claims {
		if gpu.Capturing(c.s) {
			// Querying or synchronizing it would invalidate its
			// capture: its bytes stay pending (capture.go).
			p.mu.Lock()
			c.e.claimed -= c.bytes
			c.e.claimedN -= c.frees
			p.mu.Unlock()
			continue
		}
		done, cerr := complete(ctx, c.s, wait)
		if cerr != nil && ctx != nil && ctx.Err() != nil {
			p.unclaim(claims[i:], nil)
			err = fmt.Errorf("mr: reap pending frees: stream %d (%d bytes of it and %d later streams stay pending): %w",
				c.id, c.bytes, len(claims)-i-1, cerr)
			break
		}
		if cerr != nil {
			p.unclaim(claims[i:], c.e)
			err = fmt.Errorf("mr: reap pending frees: stream %d (%d bytes of it and %d later streams stay pending): %w",
				c.id, c.bytes, len(claims)-i-1, cerr)
			break
		}
		p.mu.Lock()
		c.e.claimed -= c.bytes
		c.e.claimedN -= c.frees
		c.e.failed = false
		if done {
			c.e.bytes -= c.bytes
			c.e.frees -= c.frees
			p.pending -= c.bytes
			p.pendingFrees -= c.frees
			p.outstanding -= c.bytes
			p.pendingA.Store(p.pending)
			p.outstandingA.Store(p.outstanding)
			reaped += c.bytes
		}
		p.mu.Unlock()
	}

	clear(claims)
	p.mu.Lock()
	if p.scratch == nil {
		p.scratch = claims[:0]
	}
	p.mu.Unlock()
	return reaped, err
}

// unclaim gives back the claims of a reap that stopped at the stream of
// entry failed (nil: the reap's context ended, and no stream failed).
func (p *PendingFrees) unclaim(claims []pendingClaim, failed *pendingStream) {
	p.mu.Lock()
	if failed != nil {
		failed.failed = true
	}
	for _, c := range claims {
		c.e.claimed -= c.bytes
		c.e.claimedN -= c.frees
	}
	p.mu.Unlock()
}

// complete reports whether all work enqueued on s so far has completed.
// Not ready is not an error; any other failure is. A wait with a ctx that
// is not nil polls under it (WaitStream).
func complete(ctx context.Context, s gpu.Stream, wait bool) (bool, error) {
	var err error
	switch {
	case wait && ctx != nil:
		err = WaitStream(ctx, s)
	case wait:
		err = s.Synchronize()
	default:
		err = s.Query()
	}
	switch {
	case err == nil:
		return true, nil
	case !wait && errors.Is(err, gpu.ErrNotReady):
		return false, nil
	case errors.Is(err, gpu.ErrDestroyed):
		if !wait {
			return false, nil
		}
		// The stream's work still runs after Destroy; a device-wide
		// synchronize is the one way left to know it finished.
		if derr := synchronizeDevice(s.Device()); derr != nil {
			return false, fmt.Errorf("stream destroyed, synchronize device: %w", derr)
		}
		return true, nil
	default:
		if wait {
			return false, fmt.Errorf("synchronize: %w", err)
		}
		return false, fmt.Errorf("query: %w", err)
	}
}
