// Package cpuclock is a monotonic clock read from the CPU's time-stamp
// counter, for code that reads the time at every operation (the logging
// adaptor writes a time on every line).
//
// Why. Go reads its monotonic clock (time.Since, time.Now) through the
// kernel's vDSO, which on the H100 machine's host (a KVM guest of a 2.1
// GHz Xeon, clock source tsc) costs 39-53 ns a reading; the vDSO reads the
// same counter, with a call into the runtime's system stack around it.
// Reading the counter directly (RDTSC) and scaling it costs a fraction of
// that.
//
// How. Now scales a counter reading from an anchor: a counter value, the
// time then (on the runtime's monotonic clock, from the package's epoch)
// and a rate in nanoseconds per tick (32.32 fixed point). The rate is
// measured against the monotonic clock over the first millisecond after
// the first call (which reads the monotonic clock itself meanwhile), and
// then every millisecond the first reader past the anchor's millisecond
// anchors again: it reads the counter between two readings of the
// monotonic clock and pairs it with the second (pair: the narrowest of a
// few such brackets, so an anchor's time is never before its counter
// value's, and after it by at most the bracket, under 0.5 us unless every
// try was descheduled), takes the rate over the whole time since the
// first anchor (a baseline that grows, so the rate is known better with
// time), and, if the clock ran ahead of the monotonic clock, keeps it
// where it was and slows the rate so that the two meet at the next anchor
// (a clock behind steps forward). So the clock never steps back, and it
// stays within one period's error of the monotonic clock: the monotonic
// clock's rate change over a millisecond (the kernel's slew is at most
// 500 ppm: 0.5 us), the bracket's width, and the counter's rounding.
//
// The anchor is kept twice and published under a count (a latch): a
// writer, one at a time, makes the count odd (readers use the second
// copy), writes the first, makes the count even (readers use the first)
// and writes the second. A reader loads the count, the copy it names, the
// counter and the count again, and tries again if the count moved; it
// never waits for a writer within the anchor's period, and a reading takes
// no locked instruction. Anchoring takes two compare-and-swaps a
// millisecond. A reader that finds the period over while another reader
// anchors yields (runtime.Gosched) until the new anchor is published,
// rather than return a time the new anchor could contradict: the new
// anchor starts at or after the period's end and after every reading made
// from the old one, so no reading goes back, and none lags the monotonic
// clock while a writer is descheduled.
//
// Where the counter cannot be trusted, Now is the monotonic clock
// (time.Since of the epoch): on other architectures than amd64, on a CPU
// that does not report an invariant counter (one rate in every power
// state), and on Linux when the kernel's clock source is not the counter
// (the kernel checks that the CPUs' counters are in step before it uses
// them, and under a hypervisor that the hypervisor keeps them so).
//
// Invariants: a reader uses an anchor copy only if the count named it
// before and after the reading, and a writer writes only the copy the
// count does not name; mult is 0 until the rate is measured, and from then
// on is at least half the measured rate; a reading from an anchor (ticks,
// ns) is below ns+period, and the next anchor's ns is at least that. Now never decreases on
// one CPU, and across CPUs not by more than the counters' skew (none where
// the kernel trusts them).
package cpuclock

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// period is the time between anchors, and the time over which the rate
// is first measured.
const period = int64(time.Millisecond)

// epoch is the time Now counts from.
var epoch = time.Now()

// The states of a clock's measurement.
const (
	stateNew       = iota // nothing read
	stateStarting         // the first anchor is being taken
	stateMeasuring        // the first anchor is taken; the rate is not known
	stateCounter          // the rate is known: Now reads the counter
	stateMonotonic        // the counter is not trusted: Now reads the monotonic clock
)

// clock is the state of the clock; std is the one Now reads. trusted says
// whether the counter may be used.
type clock struct {
	trusted func() bool
	state   atomic.Uint32
	// The first anchor, the baseline of the rate: written once, before
	// state becomes stateMeasuring.
	t0 atomic.Uint64
	n0 atomic.Int64
	// The anchor: seq's low bit names the copy readers use; writing
	// elects the one writer.
	seq     atomic.Uint64
	writing atomic.Bool
	a       [2]anchor
}

// anchor is a counter value, the time then and the rate from there on.
type anchor struct {
	ticks atomic.Uint64
	ns    atomic.Int64
	mult  atomic.Uint64 // nanoseconds per tick, 32.32 fixed point; 0: not measured
}

var std = clock{trusted: func() bool { return invariantTSC() && kernelTrustsTSC() }}

// Now returns the time since the package's epoch (a moment before the
// first call), from the CPU's counter where it can be trusted and from the
// runtime's monotonic clock otherwise. It is safe for concurrent use and
// never decreases; it differs from the monotonic clock by less than a
// microsecond.
func Now() time.Duration { return std.now() }

// Counter reports whether Now reads the CPU's counter (after the first
// millisecond of readings: until then, and where the counter cannot be
// trusted, Now reads the monotonic clock).
func Counter() bool { return std.state.Load() == stateCounter }

func monotonic() int64 { return int64(time.Since(epoch)) }

// scale is d ticks at rate m in nanoseconds.
func scale(d, m uint64) int64 {
	hi, lo := bits.Mul64(d, m)
	return int64(hi<<32 | lo>>32)
}

func (c *clock) now() time.Duration {
	for {
		s := c.seq.Load()
		a := &c.a[s&1]
		ta, na, m := a.ticks.Load(), a.ns.Load(), a.mult.Load()
		if m == 0 {
			if v, ok := c.uncalibrated(); ok {
				return time.Duration(v)
			}
			runtime.Gosched()
			continue
		}
		t := rdtsc()
		if c.seq.Load() != s {
			continue // a writer took this copy
		}
		d := t - ta
		if int64(d) < 0 {
			// Read on a CPU whose counter is behind the anchor's.
			return time.Duration(na)
		}
		if off := scale(d, m); off < period {
			return time.Duration(na + off)
		}
		if v, ok := c.anchor(ta, na); ok {
			return time.Duration(v)
		}
		runtime.Gosched() // another reader anchors
	}
}

// anchor takes a new anchor after the period of the anchor (ta, na) and
// returns the time now, or reports false if another reader is taking one
// or took one since (ta, na) was read.
func (c *clock) anchor(ta uint64, na int64) (int64, bool) {
	if !c.writing.CompareAndSwap(false, true) {
		return 0, false
	}
	defer c.writing.Store(false)
	if s := c.seq.Load(); c.a[s&1].ticks.Load() != ta {
		return 0, false
	}
	t, n := pair()
	at := max(n, na+period)
	r := rate(n-c.n0.Load(), t-c.t0.Load())
	if ahead := at - n; ahead > 0 {
		// The counter ran ahead: meet the monotonic clock one period
		// from now, r*(period-ahead)/period, at least r/2.
		r -= r / uint64(period) * uint64(min(ahead, period/2))
	}
	c.publish(t, at, r)
	return at, true
}

// publish writes the anchor (t, n, m). Only the elected writer calls it.
func (c *clock) publish(t uint64, n int64, m uint64) {
	s := c.seq.Load()
	for range 2 {
		s++
		c.seq.Store(s) // readers use copy s&1 now
		a := &c.a[s&1^1]
		a.ticks.Store(t)
		a.ns.Store(n)
		a.mult.Store(m)
	}
}

// pairTries is how many times pair reads the two clocks at most, and
// pairWindow the width of a bracket it takes at once.
const (
	pairTries  = 8
	pairWindow = 500 // ns
)

// pair reads the counter and the monotonic clock at one moment: the
// counter between two readings of the monotonic clock, paired with the
// second, so the anchor is never behind the monotonic clock (a reader that
// read the monotonic clock before the anchor reads no less from it) and
// ahead by at most the bracket's width. A thread descheduled between the
// readings would otherwise pair a counter value with a time tens of
// microseconds later, and every reading until the next anchors would carry
// that error; pair takes the narrowest of up to pairTries brackets,
// stopping at one narrower than pairWindow.
func pair() (ticks uint64, ns int64) {
	best := int64(-1)
	for range pairTries {
		n1 := monotonic()
		t := rdtsc()
		n2 := monotonic()
		if w := n2 - n1; best < 0 || w < best {
			best, ticks, ns = w, t, n2
		}
		if best < pairWindow {
			break
		}
	}
	return ticks, ns
}

// rate is n nanoseconds over d ticks, 32.32 fixed point (d > 0, n >= 0).
func rate(n int64, d uint64) uint64 {
	hi, lo := uint64(n)>>32, uint64(n)<<32
	if hi >= d {
		return 0
	}
	q, _ := bits.Div64(hi, lo, d)
	return q
}

// uncalibrated is Now before the rate is known: the monotonic clock. The
// first call takes the first anchor (or finds the counter untrusted); the
// first call a period later measures the rate. It reports false, for the
// caller to yield and read again, while another reader measures the rate
// and once it has.
func (c *clock) uncalibrated() (int64, bool) {
	n := monotonic()
	switch c.state.Load() {
	case stateNew:
		if !c.state.CompareAndSwap(stateNew, stateStarting) {
			return n, true
		}
		if !c.trusted() {
			c.state.Store(stateMonotonic)
			return n, true
		}
		t, n := pair()
		c.t0.Store(t)
		c.n0.Store(n)
		c.state.Store(stateMeasuring)
	case stateMeasuring:
		n0 := c.n0.Load()
		if n-n0 < period {
			return n, true // before any anchor's time
		}
		if !c.writing.CompareAndSwap(false, true) {
			return 0, false
		}
		defer c.writing.Store(false)
		if c.state.Load() != stateMeasuring {
			return 0, false // measured since: read the anchor
		}
		t, n := pair()
		r := rate(n-n0, t-c.t0.Load())
		// A counter of 100 MHz to 20 GHz; anything else is not a clock.
		if r < 1<<32/20 || r > 10<<32 {
			c.state.Store(stateMonotonic)
			return n, true
		}
		c.publish(t, n, r)
		c.state.Store(stateCounter)
	case stateCounter:
		return 0, false // the anchor is published: read it
	}
	return n, true
}
