package cpuclock

import (
	"sync"
	"testing"
	"time"
)

// readFor reads c for d of the monotonic clock and fails t if a reading is
// below the one before it, or if a reading and the monotonic clock around
// it disagree by more than tol. It returns the number of readings.
func readFor(t *testing.T, c *clock, d, tol time.Duration) int {
	t.Helper()
	var last time.Duration
	n := 0
	for end := monotonic() + int64(d); ; n++ {
		before := time.Duration(monotonic())
		v := c.now()
		after := time.Duration(monotonic())
		if v < last {
			t.Fatalf("reading %d: %v after %v: the clock went back", n, v, last)
		}
		if v < before-tol || v > after+tol {
			t.Fatalf("reading %d: %v, the monotonic clock %v to %v: off by more than %v", n, v, before, after, tol)
		}
		last = v
		if int64(after) > end {
			return n
		}
	}
}

// TestCounterClock reads a clock that trusts the counter where this
// machine has one: for 30 ms it never goes back and agrees with the
// monotonic clock within 20 us (the package promises under 1 us; the rest
// is room for a descheduled reading on a shared machine), and after the
// first millisecond it reads the counter.
func TestCounterClock(t *testing.T) {
	c := &clock{trusted: std.trusted}
	readFor(t, c, 30*time.Millisecond, 20*time.Microsecond)
	want := uint32(stateMonotonic)
	if std.trusted() {
		want = stateCounter
	}
	if got := c.state.Load(); got != want {
		t.Fatalf("state %d after 30 ms, want %d (counter trusted: %v)", got, want, std.trusted())
	}
	if want == stateCounter && c.seq.Load() < 2*5 {
		t.Fatalf("anchor count %d after 30 ms: not anchored every millisecond", c.seq.Load()/2)
	}
}

// TestFallback reads a clock that does not trust the counter: it is the
// monotonic clock, and never starts measuring the counter's rate.
func TestFallback(t *testing.T) {
	c := &clock{trusted: func() bool { return false }}
	readFor(t, c, 5*time.Millisecond, 20*time.Microsecond)
	if got := c.state.Load(); got != stateMonotonic {
		t.Fatalf("state %d, want %d (monotonic)", got, stateMonotonic)
	}
	if c.a[0].mult.Load() != 0 || c.seq.Load() != 0 {
		t.Fatalf("rate %d, anchor count %d: an untrusted counter was measured", c.a[0].mult.Load(), c.seq.Load())
	}
}

// TestConcurrent reads one clock from four goroutines, through its
// measurement and several anchors: each goroutine's readings never go
// back, and all agree with the monotonic clock (run under -race, it also
// checks that the anchor is published without a data race).
func TestConcurrent(t *testing.T) {
	c := &clock{trusted: std.trusted}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { readFor(t, c, 10*time.Millisecond, 50*time.Microsecond) })
	}
	wg.Wait()
}

// TestSlew sets a clock's rate 1% fast and checks that anchoring brings
// it back within a microsecond of the monotonic clock without going back.
func TestSlew(t *testing.T) {
	if !std.trusted() {
		t.Skip("the counter is not trusted here")
	}
	c := &clock{trusted: std.trusted}
	readFor(t, c, 3*time.Millisecond, 20*time.Microsecond)
	// Publish the anchor again with its rate 1% fast.
	a := &c.a[c.seq.Load()&1]
	c.publish(a.ticks.Load(), a.ns.Load(), a.mult.Load()/100*101)
	readFor(t, c, 5*time.Millisecond, 20*time.Microsecond)
	var worst time.Duration
	for range 1000 {
		before := time.Duration(monotonic())
		v := c.now()
		after := time.Duration(monotonic())
		worst = max(worst, v-after, before-v)
	}
	if worst > time.Microsecond {
		t.Fatalf("after 5 ms of anchors a 1%% fast rate is still %v off", worst)
	}
}

// TestRate checks the fixed-point rate: n nanoseconds over d ticks, and
// 0 for a rate that does not fit.
func TestRate(t *testing.T) {
	for _, c := range []struct {
		n    int64
		d    uint64
		want uint64
	}{
		{1000, 1000, 1 << 32},
		{1000, 2000, 1 << 31},
		{1000, 3000, (1 << 32) / 3},
		{3_000_000_000, 7_200_000_000, 1789569706}, // 2.4 GHz for 3 s
		{1 << 40, 1, 0},                            // overflows 32.32
	} {
		if got := rate(c.n, c.d); got != c.want {
			t.Errorf("rate(%d, %d) = %d, want %d", c.n, c.d, got, c.want)
		}
	}
	if got := scale(2000, 1<<31); got != 1000 {
		t.Errorf("scale(2000, 0.5) = %d, want 1000", got)
	}
}

// BenchmarkClock is one reading of Now against the runtime's monotonic
// clock (time.Since, what Now replaces) and time.Now.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	Now()
	time.Sleep(2 * time.Millisecond) // past the rate's measurement
	Now()
	b.Run("cpuclock", func(b *testing.B) {
		if !Counter() {
			b.Log("the counter is not used here: Now is the monotonic clock")
		}
		var s time.Duration
		for b.Loop() {
			s += Now()
		}
		sink = s
	})
	b.Run("since", func(b *testing.B) {
		var s time.Duration
		for b.Loop() {
			s += time.Since(start)
		}
		sink = s
	})
	b.Run("now", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += time.Now().UnixNano()
		}
		sink = time.Duration(s)
	})
}

var sink time.Duration
