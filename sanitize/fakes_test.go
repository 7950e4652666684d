package sanitize_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// The sanitizer only observes calls, so its core is tested with handles
// that do nothing: fakeStream's Query says whether it is "idle".
var fakeIDs atomic.Uint64

type fakeStream struct {
	id   uint64
	busy bool
}

func newFakeStream() *fakeStream { return &fakeStream{id: fakeIDs.Add(1)} }

func (s *fakeStream) ID() uint64                  { return s.id }
func (s *fakeStream) Device() gpu.Device          { return nil }
func (s *fakeStream) Synchronize() error          { return nil }
func (s *fakeStream) WaitEvent(e gpu.Event) error { return nil }
func (s *fakeStream) Destroy() error              { return nil }
func (s *fakeStream) Query() error {
	if s.busy {
		return gpu.ErrNotReady
	}
	return nil
}

type fakeEvent struct{ _ byte }

func (e *fakeEvent) Device() gpu.Device                            { return nil }
func (e *fakeEvent) Record(s gpu.Stream) error                     { return nil }
func (e *fakeEvent) Query() error                                  { return nil }
func (e *fakeEvent) Synchronize() error                            { return nil }
func (e *fakeEvent) ElapsedSince(gpu.Event) (time.Duration, error) { return 0, nil }
func (e *fakeEvent) Destroy() error                                { return nil }

// fakeRes hands out addresses from a bump pointer, or the ones queued in
// reuse first (to make a resource that reuses memory as a test wants).
type fakeRes struct {
	mu    sync.Mutex
	next  gpu.DevicePtr
	reuse []gpu.DevicePtr
	live  map[gpu.DevicePtr]int
	frees int
}

func newFakeRes() *fakeRes { return &fakeRes{next: 1 << 20, live: map[gpu.DevicePtr]int{}} }

func (r *fakeRes) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if size < 0 {
		return 0, mr.ErrInvalidSize
	}
	if size == 0 {
		return 0, nil
	}
	var p gpu.DevicePtr
	if len(r.reuse) > 0 {
		p, r.reuse = r.reuse[0], r.reuse[1:]
	} else {
		p = r.next
		r.next += gpu.DevicePtr((size + 255) &^ 255)
	}
	r.live[p] = size
	return p, nil
}

func (r *fakeRes) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p == 0 && size == 0 {
		return nil
	}
	n, ok := r.live[p]
	if !ok {
		return fmt.Errorf("fake: %#x: %w", uint64(p), mr.ErrUnknownPointer)
	}
	if n != size {
		return mr.ErrSizeMismatch
	}
	delete(r.live, p)
	r.frees++
	return nil
}

func (r *fakeRes) Device() gpu.Device { return nil }
