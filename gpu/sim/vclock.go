// Vector clocks: the happens-before relation between stream operations.
//
// Every operation enqueued on a stream gets an OpID (stream ID, sequence
// number). What happens before an operation, other than its stream's
// earlier operations, is its clock, held in two parts:
//
//   - the explicit part, deps: a vector clock (the last sequence number of
//     each other stream ordered before it) that grows by joins: an event
//     wait joins the recorded operation, an inserted or acquired pool
//     dependency joins the free;
//   - the host part, gen: the host clock's generation when the operation
//     was enqueued. Every enqueue is ordered after what the host has
//     observed complete (a successful Synchronize or Query), and the host
//     clock only grows, so one number names it.
//
// The host clock is not a vector copied into every stream: each stream
// keeps the log of what the host learned of it, (generation, seq) pairs
// in increasing order (hostJoin appends them), and "the host knew (s, n)
// at generation g" is a search of s's log. A join leaves out the ticks
// the host already knows at the joining stream's generation: the next
// operation's generation covers them. So a stream's explicit clock holds
// only the streams it waited on since the host last observed them, and
// a join, an enqueue and a host observation cost O(that), not O(every
// stream seen): a thousand streams each synchronized by the host and
// waited on by one stream leave that stream's clock with one entry, where
// a clock with a component per stream made the run quadratic.
//
// Clocks are immutable once shared, so an operation keeps a reference to
// the deps it was enqueued with, and a stream keeps the history of its
// clocks (one entry per change of deps or generation) to answer
// HappensBefore for any OpID: a before b when b's deps hold a, or when
// a's stream's host log says the host knew a at b's generation. Both
// histories are bounded by Config.History (between History and twice that
// entries); what they have dropped is answered false.
//
// Clocks are computed on the host at enqueue time, which is where CUDA
// fixes ordering too (a wait captures the event's state at call time).

package sim

import (
	"cmp"
	"fmt"
	"slices"
)

// OpID identifies one operation enqueued on a stream. The zero OpID means
// "no operation".
type OpID struct {
	stream, seq uint64
}

// Stream is the ID (gpu.Stream.ID) of the operation's stream.
func (o OpID) Stream() uint64 { return o.stream }

// Seq is the operation's position in its stream, from 1.
func (o OpID) Seq() uint64 { return o.seq }

// IsZero reports whether o is the zero OpID.
func (o OpID) IsZero() bool { return o.seq == 0 }

// String formats o as "stream<ID>#<seq>".
func (o OpID) String() string { return fmt.Sprintf("stream%d#%d", o.stream, o.seq) }

// tick is one component of a clock.
type tick struct{ id, seq uint64 }

// vclock is a run of ticks sorted by stream ID, absent meaning 0; a clock
// is made of a few. A vclock value is never modified once stored.
type vclock []tick

func (v vclock) get(id uint64) uint64 {
	i, ok := slices.BinarySearchFunc(v, id, func(t tick, id uint64) int {
		switch {
		case t.id < id:
			return -1
		case t.id > id:
			return 1
		}
		return 0
	})
	if ok {
		return v[i].seq
	}
	return 0
}

// clock is a vector clock held as a few runs, each a vclock sorted by
// stream ID, the largest first; a stream may appear in several, and its
// component is the largest. A clock value is never modified once stored:
// adding to it makes a new slice of runs that shares the old runs. A new
// run is merged into the one before it while that one is not more than
// twice as long (a binary counter), so a clock of n components has
// O(log n) runs, adding k ticks costs O(k log n) amortized and a copy of
// the clock O(log n): a stream that waits on n streams one after another
// costs O(n log n), not the O(n^2) of copying a flat clock at each wait.
type clock []vclock

// get returns c's component for stream id (0: absent).
func (c clock) get(id uint64) uint64 {
	var m uint64
	for _, r := range c {
		m = max(m, r.get(id))
	}
	return m
}

// each calls f for every tick of every run (a stream may come more than
// once, with smaller seqs in older runs).
func (c clock) each(f func(tick)) {
	for _, r := range c {
		for _, t := range r {
			f(t)
		}
	}
}

// joinPruned returns c joined with w and the tick x, less the component
// of stream self and every tick known reports (what the host knows), and
// whether that adds anything to c; when it adds nothing, c itself is
// returned. The ticks c already holds are pruned as runs merge.
func (c clock) joinPruned(w clock, x tick, self uint64, known func(id, seq uint64) bool) (clock, bool) {
	var delta vclock
	consider := func(t tick) {
		if t.id != self && c.get(t.id) < t.seq && !known(t.id, t.seq) {
			delta = append(delta, t)
		}
	}
	w.each(consider)
	if x.seq != 0 {
		consider(x)
	}
	if len(delta) == 0 {
		return c, false
	}
	slices.SortFunc(delta, func(a, b tick) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(b.seq, a.seq)) })
	delta = slices.CompactFunc(delta, func(a, b tick) bool { return a.id == b.id }) // keeps each stream's largest
	keep := func(t tick) bool { return t.id != self && !known(t.id, t.seq) }
	out := append(make(clock, 0, len(c)+1), c...)
	out = append(out, delta)
	for n := len(out); n >= 2 && len(out[n-2]) <= 2*len(out[n-1]); n = len(out) {
		m := mergeRuns(out[n-2], out[n-1], keep)
		out = out[:n-2]
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out, true
}

// mergeRuns merges runs a and b into a new run, each stream's largest
// seq, keeping the ticks keep accepts.
func mergeRuns(a, b vclock, keep func(tick) bool) vclock {
	out := make(vclock, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var t tick
		switch {
		case j == len(b) || (i < len(a) && a[i].id < b[j].id):
			t = a[i]
			i++
		case i == len(a) || b[j].id < a[i].id:
			t = b[j]
			j++
		default:
			t = tick{a[i].id, max(a[i].seq, b[j].seq)}
			i++
			j++
		}
		if keep(t) {
			out = append(out, t)
		}
	}
	return out
}

// histEntry: from sequence number from on, a stream's clock is deps and
// host generation gen.
type histEntry struct {
	from uint64
	deps clock
	gen  uint64
}

// hostTick: from host generation gen on, the host knows a stream's
// operations up to seq complete.
type hostTick struct{ gen, seq uint64 }
