// Vector clocks: the happens-before relation between stream operations.
//
// Every operation enqueued on a stream gets an OpID (stream ID, sequence
// number). A stream keeps the clock "deps" of what is known to happen
// before its next operation: the last sequence number of every other
// stream ordered before it. Deps grow by joins: an event wait joins the
// clock of the recorded operation, an inserted pool dependency joins the
// clock of the free, and every enqueue joins the host's clock, which grows
// when the host observes completion (a successful Synchronize or Query).
// Clocks are immutable once shared, so an operation keeps a reference to
// the deps it was enqueued with, and a stream keeps the history of its
// deps (one entry per change) to answer HappensBefore for any OpID.
//
// Clocks are computed on the host at enqueue time, which is where CUDA
// fixes ordering too (a wait captures the event's state at call time).

package sim

import (
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

// vclock is a vector clock: ticks sorted by stream ID, absent meaning 0.
// A vclock value is never modified once stored; joins make new ones.
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

// join returns the pointwise maximum of v and w, and whether it differs
// from v (when it does not, v itself is returned).
func (v vclock) join(w vclock) (vclock, bool) {
	grows := false
	for _, t := range w {
		if v.get(t.id) < t.seq {
			grows = true
			break
		}
	}
	if !grows {
		return v, false
	}
	out := make(vclock, 0, len(v)+len(w))
	i, j := 0, 0
	for i < len(v) || j < len(w) {
		switch {
		case j == len(w) || (i < len(v) && v[i].id < w[j].id):
			out = append(out, v[i])
			i++
		case i == len(v) || w[j].id < v[i].id:
			out = append(out, w[j])
			j++
		default:
			out = append(out, tick{v[i].id, max(v[i].seq, w[j].seq)})
			i++
			j++
		}
	}
	return out, true
}

// with returns v joined with the single tick (id, seq).
func (v vclock) with(id, seq uint64) vclock {
	if seq == 0 {
		return v
	}
	out, _ := v.join(vclock{{id, seq}})
	return out
}

// without returns v less the component of stream id.
func (v vclock) without(id uint64) vclock {
	out := make(vclock, 0, len(v))
	for _, t := range v {
		if t.id != id {
			out = append(out, t)
		}
	}
	return out
}

// histEntry: from sequence number from on, a stream's deps are deps.
type histEntry struct {
	from uint64
	deps vclock
}
