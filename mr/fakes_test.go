package mr_test

// Test doubles for the adaptor and accounting tests that must not depend
// on a simulator: a stream whose Query and Synchronize answer what the test
// scripts, and a recording upstream resource whose every call is logged so
// tests can check that bad input never reaches it.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

var fakeStreamIDs atomic.Uint64

// fakeDevice is a gpu.Device whose Synchronize can be scripted; every other
// method belongs to the nil embedded interface and must not be called.
type fakeDevice struct {
	gpu.Device
	mu      sync.Mutex
	syncErr error
	syncs   int
}

func (d *fakeDevice) Synchronize() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	return d.syncErr
}

func (d *fakeDevice) Ordinal() int { return 0 }

// fakeStream is a gpu.Stream whose completion the test controls.
type fakeStream struct {
	id  uint64
	dev *fakeDevice

	mu        sync.Mutex
	ready     bool    // Query answers nil when true, ErrNotReady when false
	failNext  []error // errors for the next Query/Synchronize calls, in order
	destroyed bool
	calls     int
}

func newFakeStream(d *fakeDevice) *fakeStream {
	return &fakeStream{id: fakeStreamIDs.Add(1), dev: d, ready: true}
}

func (s *fakeStream) ID() uint64         { return s.id }
func (s *fakeStream) Device() gpu.Device { return s.dev }

func (s *fakeStream) next() error {
	s.calls++
	if s.destroyed {
		return gpu.ErrDestroyed
	}
	if len(s.failNext) > 0 {
		err := s.failNext[0]
		s.failNext = s.failNext[1:]
		return err
	}
	return nil
}

func (s *fakeStream) Synchronize() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next()
}

func (s *fakeStream) Query() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.next(); err != nil {
		return err
	}
	if !s.ready {
		return fmt.Errorf("fake query: %w", gpu.ErrNotReady)
	}
	return nil
}

func (s *fakeStream) fail(errs ...error) {
	s.mu.Lock()
	s.failNext = append(s.failNext, errs...)
	s.mu.Unlock()
}

func (s *fakeStream) setReady(r bool) {
	s.mu.Lock()
	s.ready = r
	s.mu.Unlock()
}

func (s *fakeStream) WaitEvent(gpu.Event) error { return nil }
func (s *fakeStream) Destroy() error {
	s.mu.Lock()
	s.destroyed = true
	s.mu.Unlock()
	return nil
}

// call is one call a recordingResource saw.
type call struct {
	Op     string // "allocate" or "deallocate"
	Ptr    gpu.DevicePtr
	Size   int
	Stream uint64
	Err    error
}

// recordingResource is a fake upstream: it hands out 256-aligned addresses
// from a counter, checks frees strictly, logs every call, and can be told to
// fail the next allocations or deallocations.
type recordingResource struct {
	dev gpu.Device

	mu        sync.Mutex
	next      gpu.DevicePtr
	live      map[gpu.DevicePtr]int
	calls     []call
	failAlloc []error
	failFree  []error
	capacity  int // 0: unlimited; used+cached+pending must stay within it
	used      int
	cached    int // held until Release
	pending   int // held until Reap(true)
	released  int // Release calls
	reaps     []bool
}

var errFake = errors.New("fake upstream failure")

func newRecording() *recordingResource {
	return &recordingResource{dev: &fakeDevice{}, next: 1 << 20, live: map[gpu.DevicePtr]int{}}
}

// stream returns a new stream of the resource's device.
func (r *recordingResource) stream() *fakeStream { return newFakeStream(r.dev.(*fakeDevice)) }

// nullResource is the cheapest possible upstream, for measuring an
// adaptor's own cost: addresses from a counter, frees that do nothing.
type nullResource struct {
	dev  gpu.Device
	next atomic.Uint64
}

func newNull() *nullResource { return &nullResource{dev: &fakeDevice{}} }

func (r *nullResource) Device() gpu.Device { return r.dev }
func (r *nullResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	return gpu.DevicePtr(r.next.Add(1) << 8), nil
}
func (r *nullResource) Deallocate(gpu.DevicePtr, int, gpu.Stream) error { return nil }

func (r *recordingResource) Device() gpu.Device { return r.dev }

func streamID(s gpu.Stream) uint64 {
	if s == nil {
		return 0
	}
	return s.ID()
}

func (r *recordingResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := call{Op: "allocate", Size: size, Stream: streamID(s)}
	switch {
	case s == nil:
		c.Err = gpu.ErrInvalidHandle
	case size < 0:
		c.Err = mr.ErrInvalidSize
	case len(r.failAlloc) > 0:
		c.Err = r.failAlloc[0]
		r.failAlloc = r.failAlloc[1:]
	case r.capacity > 0 && r.used+r.cached+r.pending+size > r.capacity:
		c.Err = &mr.OutOfMemoryError{Resource: "recording", Requested: size, Stream: streamID(s),
			Used: uint64(r.used), Limit: uint64(r.capacity)}
	case size == 0:
	default:
		c.Ptr = r.next
		r.next += gpu.DevicePtr((size + 2*mr.Alignment - 1) / mr.Alignment * mr.Alignment)
		r.live[c.Ptr] = size
		r.used += size
	}
	r.calls = append(r.calls, c)
	return c.Ptr, c.Err
}

func (r *recordingResource) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := call{Op: "deallocate", Ptr: p, Size: size, Stream: streamID(s)}
	switch n, ok := r.live[p]; {
	case s == nil:
		c.Err = gpu.ErrInvalidHandle
	case p == 0 && size == 0:
	case !ok:
		c.Err = mr.ErrUnknownPointer
	case n != size:
		c.Err = mr.ErrSizeMismatch
	case len(r.failFree) > 0:
		c.Err = r.failFree[0]
		r.failFree = r.failFree[1:]
	default:
		delete(r.live, p)
		r.used -= size
	}
	r.calls = append(r.calls, c)
	return c.Err
}

// Release drops the cached bytes.
func (r *recordingResource) Release() error {
	r.mu.Lock()
	r.released++
	r.cached = 0
	r.mu.Unlock()
	return nil
}

// Reap releases the pending bytes, but only when waiting.
func (r *recordingResource) Reap(wait bool) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reaps = append(r.reaps, wait)
	if !wait {
		return 0, nil
	}
	n := r.pending
	r.pending = 0
	return uint64(n), nil
}

// Calls returns a copy of the call log.
func (r *recordingResource) Calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recordingResource) numCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recordingResource) liveBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

func (r *recordingResource) liveCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

func (r *recordingResource) failAllocs(errs ...error) {
	r.mu.Lock()
	r.failAlloc = append(r.failAlloc, errs...)
	r.mu.Unlock()
}

func (r *recordingResource) failFrees(errs ...error) {
	r.mu.Lock()
	r.failFree = append(r.failFree, errs...)
	r.mu.Unlock()
}
