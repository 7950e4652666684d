// Timed replay: the trace's time as GPU work, so that frees complete
// when they would have.
//
// An untimed replay makes every call as fast as the host can, with no
// work on any stream, so a free is complete the moment it is enqueued and
// the next allocation on another stream may reuse its memory at once. In
// the recorded program the freeing stream was still busy with the work
// enqueued before the free, and the other stream could not reuse that
// memory yet (a driver pool grows instead; a suballocator that orders
// reuse by events sees the event pending). Cross-stream reuse then looks
// easier in an untimed replay than it was.
//
// With Options.Timed the replay keeps the trace's time in two ways:
//
//   - The host paces itself: the event at trace time t is replayed no
//     earlier than (t - t0) * TimeScale after the first event (t0), as
//     the recording program made it. It never waits for less than
//     minSleep (sleeping that little costs more than it waits), so it may
//     run up to that much ahead.
//   - The gaps become work: before an event on stream S, the time since
//     S's previous event (scaled) is enqueued on S as a spin kernel of that
//     length (gpu/kernels' sa_spin: a loop on the card's global timer; on
//     the simulator a kernel that holds its stream as long). Each stream is
//     thus busy from its first event to its last, one gap behind the host,
//     as the streams of a program bound by its GPU are, and a free on S
//     completes about one gap after the host made it. Gaps shorter than
//     Options.TimedMinKernel are added to the next one, so that launches
//     (a few microseconds each on the card) do not become the work. On
//     the simulator the default is a millisecond, not 20 µs: its kernel
//     sleeps, and a sleep oversleeps by tens of microseconds, which over
//     thousands of short kernels would leave the streams seconds behind.
//
// The result depends on real time: the same trace gives the same figures
// only as far as the host keeps to the schedule. Result.TimedBehind says
// how far it fell behind at worst (a slow resource, a loaded machine);
// where it is large against the gaps, the timed figures are not the
// recording's. On the simulator the kernel is a sleep of its stream's
// goroutine, so the simulator's driver-pool model sees frees pending for
// as long as the card would.

package replay

import (
	"fmt"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

const (
	// DefaultTimedMinKernel is the shortest gap enqueued as a kernel on
	// a card (Options.TimedMinKernel); shorter ones carry over to the
	// stream's next gap. DefaultSimTimedMinKernel is the same on the
	// simulator.
	DefaultTimedMinKernel    = 20 * time.Microsecond
	DefaultSimTimedMinKernel = time.Millisecond
	// minSleep is the least the host sleeps to keep to the schedule.
	minSleep = 200 * time.Microsecond
)

// clock holds a timed replay's schedule and each stream's gap.
type clock struct {
	k       *kernels.Kernels
	scale   float64
	minSpin time.Duration
	start   time.Time     // wall time of the first event
	t0      time.Duration // trace time of the first event
	started bool
	last    map[gpu.Stream]time.Duration // trace time of the stream's last event
	owed    map[gpu.Stream]time.Duration // gap not yet enqueued (below minSpin), scaled
	behind  time.Duration                // the most the host fell behind the schedule
	spins   int64
	spun    time.Duration
}

func newClock(dev gpu.Device, scale float64, minSpin time.Duration) (*clock, error) {
	if scale <= 0 || scale != scale {
		return nil, fmt.Errorf("time scale %v: %w", scale, ErrTimeScale)
	}
	if minSpin < 0 {
		return nil, fmt.Errorf("shortest kernel %v: %w", minSpin, ErrTimeScale)
	}
	if minSpin == 0 {
		minSpin = DefaultTimedMinKernel
		if dev.Properties().Simulated {
			minSpin = DefaultSimTimedMinKernel
		}
	}
	k, err := kernels.Load(dev)
	if err != nil {
		return nil, fmt.Errorf("timed replay: %w", err)
	}
	return &clock{k: k, scale: scale, minSpin: minSpin, last: map[gpu.Stream]time.Duration{}, owed: map[gpu.Stream]time.Duration{}}, nil
}

// before is called before the event at trace time t on s: it waits for
// the event's time and enqueues s's gap on s.
func (c *clock) before(r *runner, t time.Duration, s gpu.Stream) error {
	if !c.started {
		c.started, c.start, c.t0 = true, time.Now(), t
	}
	due := c.start.Add(time.Duration(float64(t-c.t0) * c.scale))
	switch wait := time.Until(due); {
	case wait >= minSleep:
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-r.ctx.Done():
			tm.Stop()
			return r.ctx.Err()
		}
	case wait < 0:
		c.behind = max(c.behind, -wait)
	}
	last, seen := c.last[s]
	c.last[s] = t
	if !seen || t <= last {
		return nil
	}
	gap := c.owed[s] + time.Duration(float64(t-last)*c.scale)
	if gap < c.minSpin {
		c.owed[s] = gap
		return nil
	}
	delete(c.owed, s)
	if err := c.k.Spin(s, gap); err != nil {
		return fmt.Errorf("enqueue a gap of %v: %w", gap, err)
	}
	c.spins++
	c.spun += gap
	return nil
}
