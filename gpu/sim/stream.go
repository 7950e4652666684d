// Streams: queues of operations run in order, asynchronously to the host.
//
// The host appends operations to a singly linked list (tail, guarded by
// stream.mu and touched by host goroutines only). A worker goroutine,
// started when work arrives on an idle stream and gone when the queue is
// empty, follows the list and publishes progress in done.
//
// Hand-off invariant: a stream has at most one worker, and never work
// without one. running says whether a worker exists; it and the links
// are changed only under wmu. The worker publishes each completion, reads
// the next link and, finding none, clears running, all in one critical
// section, and exits right after; enqueue links the operation and starts a
// worker exactly when it finds running clear, in one critical section, so
// an operation is either seen by the current worker or given to a new one.
// A new worker starts at the operation it was created for; it needs no
// shared "current head", and the worker before it has run every operation
// and will touch none again. The decisions are made under a mutex rather
// than by atomics alone on purpose: a "store my flag, then load yours"
// handshake needs sequentially consistent atomics, and inside
// runtime.RaceDisable (below) the race runtime's atomics are only
// acquire/release, so such a handshake loses wake-ups under -race: work
// linked as the worker gives up is left with no worker, and Synchronize
// waits forever.
//
// The link pointers, running, done, waiters and the sticky error are
// atomics accessed with race synchronization disabled, and wmu is taken
// with race synchronization disabled, so the queue creates no
// happens-before edge; the edges the driver guarantees are explicit:
//
//   - the host releases each operation when enqueuing it, and the worker
//     acquires it before running it (host order -> device);
//   - the worker releases each operation when done with it (for events,
//     Synchronize, Query and pool reuse to acquire) and releases tailSync,
//     which the next worker of the stream acquires (stream order, even
//     across worker goroutines).
//
// Invariant: done <= seq of tail; an operation runs only after every
// operation before it on the stream completed.

package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

type opKind uint8

const (
	opNop opKind = iota
	opAlloc
	opFree
	opRecord
	opWait
	opHold
	opMemset
	opCopyHtoD
	opCopyDtoH
	opCopyDtoD
	opLaunch
	opPrefetch  // cuMemPrefetchAsync: dst, n, and toHost in val (managed.go)
	opGraphJoin // a wait on another lane of a graph launch, taking its sticky error (graph.go)
	opCopyPeer  // cuMemcpyPeerAsync between two devices (peer.go)
)

// op is one operation on a stream. Fields above next are written by the
// host before the operation is enqueued and read-only afterwards.
type op struct {
	kind opKind
	s    *stream
	seq  uint64
	// What happens before this op, other than its stream's earlier ops:
	// deps, and what the host had observed complete at host generation
	// gen (vclock.go).
	deps clock
	gen  uint64
	name string // driver call, for errors

	dst, src gpu.DevicePtr
	n        int
	val      byte
	host     []byte
	launch   *Launch
	rec      *op    // opWait: the record operation waited on (nil: never recorded)
	waits    []*op  // opAlloc: frees the allocation must wait for
	acquires []*op  // opAlloc: due frees it reuses memory of (see due)
	after    uint64 // seq of the last slow operation on the stream up to this one
	hold     chan struct{}
	dstDev   *Device // opCopyPeer: the devices of dst and src
	srcDev   *Device

	next atomic.Pointer[op]
	at   atomic.Int64                // opRecord: completion time, since epoch
	err  atomic.Pointer[stickyError] // opRecord: the stream's sticky error when reached
}

type stickyError struct{ err error }

var epoch = time.Now()

// stream implements gpu.Stream.
type stream struct {
	dev *Device
	id  uint64
	raw uintptr // the simulator's raw handle (foreign.go)
	// foreign: made by a raw call (NewRawStream, or the default streams),
	// so users see it only through adopted wrappers.
	foreign bool

	mu        sync.Mutex // host side
	destroyed bool
	tail      *op
	seq       uint64 // == tail.seq
	lastSlow  uint64 // seq of the last slow operation enqueued
	deps      clock  // explicit clock of the next operation, pruned of what the host knows
	hostGen   uint64 // host generation of the next operation
	hist      []histEntry
	// exactFrom is the first sequence number whose deps hist still
	// holds: older entries are dropped beyond Config.History (vclock.go).
	exactFrom uint64
	cs        capState // its part in a capture (capture.go)

	// What the host knows of this stream's operations: hostLog, guarded
	// by Backend.hostMu, lists (generation, seq) as the host learned of
	// later ones, at most twice Config.History entries; hostLast is its
	// last entry, read without the lock.
	hostLog  []hostTick
	hostLast atomic.Pointer[hostTick]
	hostSeen clock // the clock of the last operation the host observed here (Backend.hostMu)

	tailSync byte // race-detector address chaining the stream's workers

	// listed: s is in its device's touched list; failed: in its failed
	// list (device.go). Race synchronization disabled.
	listed, failed atomic.Bool

	// wmu guards the hand-off (running, the links) and completion (done
	// changes, waiters), always with race synchronization disabled.
	wmu     sync.Mutex
	wcond   *sync.Cond // on wmu: done changed
	running atomic.Bool
	done    atomic.Uint64 // written under wmu, read anywhere
	waiters atomic.Int32
	sticky  atomic.Pointer[stickyError]
}

func newStream(d *Device) *stream {
	s := &stream{dev: d, id: gpu.NewStreamID(), raw: newRaw()}
	s.tail = &op{s: s} // sentinel: seq 0, never run
	s.wcond = sync.NewCond(&s.wmu)
	return s
}

var _ gpu.Stream = (*stream)(nil)

func (s *stream) ID() uint64         { return s.id }
func (s *stream) Device() gpu.Device { return s.dev }

func (s *stream) isDestroyed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.destroyed
}

// doneSeq is the sequence number of the last completed operation.
func (s *stream) doneSeq() uint64 {
	raceDisable()
	v := s.done.Load()
	raceEnable()
	return v
}

// stickyErr returns the stream's sticky error, without ordering.
func (s *stream) stickyErr() error {
	raceDisable()
	e := s.sticky.Load()
	raceEnable()
	if e == nil {
		return nil
	}
	return e.err
}

func (s *stream) setSticky(err error) {
	raceDisable()
	first := s.sticky.CompareAndSwap(nil, &stickyError{err})
	raceEnable()
	if first {
		s.dev.trackFailed(s)
	}
}

// joinOpLocked orders the stream's next operation after o (an event's
// record, a free whose memory it reuses): it adds o and o's explicit clock
// to the stream's, leaving out the stream's own component (stream order
// has it) and every tick the host knows at the stream's host generation
// (the next operation's host generation covers them). o's own host
// generation is older than the stream's, so covered too.
func (s *stream) joinOpLocked(o *op) {
	s.nextDepsLocked()
	b, gen := s.dev.b, s.hostGen
	known := func(id, seq uint64) bool {
		st := b.stream(id)
		return st != nil && b.hostKnows(st, seq, gen)
	}
	if nd, grew := s.deps.joinPruned(o.deps, tick{o.s.id, o.seq}, s.id, known); grew {
		s.deps = nd
		s.noteLocked()
	}
}

// noteLocked records the stream's clock (deps, hostGen) in its history,
// for the operations from the next one on.
func (s *stream) noteLocked() {
	if n := len(s.hist); n > 0 && s.hist[n-1].from == s.seq+1 {
		s.hist[n-1].deps, s.hist[n-1].gen = s.deps, s.hostGen
		return
	}
	s.hist = append(s.hist, histEntry{from: s.seq + 1, deps: s.deps, gen: s.hostGen})
	if keep := s.dev.b.cfg.History; keep > 0 && len(s.hist) >= 2*keep {
		s.forgetLocked(len(s.hist) - keep)
	}
}

// hostLearnLocked records that the host knows operation seq of s
// complete from generation gen on, and whether that is news. Backend.hostMu
// is held.
func (s *stream) hostLearnLocked(seq, gen uint64) bool {
	if last := s.hostLast.Load(); last != nil && last.seq >= seq {
		return false
	}
	if keep := s.dev.b.cfg.History; keep > 0 && len(s.hostLog) >= 2*keep {
		s.hostLog = append(s.hostLog[:0:0], s.hostLog[len(s.hostLog)-keep:]...)
	}
	s.hostLog = append(s.hostLog, hostTick{gen: gen, seq: seq})
	t := s.hostLog[len(s.hostLog)-1]
	s.hostLast.Store(&t)
	b := s.dev.b
	b.learned[b.nlearned%hostNews] = learnedTick{gen: gen, s: s}
	b.nlearned++
	return true
}

// forgetLocked drops the oldest n entries of the history: HappensBefore
// no longer answers for operations enqueued before the first one kept.
// Dropping half of 2*History at a time keeps the cost O(1) per change.
func (s *stream) forgetLocked(n int) {
	s.exactFrom = s.hist[n].from
	s.hist = append(s.hist[:0:0], s.hist[n:]...)
}

// nextDepsLocked brings the clock of the next operation up to date: the
// host's current generation.
func (s *stream) nextDepsLocked() {
	if g := s.dev.b.hostGen.Load(); g != s.hostGen {
		s.hostGen = g
		s.noteLocked()
	}
}

// enqueueLocked appends o and makes sure a worker runs it. s.mu is held.
func (s *stream) enqueueLocked(o *op) {
	s.nextDepsLocked()
	o.deps, o.gen = s.deps, s.hostGen
	s.seq++
	o.s, o.seq = s, s.seq
	if o.slow() {
		s.lastSlow = o.seq
	}
	o.after = s.lastSlow
	raceRelease(unsafe.Pointer(o))
	raceDisable()
	s.wmu.Lock()
	start := !s.running.Load()
	if start {
		// The stream is idle: the last worker ran the tail and exited; o
		// goes to a new worker and the tail needs no link.
		s.running.Store(true)
	} else {
		s.tail.next.Store(o) // the worker has not exited: it will see this
	}
	s.wmu.Unlock()
	raceEnable()
	s.tail = o
	s.dev.track(s)
	if start {
		go s.work(o)
	}
}

// slow reports whether o may take time on the device: it moves bytes,
// runs a kernel, holds the stream, or waits on another stream. The others
// (a free, an allocation that waits on nothing, an event record, a no-op)
// take none: on the card they complete microseconds after the stream
// reaches them.
func (o *op) slow() bool {
	switch o.kind {
	case opNop, opFree, opRecord:
		return false
	case opAlloc:
		return len(o.waits) > 0
	}
	return true
}

// due reports whether o has completed or will without waiting on
// anything: every operation between the stream's last completed one and o
// takes no time. The driver-pool model treats a due free as complete, so
// that its decisions do not depend on how soon the simulator's goroutines
// get to run what takes no time (a replay without kernels then gives the
// same figures on every run); an allocation that reuses a block on the
// strength of a due free waits for the free before it runs (exec), so
// memory is still handed over in the order the race detector sees.
func (o *op) due() bool { return o.s.doneSeq() >= o.after }

// work runs o and the operations linked after it, in order, until it
// finds none. It is the stream's only worker while it runs.
func (s *stream) work(o *op) {
	raceAcquire(unsafe.Pointer(&s.tailSync))
	inExec := false
	defer func() {
		if !inExec {
			return
		}
		// exec did not return. Kernel panics are recovered in runKernel,
		// so this is runtime.Goexit in a kernel (t.FailNow, say), or a
		// simulator panic that is about to crash the process anyway. Fail
		// the stream and hand the rest of the queue to a new worker, so
		// that Synchronize reports the failure instead of waiting forever.
		what := o.name
		if o.launch != nil {
			what = "kernel " + o.launch.Entry
		}
		s.setSticky(driverErrf(o.name, gpu.ErrLaunchFailed, "%s: the stream's goroutine exited inside it (runtime.Goexit)", what))
		raceRelease(unsafe.Pointer(o))
		raceRelease(unsafe.Pointer(&s.tailSync))
		if next := s.complete(o); next != nil {
			go s.work(next) // running stays set: ownership passes on
		}
	}()
	for o != nil {
		raceAcquire(unsafe.Pointer(o))
		inExec = true
		s.exec(o)
		inExec = false
		raceRelease(unsafe.Pointer(o))
		raceRelease(unsafe.Pointer(&s.tailSync))
		o = s.complete(o)
	}
}

// complete publishes the completion of o, wakes waiters, and returns the
// next operation, or nil after giving up the stream (running cleared, in
// the same critical section as the check: see the file comment).
func (s *stream) complete(o *op) (next *op) {
	raceDisable()
	s.wmu.Lock()
	s.done.Store(o.seq)
	if s.waiters.Load() > 0 {
		s.wcond.Broadcast()
	}
	next = o.next.Load()
	if next == nil {
		s.running.Store(false)
	} else {
		// o is not the tail: unlink it, so that an event's record
		// operation does not keep the rest of the queue alive.
		o.next.Store(nil)
	}
	s.wmu.Unlock()
	raceEnable()
	return next
}

// waitSeq blocks until operation seq has completed, creating no
// happens-before edge; callers acquire the operation themselves.
func (s *stream) waitSeq(seq uint64) {
	raceDisable()
	if s.done.Load() < seq {
		// done changes only under wmu, so checking it under wmu cannot
		// miss the Broadcast of the completion waited for.
		s.wmu.Lock()
		s.waiters.Add(1)
		for s.done.Load() < seq {
			s.wcond.Wait()
		}
		s.waiters.Add(-1)
		s.wmu.Unlock()
	}
	raceEnable()
}

// exec runs one operation on the worker.
func (s *stream) exec(o *op) {
	switch o.kind {
	case opNop, opFree:
	case opWait:
		if r := o.rec; r != nil {
			r.s.waitSeq(r.seq)
			raceAcquire(unsafe.Pointer(r))
		}
	case opGraphJoin:
		r := o.rec
		r.s.waitSeq(r.seq)
		raceAcquire(unsafe.Pointer(r))
		if err := r.s.stickyErr(); err != nil {
			s.setSticky(err)
		}
	case opAlloc:
		for _, w := range o.waits {
			w.s.waitSeq(w.seq)
			raceAcquire(unsafe.Pointer(w))
		}
		for _, a := range o.acquires {
			a.s.waitSeq(a.seq)
			raceAcquire(unsafe.Pointer(a))
		}
	case opRecord:
		raceDisable()
		o.at.Store(int64(time.Since(epoch)))
		if e := s.sticky.Load(); e != nil {
			o.err.Store(e)
		}
		raceEnable()
	case opHold:
		raceDisable()
		<-o.hold
		raceEnable()
	default:
		if s.stickyErr() != nil {
			return // the stream has failed: skip memory work, as a dead context does
		}
		if err := s.dev.run(o); err != nil {
			s.setSticky(err)
		}
	}
}

// syncNow waits for everything enqueued so far, orders the host after it,
// and returns the sticky error, if any, wrapped for call.
func (s *stream) syncNow(call string) error {
	s.mu.Lock()
	last := s.tail
	s.mu.Unlock()
	s.waitSeq(last.seq)
	s.observed(last)
	if err := s.stickyErr(); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return nil
}

// observed orders the host after completed operation o.
func (s *stream) observed(o *op) {
	if o.seq == 0 {
		return
	}
	raceAcquire(unsafe.Pointer(o))
	s.dev.b.hostJoin(o)
}

// Synchronize blocks until all work enqueued so far has completed.
func (s *stream) Synchronize() error {
	if s == nil {
		return wrap("cuStreamSynchronize", fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return wrap("cuStreamSynchronize", gpu.ErrDestroyed)
	}
	if err := s.dev.inject(OpStreamSynchronize); err != nil {
		return err
	}
	if err := s.streamGate("cuStreamSynchronize"); err != nil {
		return err
	}
	err := s.syncNow("cuStreamSynchronize")
	s.dev.afterSync()
	return err
}

// Query returns nil when all work enqueued so far has completed and an
// error matching gpu.ErrNotReady when not.
func (s *stream) Query() error {
	if s == nil {
		return wrap("cuStreamQuery", fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return wrap("cuStreamQuery", gpu.ErrDestroyed)
	}
	if err := s.dev.inject(OpStreamQuery); err != nil {
		return err
	}
	if err := s.streamGate("cuStreamQuery"); err != nil {
		return err
	}
	s.mu.Lock()
	last := s.tail
	s.mu.Unlock()
	if s.doneSeq() < last.seq {
		return driverErr("cuStreamQuery", gpu.ErrNotReady)
	}
	s.observed(last)
	if err := s.stickyErr(); err != nil {
		return fmt.Errorf("cuStreamQuery: %w", err)
	}
	return nil
}

// WaitEvent makes later work on s wait for e's completion.
func (s *stream) WaitEvent(ge gpu.Event) error {
	const call = "cuStreamWaitEvent"
	if s == nil {
		return wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return wrap(call, gpu.ErrDestroyed)
	}
	e, err := s.dev.event(call, ge)
	if err != nil {
		return err
	}
	if err := s.dev.inject(OpStreamWaitEvent); err != nil {
		return err
	}
	if done, err := s.captureWait(e, call); done {
		return err
	}
	e.mu.Lock()
	rec := e.rec
	e.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec != nil && rec.s != s {
		s.joinOpLocked(rec)
	} else {
		rec = nil // same stream or never recorded: nothing to wait for
	}
	s.enqueueLocked(&op{kind: opWait, rec: rec, name: call})
	return nil
}

// Destroy releases the stream; work already enqueued still runs.
func (s *stream) Destroy() error {
	const call = "cuStreamDestroy"
	if s == nil {
		return wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.isDestroyed() {
		return wrap(call, gpu.ErrDestroyed)
	}
	if err := s.dev.inject(OpStreamDestroy); err != nil {
		return err
	}
	// Before s.mu: the handle table's lock is never taken under it.
	s.dev.foreign.forgetStream(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	s.destroyed = true
	if s.doneSeq() >= s.seq && len(s.hist) > 1 {
		s.forgetLocked(len(s.hist) - 1) // drained: only its last clock is asked about
	}
	return nil
}

func (s *stream) String() string { return fmt.Sprintf("sim stream %d", s.id) }
