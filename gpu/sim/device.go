// The Device: one simulated GPU and its context.
//
// Host-side state of a device (address space, allocations, pools, the
// streams to synchronize) is guarded by Device.mu and touched only by host
// goroutines inside API calls; stream workers never take it. Lock order:
// Device.mu, then stream.mu, then Backend.hostMu.

package sim

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// Device is a simulated GPU; it implements gpu.Device and adds test
// hooks (Hold, FailNext, LastOp, HappensBefore). All methods are safe for
// concurrent use.
type Device struct {
	b        *Backend
	ordinal  int
	capacity uint64
	props    gpu.Properties

	segs *segIndex // updated under mu, read by workers without locks

	mu         sync.Mutex
	va         addrSpace
	committed  uint64                 // bytes of capacity in use
	allocs     map[uint64]*allocation // live allocations by address
	asyncFrees []*allocation          // cuMemAlloc memory freed by FreeAsync, not yet unmapped
	defPool    *memPool               // immutable
	pools      []*memPool             // the default pool first
	hostAllocs map[*byte]int          // MallocHost slices by first byte
	pinned     uint64

	// The streams a device-wide synchronization visits: those that
	// enqueued work since the last one (touched), and those with a sticky
	// error (failed), which every synchronization reports, as the card
	// reports a context's fault. So cuMemFree and cuCtxSynchronize cost
	// O(streams used since the last one), not O(streams). trackMu is a
	// leaf lock taken with race synchronization disabled; stream.listed
	// and stream.failed say whether a stream is in each list.
	trackMu sync.Mutex
	touched []*stream
	failed  []*stream
	// syncedSync is the race-detector address that carries what every
	// device-wide synchronization observed to the later ones, whichever
	// goroutine calls them: a stream one of them covered is not visited
	// again until it has new work.
	syncedSync byte
	gmem       graphMem     // graph memory (graph.go)
	captures   atomic.Int32 // captures not ended (capture.go)

	injMu    sync.Mutex
	inj      map[Op]*injection // FailNext's pending failures (faults.go)
	injector Injector
	injCalls [opCount]int // calls of each Op since the injector was set
	injSeq   int          // calls of any Op since then

	foreign   handleTable     // raw handles and adopted wrappers (foreign.go)
	vm        vmState         // reservations and physical allocations (vmm.go), under mu
	managed   managedCounters // page faults and prefetches (managed.go)
	hostPools []*hostMemPool  // host-located pools (hostmempool.go), under mu
}

func newDevice(b *Backend, ordinal int) *Device {
	d := &Device{
		b:          b,
		ordinal:    ordinal,
		capacity:   b.cfg.Capacity,
		allocs:     make(map[uint64]*allocation),
		hostAllocs: make(map[*byte]int),
		inj:        make(map[Op]*injection),
	}
	d.props = gpu.Properties{
		Name:                 b.cfg.Name,
		Ordinal:              ordinal,
		TotalMemory:          b.cfg.Capacity,
		ComputeMajor:         9,
		ComputeMinor:         0,
		MemoryPoolsSupported: true,
		Simulated:            true,
	}
	stride := max(uint64(vaStride), roundUp(4*b.cfg.Capacity, vaStride))
	d.va = newAddrSpace(vaBase+uint64(ordinal)*stride, stride)
	d.segs = newSegIndex(vaBase+uint64(ordinal)*stride, stride)
	d.defPool = newMemPool(d, true)
	d.pools = []*memPool{d.defPool}
	d.foreign.init(d)
	return d
}

var _ gpu.Device = (*Device)(nil)

// Ordinal returns the device's ordinal.
func (d *Device) Ordinal() int { return d.ordinal }

// Properties describe the device; Simulated is true.
func (d *Device) Properties() gpu.Properties { return d.props }

// String names the device, for messages.
func (d *Device) String() string { return fmt.Sprintf("sim device %d", d.ordinal) }

// MemGetInfo returns the free and total device memory.
func (d *Device) MemGetInfo() (free, total uint64, err error) {
	if err := d.inject(OpMemGetInfo); err != nil {
		return 0, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	return d.capacity - d.committed, d.capacity, nil
}

// Synchronize waits for all work on the device and returns the first
// sticky error of its streams.
func (d *Device) Synchronize() error {
	if err := d.inject(OpCtxSynchronize); err != nil {
		return err
	}
	if err := d.deviceGate("cuCtxSynchronize"); err != nil {
		return err
	}
	err := d.syncAll("cuCtxSynchronize")
	d.afterSync()
	return err
}

// syncAll waits for every stream of the device, orders the host after
// them, and returns the first sticky error. Streams that enqueued nothing
// since the previous device-wide synchronization were covered by it: the
// host is ordered after all their work already. A destroyed stream that
// has drained forgets its history but for its last clock (retire).
func (d *Device) syncAll(call string) error {
	ss := d.takeTracked()
	raceAcquire(unsafe.Pointer(&d.syncedSync))
	var first error
	for _, s := range ss {
		if err := s.syncNow(call); err != nil && first == nil {
			first = err
		}
	}
	raceReleaseMerge(unsafe.Pointer(&d.syncedSync))
	for _, s := range ss {
		s.retireIfDrained()
	}
	return first
}

// The lists are the simulator's bookkeeping: they are touched with race
// synchronization disabled and in //go:norace functions, so that they add
// no happens-before edge between the goroutines that enqueue and
// synchronize.

// takeTracked empties the touched list and returns its streams, marked as
// no longer listed (before they are synchronized: work enqueued from now on
// lists its stream again or is covered by the synchronization), followed by
// the failed streams.
//
//go:norace
func (d *Device) takeTracked() []*stream {
	raceDisable()
	defer raceEnable()
	d.trackMu.Lock()
	ss := d.touched
	d.touched = nil
	n := len(ss)
	ss = append(ss, d.failed...)
	d.trackMu.Unlock()
	for _, s := range ss[:n] {
		s.listed.Store(false)
	}
	return ss
}

// track lists s for the next device-wide synchronization, once.
//
//go:norace
func (d *Device) track(s *stream) {
	raceDisable()
	defer raceEnable()
	if !s.listed.Load() && s.listed.CompareAndSwap(false, true) {
		d.trackMu.Lock()
		d.touched = append(d.touched, s)
		d.trackMu.Unlock()
	}
}

// trackFailed lists s, whose sticky error was just set, for every
// device-wide synchronization from now on.
//
//go:norace
func (d *Device) trackFailed(s *stream) {
	raceDisable()
	defer raceEnable()
	if s.failed.CompareAndSwap(false, true) {
		d.trackMu.Lock()
		d.failed = append(d.failed, s)
		d.trackMu.Unlock()
	}
}

// untrackFailed removes s from the failed streams.
//
//go:norace
func (d *Device) untrackFailed(s *stream) {
	raceDisable()
	defer raceEnable()
	if !s.failed.Load() {
		return
	}
	d.trackMu.Lock()
	if i := slices.Index(d.failed, s); i >= 0 {
		d.failed = slices.Delete(d.failed, i, i+1)
	}
	d.trackMu.Unlock()
}

// retireIfDrained forgets what a destroyed stream with no work left no
// longer needs: its history but for its last clock, and its place among the
// failed streams.
func (s *stream) retireIfDrained() {
	s.mu.Lock()
	gone := s.destroyed && s.doneSeq() >= s.seq
	if gone && len(s.hist) > 1 {
		s.forgetLocked(len(s.hist) - 1)
	}
	s.mu.Unlock()
	if gone {
		s.dev.untrackFailed(s)
	}
}

// NewStream creates a stream.
func (d *Device) NewStream() (gpu.Stream, error) {
	if err := d.inject(OpStreamCreate); err != nil {
		return nil, err
	}
	s := newStream(d)
	d.b.streams.Store(s.id, s)
	d.foreign.addStream(s)
	return s, nil
}

// NewEvent creates an event.
func (d *Device) NewEvent(timing bool) (gpu.Event, error) {
	if err := d.inject(OpEventCreate); err != nil {
		return nil, err
	}
	e := &event{dev: d, timing: timing, raw: newRaw()}
	d.foreign.addEvent(e)
	return e, nil
}

// stream resolves a gpu.Stream of this device for call name.
func (d *Device) stream(name string, gs gpu.Stream) (*stream, error) {
	if a, ok := gs.(*adoptedStream); ok && a != nil {
		return d.adoptedStream(name, a)
	}
	s, ok := gs.(*stream)
	if gs == nil || !ok || s == nil {
		if gs != nil && !ok {
			return nil, wrap(name, fmt.Errorf("stream of another backend (%T): %w", gs, gpu.ErrWrongDevice))
		}
		return nil, wrap(name, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if s.dev != d {
		return nil, wrap(name, fmt.Errorf("stream of %v used on %v: %w", s.dev, d, gpu.ErrWrongDevice))
	}
	if s.isDestroyed() {
		return nil, wrap(name, fmt.Errorf("stream %d: %w", s.id, gpu.ErrDestroyed))
	}
	return s, nil
}

// event resolves a gpu.Event of this device for call name.
func (d *Device) event(name string, ge gpu.Event) (*event, error) {
	if a, ok := ge.(*adoptedEvent); ok && a != nil {
		return d.adoptedEvent(name, a)
	}
	e, ok := ge.(*event)
	if ge == nil || !ok || e == nil {
		if ge != nil && !ok {
			return nil, wrap(name, fmt.Errorf("event of another backend (%T): %w", ge, gpu.ErrWrongDevice))
		}
		return nil, wrap(name, fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	if e.dev != d {
		return nil, wrap(name, fmt.Errorf("event of %v used on %v: %w", e.dev, d, gpu.ErrWrongDevice))
	}
	e.mu.Lock()
	gone := e.destroyed
	e.mu.Unlock()
	if gone {
		return nil, wrap(name, fmt.Errorf("event: %w", gpu.ErrDestroyed))
	}
	return e, nil
}
