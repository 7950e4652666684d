// Foreign handles: CUstreams, CUevents, CUmemoryPools and CUcontexts made
// by other code (PyTorch, CuPy, a library's own cgo), wrapped so that every
// resource uses them like our own (package gpu's section on foreign
// handles states the contract).
//
// Each device keeps a handleTable: raw handle -> wrapper, for our own
// streams, events and pools (added when made) and for adopted ones (added
// on first adoption). A wrapper leaves the table when it is destroyed, and
// only then. Lookups are sync.Map loads, lock-free, because the C ABI
// adopts the caller's stream on every allocation; a new handle is checked
// (its context) and stored with LoadOrStore, so two goroutines adopting it
// at once get the same wrapper. The per-thread default stream is keyed by
// the handle and the OS thread, since the driver resolves it per thread.
//
// Adopted wrappers are flagged borrowed: Destroy marks them destroyed and
// drops them from the table, and makes no driver call.

package cudagpu

import (
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/osthread"
)

var (
	_ gpu.Adopter        = (*Device)(nil)
	_ gpu.ContextAdopter = (*Backend)(nil)
	_ gpu.RawHandle      = (*Stream)(nil)
	_ gpu.RawHandle      = (*Event)(nil)
	_ gpu.RawHandle      = (*MemPool)(nil)
)

// streamKey names a stream in the table: the handle, and for the
// per-thread default stream the OS thread it resolves to.
type streamKey struct {
	h   cuda.Stream
	tid int
}

// handleTable maps raw handles to the wrappers of one device.
type handleTable struct {
	streams sync.Map // streamKey -> *Stream
	events  sync.Map // cuda.Event -> *Event
	pools   sync.Map // cuda.MemPool -> *MemPool
}

func (t *handleTable) addStream(s *Stream) { t.streams.Store(streamKey{s.h, s.tid}, s) }
func (t *handleTable) addEvent(e *Event)   { t.events.Store(e.h, e) }
func (t *handleTable) addPool(p *MemPool)  { t.pools.Store(p.h, p) }

// The drops remove the entry only if it is still w: a destroyed handle's
// value may already name a newer wrapper.
func (t *handleTable) dropStream(s *Stream) { t.streams.CompareAndDelete(streamKey{s.h, s.tid}, s) }
func (t *handleTable) dropEvent(e *Event)   { t.events.CompareAndDelete(e.h, e) }
func (t *handleTable) dropPool(p *MemPool)  { t.pools.CompareAndDelete(p.h, p) }

// onThread checks that an adopted per-thread default stream is used on the
// OS thread it was adopted on.
func (s *Stream) onThread(op string) error {
	if id, _ := osthread.ID(); id != s.tid {
		return fmt.Errorf("cudagpu: %s: per-thread default stream of thread %d used on thread %d: %w", op, s.tid, id, gpu.ErrWrongThread)
	}
	return nil
}

// Raw is the CUstream as an integer (0 for the legacy default stream, 2
// for a per-thread default stream).
func (s *Stream) Raw() uintptr { return uintptr(s.h) }

// Raw is the CUevent as an integer.
func (e *Event) Raw() uintptr { return uintptr(e.h) }

// Raw is the CUmemoryPool as an integer.
func (p *MemPool) Raw() uintptr { return uintptr(p.h) }

// Borrowed reports whether the stream was adopted rather than made by
// NewStream: its Destroy then leaves the CUstream to its owner.
func (s *Stream) Borrowed() bool { return s.borrowed }

// AdoptStream wraps raw, a CUstream (cudaStream_t) of the device's primary
// context, without owning it: the wrapper's Destroy forgets the wrapper and
// never destroys the stream. 0 is the legacy default stream; 2
// (CU_STREAM_PER_THREAD) the calling OS thread's per-thread default stream,
// whose wrapper works on that thread only (ErrWrongThread elsewhere). A
// stream of another context (of this device or another) returns an error
// matching gpu.ErrForeignContext. The same raw handle returns the same
// wrapper until it is destroyed; the raw handle of a stream made by
// NewStream returns that stream. raw must be a live stream: the driver
// cannot tell a destroyed handle from a live one.
func (d *Device) AdoptStream(raw uintptr) (gpu.Stream, error) {
	key := streamKey{h: cuda.Stream(raw)}
	if key.h == cuda.StreamPerThread {
		id, ok := osthread.ID()
		if !ok {
			return nil, fmt.Errorf("cudagpu: AdoptStream: per-thread default stream: no thread IDs on this system: %w", gpu.ErrNotSupported)
		}
		key.tid = id
	}
	if v, ok := d.foreign.streams.Load(key); ok {
		return v.(*Stream), nil
	}
	ctx, err := d.ctx.StreamContext(key.h)
	if err != nil {
		return nil, fmt.Errorf("cudagpu: AdoptStream %#x: %w", raw, err)
	}
	if ctx != d.ctx {
		return nil, fmt.Errorf("cudagpu: AdoptStream %#x: stream of context %#x, not device %d's primary context %#x: %w",
			raw, uintptr(ctx), d.ordinal, uintptr(d.ctx), gpu.ErrForeignContext)
	}
	s := &Stream{dev: d, h: key.h, id: gpu.NewStreamID(), borrowed: true, tid: key.tid}
	v, _ := d.foreign.streams.LoadOrStore(key, s)
	return v.(*Stream), nil
}

// AdoptEvent wraps raw, a CUevent, without owning it. Zero returns an error
// matching gpu.ErrInvalidHandle. The same raw handle returns the same
// wrapper until it is destroyed; the raw handle of an event made by
// NewEvent returns that event.
func (d *Device) AdoptEvent(raw uintptr) (gpu.Event, error) {
	if raw == 0 {
		return nil, fmt.Errorf("cudagpu: AdoptEvent: null event: %w", gpu.ErrInvalidHandle)
	}
	h := cuda.Event(raw)
	if v, ok := d.foreign.events.Load(h); ok {
		return v.(*Event), nil
	}
	v, _ := d.foreign.events.LoadOrStore(h, &Event{dev: d, h: h, timing: true, borrowed: true})
	return v.(*Event), nil
}

// AdoptMemPool wraps raw, a CUmemoryPool of this device, without owning it:
// the wrapper's Destroy never destroys the pool. Zero returns an error
// matching gpu.ErrInvalidHandle; the default pool's handle returns the
// default pool, and a pool made by NewMemPool returns that pool.
func (d *Device) AdoptMemPool(raw uintptr) (gpu.MemPool, error) {
	if raw == 0 {
		return nil, fmt.Errorf("cudagpu: AdoptMemPool: null pool: %w", gpu.ErrInvalidHandle)
	}
	h := cuda.MemPool(raw)
	if d.defPool != nil && h == d.defPool.h {
		return d.defPool, nil
	}
	if v, ok := d.foreign.pools.Load(h); ok {
		return v.(*MemPool), nil
	}
	v, _ := d.foreign.pools.LoadOrStore(h, &MemPool{dev: d, h: h, borrowed: true})
	return v.(*MemPool), nil
}

// CurrentMemPool is the device's current pool (cuDeviceGetMemPool), the one
// MallocAsync draws from: the default pool, one of ours, or a foreign pool
// adopted on the way. Devices without memory pools return ErrNotSupported.
func (d *Device) CurrentMemPool() (gpu.MemPool, error) {
	if d.defPool == nil {
		return nil, fmt.Errorf("cudagpu: device %d has no memory pools: %w", d.ordinal, gpu.ErrNotSupported)
	}
	h, err := d.dev.MemPool()
	if err != nil {
		return nil, fmt.Errorf("cudagpu: CurrentMemPool: %w", err)
	}
	return d.AdoptMemPool(uintptr(h))
}

// SetCurrentMemPool is cuDeviceSetMemPool: p becomes the pool MallocAsync
// draws from, for every user of the device in the process.
func (d *Device) SetCurrentMemPool(p gpu.MemPool) error {
	cp, err := d.pool("SetCurrentMemPool", p)
	if err != nil {
		return err
	}
	return d.dev.SetMemPool(cp.h)
}

// AdoptContext returns the device whose primary context raw (a CUcontext)
// is, opening it if needed. Any other context returns an error matching
// gpu.ErrForeignContext: streamalloc works in primary contexts only (those
// of the runtime API, PyTorch and CuPy). Zero returns an error matching
// gpu.ErrInvalidHandle.
func (b *Backend) AdoptContext(raw uintptr) (gpu.Device, error) {
	if raw == 0 {
		return nil, fmt.Errorf("cudagpu: AdoptContext: null context: %w", gpu.ErrInvalidHandle)
	}
	c := cuda.Context(raw)
	cd, err := c.Device()
	if err != nil {
		return nil, fmt.Errorf("cudagpu: AdoptContext %#x: %w", raw, err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cudagpu: AdoptContext %#x: %w", raw, err)
	}
	for i := range n {
		if h, err := cuda.GetDevice(i); err != nil || h != cd {
			continue
		}
		d, err := b.device(i)
		if err != nil {
			return nil, fmt.Errorf("cudagpu: AdoptContext %#x: %w", raw, err)
		}
		if d.ctx != c {
			return nil, fmt.Errorf("cudagpu: AdoptContext %#x: not device %d's primary context %#x: %w",
				raw, i, uintptr(d.ctx), gpu.ErrForeignContext)
		}
		return d, nil
	}
	return nil, fmt.Errorf("cudagpu: AdoptContext %#x: device %v not found: %w", raw, cd, gpu.ErrInvalidDevice)
}
