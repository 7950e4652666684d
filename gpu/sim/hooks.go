// Test hooks: holding a stream, and the happens-before relation.
//
// The relation costs memory: each stream keeps one clock per change of
// what is ordered before it (tens of bytes each, vclock.go), up to the last
// Config.History changes (between History and twice that), and a stream
// destroyed and drained keeps only its last; and as many entries of what
// the host learned of it (16 bytes each). Streams stay registered after
// Destroy (a few hundred bytes each), so that HappensBefore and Completed
// can answer for their recent operations.

package sim

import (
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// Hold enqueues on s an operation that blocks the stream, like a long
// kernel, until release is called (release is idempotent and safe from any
// goroutine). Work enqueued after it waits; the host is not blocked.
// Holding creates no ordering between the releasing goroutine and the
// stream. A stream held and never released keeps its worker goroutine. If
// s is not a usable stream of d, nothing is enqueued and release does
// nothing.
func (d *Device) Hold(gs gpu.Stream) (release func()) {
	s, err := d.stream("sim.Hold", gs)
	if err != nil || s.cs.capt.Load() != nil {
		return func() {}
	}
	ch := make(chan struct{})
	s.mu.Lock()
	s.enqueueLocked(&op{kind: opHold, name: "sim.Hold", hold: ch})
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// LastOp returns the last operation enqueued on s (the zero OpID if none,
// or if s is not a stream of the simulator).
func (d *Device) LastOp(gs gpu.Stream) OpID {
	if a, ok := gs.(*adoptedStream); ok && a != nil {
		gs = a.s
	}
	s, ok := gs.(*stream)
	if !ok || s == nil {
		return OpID{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return OpID{stream: s.id, seq: s.seq}
}

// Completed reports whether operation op has run. Unlike Stream.Query and
// Event.Query it does not order the host after the operation, so a test
// can wait for work to finish and still exercise paths that depend on the
// host not knowing (opportunistic pool reuse, missing synchronization).
// Unknown or zero OpIDs are not completed.
func (d *Device) Completed(op OpID) bool {
	if op.IsZero() {
		return false
	}
	v, ok := d.b.streams.Load(op.stream)
	if !ok {
		return false
	}
	return v.(*stream).doneSeq() >= op.seq
}

// HappensBefore reports whether operation a is ordered before operation b:
// by stream order, event waits, pool dependencies, or the host having
// observed a's completion before enqueuing b. It is false if either is
// zero or unknown, for a == b, for a b older than its stream's remembered
// history (Config.History: b's stream changed its ordering that many times
// since b), and when only the host orders them and the host has since
// learned of a's stream's progress that many times, so a test asks about
// operations it has just enqueued.
func (d *Device) HappensBefore(a, b OpID) bool {
	if a.IsZero() || b.IsZero() || a == b {
		return false
	}
	sa, ok1 := d.b.streams.Load(a.stream)
	sb, ok2 := d.b.streams.Load(b.stream)
	if !ok1 || !ok2 {
		return false
	}
	as, bs := sa.(*stream), sb.(*stream)
	as.mu.Lock()
	aok := a.seq <= as.seq
	as.mu.Unlock()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if !aok || b.seq > bs.seq {
		return false
	}
	if a.stream == b.stream {
		return a.seq < b.seq
	}
	deps, gen, ok := bs.depsAtLocked(b.seq)
	return ok && (deps.get(a.stream) >= a.seq || d.b.hostKnewAt(as, a.seq, gen))
}

// depsAtLocked returns the clock operation seq was enqueued with (its
// explicit part and host generation), and false if the history no longer
// holds it.
func (s *stream) depsAtLocked(seq uint64) (clock, uint64, bool) {
	if seq < s.exactFrom {
		return nil, 0, false
	}
	lo, hi := 0, len(s.hist)
	for lo < hi {
		m := (lo + hi) / 2
		if s.hist[m].from <= seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return nil, 0, true
	}
	return s.hist[lo-1].deps, s.hist[lo-1].gen, true
}
