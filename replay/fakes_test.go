package replay

// Test doubles: a device that only makes streams, and a resource that
// checks how it is called. They let the replay's bookkeeping be tested
// exactly, independent of the simulator and of any real resource.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

type fakeDevice struct {
	gpu.Device // unimplemented methods panic: the replay must not call them

	mu         sync.Mutex
	next       uint64
	streams    []*fakeStream
	failStream int // NewStream fails when this many streams exist (0: never)
}

func (d *fakeDevice) Properties() gpu.Properties {
	return gpu.Properties{Name: "fake", Simulated: true}
}

func (d *fakeDevice) NewStream() (gpu.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failStream > 0 && len(d.streams) == d.failStream {
		return nil, fmt.Errorf("fake: %w", gpu.ErrOutOfMemory)
	}
	d.next++
	s := &fakeStream{id: d.next, dev: d}
	d.streams = append(d.streams, s)
	return s, nil
}

// allDown reports whether every stream was synchronized and destroyed.
func (d *fakeDevice) allDown() error {
	for _, s := range d.streams {
		if !s.destroyed || s.syncs == 0 {
			return fmt.Errorf("stream %d: destroyed %v, synchronized %d times", s.id, s.destroyed, s.syncs)
		}
	}
	return nil
}

type fakeStream struct {
	id        uint64
	dev       *fakeDevice
	syncs     int
	destroyed bool
}

func (s *fakeStream) ID() uint64                  { return s.id }
func (s *fakeStream) Device() gpu.Device          { return s.dev }
func (s *fakeStream) Synchronize() error          { s.syncs++; return nil }
func (s *fakeStream) Query() error                { return nil }
func (s *fakeStream) WaitEvent(e gpu.Event) error { return nil }
func (s *fakeStream) Destroy() error {
	if s.destroyed {
		return gpu.ErrDestroyed
	}
	s.destroyed = true
	return nil
}

type call struct {
	free   bool
	size   int
	stream uint64
	p      gpu.DevicePtr
}

// fakeResource hands out addresses from a bump pointer, up to capacity
// bytes in use. Reserved is the high-water mark of used bytes rounded to
// 256 (a cache that never gives back). It refuses wrong frees the way the
// mr contract says.
type fakeResource struct {
	dev      gpu.Device
	capacity uint64
	failOn   int   // the failOn-th Allocate (1-based) fails with failErr
	failErr  error // default: a non-OOM error
	freeErr  error // every Deallocate fails with it

	next   gpu.DevicePtr
	live   map[gpu.DevicePtr]int
	used   uint64
	usage  mr.Usage
	calls  []call
	allocs int
}

func newFakeResource(dev gpu.Device, capacity uint64) *fakeResource {
	return &fakeResource{dev: dev, capacity: capacity, next: 0x10000, live: map[gpu.DevicePtr]int{}}
}

func round(n int) uint64 { return uint64((n + 255) &^ 255) }

func (f *fakeResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	f.allocs++
	f.calls = append(f.calls, call{size: size, stream: s.ID()})
	if f.allocs == f.failOn {
		if f.failErr != nil {
			return 0, f.failErr
		}
		return 0, errors.New("fake: the device fell over")
	}
	if size == 0 {
		return 0, nil
	}
	if f.used+round(size) > f.capacity {
		return 0, &mr.OutOfMemoryError{Resource: "fake", Requested: size, Stream: s.ID(),
			Reserved: f.usage.Reserved, Used: f.used}
	}
	p := f.next
	f.next += gpu.DevicePtr(round(size))
	f.live[p] = size
	f.used += round(size)
	f.usage.Used = f.used
	f.usage.Reserved = max(f.usage.Reserved, f.used)
	f.usage.PeakUsed = max(f.usage.PeakUsed, f.used)
	f.usage.PeakReserved = max(f.usage.PeakReserved, f.usage.Reserved)
	f.calls[len(f.calls)-1].p = p
	return p, nil
}

func (f *fakeResource) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	f.calls = append(f.calls, call{free: true, size: size, stream: s.ID(), p: p})
	if f.freeErr != nil {
		return f.freeErr
	}
	if p == 0 && size == 0 {
		return nil
	}
	n, ok := f.live[p]
	if !ok {
		return mr.ErrUnknownPointer
	}
	if n != size {
		return mr.ErrSizeMismatch
	}
	delete(f.live, p)
	f.used -= round(size)
	f.usage.Used = f.used
	return nil
}

func (f *fakeResource) Device() gpu.Device { return f.dev }
func (f *fakeResource) Usage() mr.Usage    { return f.usage }

// plainResource hides Usage, to test the replay without a reporter.
type plainResource struct{ *fakeResource }

func (p plainResource) Usage() {}

// releasingResource is a fakeResource that caches: Release must come
// while the replay's streams still work.
type releasingResource struct {
	*fakeResource
	releases         int
	streamsAtRelease []bool // destroyed flags when Release ran
}

func (r *releasingResource) Release() error {
	r.releases++
	for _, s := range r.dev.(*fakeDevice).streams {
		r.streamsAtRelease = append(r.streamsAtRelease, s.destroyed)
	}
	return nil
}
