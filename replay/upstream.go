// The upstream timer: how much of a suballocator's time is its upstream's.
//
// A replay times each Allocate and Deallocate of the resource it replays.
// For a suballocator that figure includes the calls it makes to its
// upstream (a growth's cuMemAllocAsync or cuMemAlloc), which can be a
// thousand times the cost of serving a block from its lists and so hide
// what the suballocator itself costs. An UpstreamTimer sits between the
// suballocator and its upstream (mr/registry's Options.WrapUpstream puts
// it there) and adds up the time spent in the upstream's Allocate and
// Deallocate; Run, given it in Options.Upstream, reports that time apart
// and subtracts it from the resource's own. The timer's own cost (two
// clock reads per upstream call) is counted as the upstream's.
//
// It also records the upstream's peak reserved bytes, read after each of
// its calls when the upstream reports usage: what the device holds behind
// the suballocator (a driver pool reserves whole granules).
//
// Invariant: the counters only grow, and are atomics, so a suballocator
// that calls its upstream from another goroutine is counted correctly.

package replay

import (
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// An UpstreamTimer is an mr.Resource that forwards to another and counts
// the calls and the time spent in them. It forwards Release and Reap, and
// is an mr.Wrapper, so a chain walk sees through it.
type UpstreamTimer struct {
	name    string
	up      mr.Resource
	rep     mr.UsageReporter // nil if up reports no usage
	ns      atomic.Int64
	calls   atomic.Int64
	peakRes atomic.Uint64
}

// NewUpstreamTimer wraps up; name is what Result.Upstream will say.
func NewUpstreamTimer(name string, up mr.Resource) *UpstreamTimer {
	t := &UpstreamTimer{name: name, up: up}
	t.rep, _ = up.(mr.UsageReporter)
	return t
}

// Allocate forwards to the upstream and counts the time it took.
func (t *UpstreamTimer) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	t0 := time.Now()
	p, err := t.up.Allocate(size, s)
	t.done(t0)
	return p, err
}

// Deallocate forwards to the upstream and counts the time it took.
func (t *UpstreamTimer) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	t0 := time.Now()
	err := t.up.Deallocate(p, size, s)
	t.done(t0)
	return err
}

func (t *UpstreamTimer) done(t0 time.Time) {
	t.ns.Add(int64(time.Since(t0)))
	t.calls.Add(1)
	if t.rep != nil {
		r := t.rep.Usage().Reserved
		for old := t.peakRes.Load(); r > old && !t.peakRes.CompareAndSwap(old, r); old = t.peakRes.Load() {
		}
	}
}

// Device is the upstream's device.
func (t *UpstreamTimer) Device() gpu.Device { return t.up.Device() }

// Upstream is the wrapped resource.
func (t *UpstreamTimer) Upstream() mr.Resource { return t.up }

// Release releases what the upstream caches, if it is an mr.Releaser.
func (t *UpstreamTimer) Release() error {
	if r, ok := t.up.(mr.Releaser); ok {
		return r.Release()
	}
	return nil
}

// Reap reaps the upstream's pending frees, if it is an mr.Reaper.
func (t *UpstreamTimer) Reap(wait bool) (uint64, error) {
	if r, ok := t.up.(mr.Reaper); ok {
		return r.Reap(wait)
	}
	return 0, nil
}

// Name is the name given to NewUpstreamTimer.
func (t *UpstreamTimer) Name() string { return t.name }

// Elapsed returns the time spent in the upstream's Allocate and
// Deallocate so far and the number of those calls.
func (t *UpstreamTimer) Elapsed() (time.Duration, int64) {
	return time.Duration(t.ns.Load()), t.calls.Load()
}

// Calls is the number of the upstream's Allocate and Deallocate calls so
// far.
func (t *UpstreamTimer) Calls() int64 { return t.calls.Load() }

// PeakReserved is the largest Reserved the upstream reported after any
// of its calls (0 if it reports no usage).
func (t *UpstreamTimer) PeakReserved() uint64 { return t.peakRes.Load() }
