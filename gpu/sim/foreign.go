// Foreign handles on the simulator: raw handles, the raw calls that other
// code would make (the simulated driver API), and adoption.
//
// Every stream, event and pool has a raw handle, an integer from one
// process-wide counter (0x1000, 0x1010, ...: never 0 or 2, the handles of
// the default streams). Objects made through the gpu interface are ours;
// objects made by the raw calls (NewRawStream, NewRawEvent, NewRawMemPool)
// stand for handles that another library made with the driver, and the
// legacy and per-thread default streams are made by the simulated driver
// itself on first adoption. Adopting a raw handle of ours returns our
// object; adopting a foreign one returns a wrapper (adoptedStream,
// adoptedEvent, adoptedPool) with the contract of package gpu: the same
// wrapper for the same handle until its Destroy, which forgets it and
// leaves the object to its owner. A wrapper resolves to its object in
// Device.stream, .event and .pool, so every call accepts it; if the owner
// destroys the object under a live wrapper, calls through the wrapper
// return ErrDestroyed (on the card that is undefined behaviour).
//
// The per-thread default stream is one stream per OS thread, as in the
// driver; its wrapper answers ErrWrongThread on any other thread.
//
// Locks: handleTable.mu guards the stream and event maps and their
// wrappers, and is never held while taking a stream's or an event's
// mutex; it may be held while taking Device.mu (to register a default
// stream), so Device.mu is never held while taking it. The pool maps, their
// wrappers and the current pool are pool state, guarded by Device.mu.

package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/osthread"
)

// rawHandles numbers the raw handles of every simulator in the process.
var rawHandles atomic.Uintptr

func newRaw() uintptr { return 0x1000 + 0x10*(rawHandles.Add(1)-1) }

// contextBase is where the raw handles of simulated contexts start.
const contextBase = 0xc0_0000_0000

// handleTable holds a device's raw handles and adopted wrappers.
type handleTable struct {
	mu        sync.Mutex
	streams   map[uintptr]*stream // live streams by raw handle (default streams apart)
	events    map[uintptr]*event  // live events by raw handle
	wrappers  map[wrapKey]any     // adopted stream and event wrappers
	legacy    *stream             // the legacy default stream, once adopted
	perThread map[int]*stream     // per-thread default streams by OS thread

	// Guarded by Device.mu.
	pools        map[uintptr]*memPool // live pools of ours and foreign ones
	poolWrappers map[uintptr]*adoptedPool
	current      *memPool // the current pool; nil: the default pool

	primary uintptr // the raw handle of the device's primary context
}

type wrapKey struct {
	kind byte // 's' stream, 'e' event
	raw  uintptr
	tid  int // per-thread default stream: its OS thread
}

func (t *handleTable) init(d *Device) {
	t.streams = make(map[uintptr]*stream)
	t.events = make(map[uintptr]*event)
	t.wrappers = make(map[wrapKey]any)
	t.perThread = make(map[int]*stream)
	t.pools = make(map[uintptr]*memPool)
	t.poolWrappers = make(map[uintptr]*adoptedPool)
	t.primary = contextBase + newRaw() // unique in the process, like a CUcontext
}

func (t *handleTable) addStream(s *stream) {
	t.mu.Lock()
	t.streams[s.raw] = s
	t.mu.Unlock()
}

// forgetStream drops a destroyed stream, and the wrapper of a foreign
// one: raw handles are never reused, so a holder of the wrapper keeps
// getting ErrDestroyed, and the table does not grow.
func (t *handleTable) forgetStream(s *stream) {
	t.mu.Lock()
	if t.streams[s.raw] == s {
		delete(t.streams, s.raw)
		delete(t.wrappers, wrapKey{kind: 's', raw: s.raw})
	}
	t.mu.Unlock()
}

func (t *handleTable) addEvent(e *event) {
	t.mu.Lock()
	t.events[e.raw] = e
	t.mu.Unlock()
}

func (t *handleTable) forgetEvent(e *event) {
	t.mu.Lock()
	if t.events[e.raw] == e {
		delete(t.events, e.raw)
		delete(t.wrappers, wrapKey{kind: 'e', raw: e.raw})
	}
	t.mu.Unlock()
}

// addPool registers a pool; Device.mu is not held.
func (t *handleTable) addPool(p *memPool) {
	p.dev.mu.Lock()
	t.pools[p.raw] = p
	p.dev.mu.Unlock()
}

// forgetPool drops a destroyed pool; Device.mu is held.
func (t *handleTable) forgetPool(p *memPool) {
	if t.pools[p.raw] == p {
		delete(t.pools, p.raw)
		delete(t.poolWrappers, p.raw)
	}
	if t.current == p {
		t.current = nil // the driver makes the default pool current again
	}
}

// currentPoolLocked is the pool MallocAsync draws from; Device.mu is held.
func (d *Device) currentPoolLocked() *memPool {
	if p := d.foreign.current; p != nil && !p.destroyed {
		return p
	}
	return d.defPool
}

// Raw is the stream's raw handle.
func (s *stream) Raw() uintptr { return s.raw }

// Raw is the event's raw handle.
func (e *event) Raw() uintptr { return e.raw }

// Raw is the pool's raw handle.
func (p *memPool) Raw() uintptr { return p.raw }

// Context is the raw handle of the device's primary context, what
// cuDevicePrimaryCtxRetain would return.
func (d *Device) Context() uintptr { return d.foreign.primary }

// --- The raw calls: what another library does with the driver ----------

// NewRawStream makes a stream the way code outside streamalloc would
// (cuStreamCreate) and returns its raw handle; only AdoptStream makes it
// usable through the gpu interface. Destroy it with DestroyRawStream.
func (d *Device) NewRawStream() (uintptr, error) {
	if err := d.inject(OpStreamCreate); err != nil {
		return 0, err
	}
	s := d.newForeignStream(newRaw())
	d.foreign.addStream(s)
	return s.raw, nil
}

// newForeignStream makes a stream that users see only through wrappers.
func (d *Device) newForeignStream(raw uintptr) *stream {
	s := newStream(d)
	s.raw, s.foreign = raw, true
	d.b.streams.Store(s.id, s)
	return s
}

// DestroyRawStream destroys a stream made by NewRawStream, as its owner
// would (cuStreamDestroy). A handle that is not a live stream of
// NewRawStream returns an error matching gpu.ErrInvalidHandle.
func (d *Device) DestroyRawStream(raw uintptr) error {
	d.foreign.mu.Lock()
	s := d.foreign.streams[raw]
	d.foreign.mu.Unlock()
	if s == nil || !s.foreign {
		return driverErrf("cuStreamDestroy", gpu.ErrInvalidHandle, "%#x is not a live raw stream", raw)
	}
	return s.Destroy()
}

// NewRawEvent makes an event the way code outside streamalloc would
// (cuEventCreate) and returns its raw handle.
func (d *Device) NewRawEvent(timing bool) (uintptr, error) {
	if err := d.inject(OpEventCreate); err != nil {
		return 0, err
	}
	e := &event{dev: d, timing: timing, raw: newRaw(), foreign: true}
	d.foreign.addEvent(e)
	return e.raw, nil
}

// DestroyRawEvent destroys an event made by NewRawEvent; anything else
// returns an error matching gpu.ErrInvalidHandle.
func (d *Device) DestroyRawEvent(raw uintptr) error {
	d.foreign.mu.Lock()
	e := d.foreign.events[raw]
	d.foreign.mu.Unlock()
	if e == nil || !e.foreign {
		return driverErrf("cuEventDestroy", gpu.ErrInvalidHandle, "%#x is not a live raw event", raw)
	}
	return e.Destroy()
}

// NewRawMemPool makes a pool the way code outside streamalloc would
// (cuMemPoolCreate) and returns its raw handle.
func (d *Device) NewRawMemPool() (uintptr, error) {
	if err := d.inject(OpMemPoolCreate); err != nil {
		return 0, err
	}
	p := newMemPool(d, false)
	p.foreign = true
	d.mu.Lock()
	d.pools = append(d.pools, p)
	d.foreign.pools[p.raw] = p
	d.mu.Unlock()
	return p.raw, nil
}

// DestroyRawMemPool destroys a pool made by NewRawMemPool; anything else
// returns an error matching gpu.ErrInvalidHandle.
func (d *Device) DestroyRawMemPool(raw uintptr) error {
	d.mu.Lock()
	p := d.foreign.pools[raw]
	d.mu.Unlock()
	if p == nil || !p.foreign {
		return driverErrf("cuMemPoolDestroy", gpu.ErrInvalidHandle, "%#x is not a live raw pool", raw)
	}
	return p.Destroy()
}

// rawContexts are the contexts made by NewRawContext: raw handle ->
// *Device.
var rawContexts sync.Map

// NewRawContext returns the raw handle of a new context of the device
// other than its primary one (cuCtxCreate), which AdoptContext refuses.
// Simulated contexts hold nothing; the handle is never invalid.
func (d *Device) NewRawContext() uintptr {
	raw := contextBase + 1<<32 + newRaw()
	rawContexts.Store(raw, d)
	return raw
}

// AdoptContext returns the device whose primary context raw is (see
// Device.Context). A context made by NewRawContext returns an error
// matching gpu.ErrForeignContext; zero or an unknown handle, one matching
// gpu.ErrInvalidHandle.
func (b *Backend) AdoptContext(raw uintptr) (gpu.Device, error) {
	const call = "cuCtxGetDevice"
	for _, d := range b.devices {
		if d.foreign.primary == raw {
			return d, nil
		}
	}
	if v, ok := rawContexts.Load(raw); ok {
		return nil, wrap(call, fmt.Errorf("context %#x of %v is not its primary context: %w", raw, v, gpu.ErrForeignContext))
	}
	return nil, driverErrf(call, gpu.ErrInvalidHandle, "unknown context %#x", raw)
}

// --- Adoption -----------------------------------------------------------

// AdoptStream wraps a raw stream handle without owning it: one made by
// NewRawStream, 0 (the legacy default stream, one per device) or
// gpu.StreamPerThread (the calling OS thread's per-thread default stream).
// The raw handle of one of our streams returns that stream. Anything else
// returns an error matching gpu.ErrInvalidHandle.
func (d *Device) AdoptStream(raw uintptr) (gpu.Stream, error) {
	const call = "cuStreamGetCtx"
	key := wrapKey{kind: 's', raw: raw}
	if raw == gpu.StreamPerThread {
		id, ok := osthread.ID()
		if !ok {
			return nil, wrap(call, fmt.Errorf("per-thread default stream: no thread IDs on this system: %w", gpu.ErrNotSupported))
		}
		key.tid = id
	}
	t := &d.foreign
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.wrappers[key]; ok {
		return w.(*adoptedStream), nil
	}
	var s *stream
	switch raw {
	case gpu.StreamLegacy:
		if t.legacy == nil {
			t.legacy = d.newForeignStream(gpu.StreamLegacy)
		}
		s = t.legacy
	case gpu.StreamPerThread:
		if s = t.perThread[key.tid]; s == nil {
			s = d.newForeignStream(gpu.StreamPerThread)
			t.perThread[key.tid] = s
		}
	default:
		if s = t.streams[raw]; s == nil {
			return nil, driverErrf(call, gpu.ErrInvalidHandle, "%#x is not a live stream of %v", raw, d)
		}
		if !s.foreign {
			return s, nil
		}
	}
	a := &adoptedStream{s: s, id: gpu.NewStreamID(), key: key}
	t.wrappers[key] = a
	return a, nil
}

// AdoptEvent wraps a raw event handle (one made by NewRawEvent) without
// owning it; the raw handle of one of our events returns that event. Zero
// or an unknown handle returns an error matching gpu.ErrInvalidHandle.
func (d *Device) AdoptEvent(raw uintptr) (gpu.Event, error) {
	const call = "cuEventQuery"
	key := wrapKey{kind: 'e', raw: raw}
	t := &d.foreign
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.wrappers[key]; ok {
		return w.(*adoptedEvent), nil
	}
	e := t.events[raw]
	if e == nil {
		return nil, driverErrf(call, gpu.ErrInvalidHandle, "%#x is not a live event of %v", raw, d)
	}
	if !e.foreign {
		return e, nil
	}
	a := &adoptedEvent{e: e, key: key}
	t.wrappers[key] = a
	return a, nil
}

// AdoptMemPool wraps a raw pool handle (one made by NewRawMemPool) without
// owning it; the default pool's handle and the handles of our pools return
// those pools. Zero or an unknown handle returns an error matching
// gpu.ErrInvalidHandle.
func (d *Device) AdoptMemPool(raw uintptr) (gpu.MemPool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adoptPoolLocked(raw)
}

func (d *Device) adoptPoolLocked(raw uintptr) (gpu.MemPool, error) {
	if raw == d.defPool.raw {
		return d.defPool, nil
	}
	t := &d.foreign
	if w := t.poolWrappers[raw]; w != nil {
		return w, nil
	}
	p := t.pools[raw]
	if p == nil {
		return nil, driverErrf("cuMemPoolGetAttribute", gpu.ErrInvalidHandle, "%#x is not a live pool of %v", raw, d)
	}
	if !p.foreign {
		return p, nil
	}
	a := &adoptedPool{p: p}
	t.poolWrappers[raw] = a
	return a, nil
}

// CurrentMemPool is the pool MallocAsync draws from: the default pool
// unless SetCurrentMemPool changed it (a foreign pool comes back adopted).
func (d *Device) CurrentMemPool() (gpu.MemPool, error) {
	if err := d.inject(OpDeviceGetDefaultMemPool); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.adoptPoolLocked(d.currentPoolLocked().raw)
}

// SetCurrentMemPool makes p the pool MallocAsync draws from, until it is
// destroyed (then the default pool is current again, as on the card).
func (d *Device) SetCurrentMemPool(gp gpu.MemPool) error {
	const call = "cuDeviceSetMemPool"
	p, err := d.pool(call, gp)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.destroyed {
		return wrap(call, fmt.Errorf("pool: %w", gpu.ErrDestroyed))
	}
	d.foreign.current = p
	if p.isDefault {
		d.foreign.current = nil
	}
	return nil
}

// adoptedStream resolves a stream wrapper for call.
func (d *Device) adoptedStream(call string, a *adoptedStream) (*stream, error) {
	if a.dead.Load() {
		return nil, wrap(call, fmt.Errorf("adopted stream %d: %w", a.id, gpu.ErrDestroyed))
	}
	if a.key.tid != 0 {
		if id, _ := osthread.ID(); id != a.key.tid {
			return nil, wrap(call, fmt.Errorf("per-thread default stream of thread %d used on thread %d: %w", a.key.tid, id, gpu.ErrWrongThread))
		}
	}
	if a.s.dev != d {
		return nil, wrap(call, fmt.Errorf("stream of %v used on %v: %w", a.s.dev, d, gpu.ErrWrongDevice))
	}
	if a.s.isDestroyed() {
		return nil, wrap(call, fmt.Errorf("adopted stream %d: destroyed by its owner: %w", a.id, gpu.ErrDestroyed))
	}
	return a.s, nil
}

func (d *Device) adoptedEvent(call string, a *adoptedEvent) (*event, error) {
	if a.dead.Load() {
		return nil, wrap(call, fmt.Errorf("adopted event: %w", gpu.ErrDestroyed))
	}
	return d.event(call, a.e)
}

func (d *Device) adoptedPool(call string, a *adoptedPool) (*memPool, error) {
	if a.dead.Load() {
		return nil, wrap(call, fmt.Errorf("adopted pool: %w", gpu.ErrDestroyed))
	}
	return d.pool(call, a.p)
}

// adoptedStream is a borrowed stream: a fresh ID over a stream that
// someone else owns.
type adoptedStream struct {
	s    *stream
	id   uint64
	key  wrapKey
	dead atomic.Bool
}

var (
	_ gpu.Adopter        = (*Device)(nil)
	_ gpu.ContextAdopter = (*Backend)(nil)
	_ gpu.RawHandle      = (*stream)(nil)
	_ gpu.RawHandle      = (*event)(nil)
	_ gpu.RawHandle      = (*memPool)(nil)
	_ gpu.Stream         = (*adoptedStream)(nil)
	_ gpu.RawHandle      = (*adoptedStream)(nil)
	_ gpu.Event          = (*adoptedEvent)(nil)
	_ gpu.MemPool        = (*adoptedPool)(nil)
)

func (a *adoptedStream) ID() uint64         { return a.id }
func (a *adoptedStream) Device() gpu.Device { return a.s.dev }
func (a *adoptedStream) Raw() uintptr       { return a.key.raw }
func (a *adoptedStream) String() string {
	return fmt.Sprintf("sim stream %d (adopted %#x)", a.id, a.key.raw)
}

func (a *adoptedStream) resolve(call string) (*stream, error) {
	if a == nil {
		return nil, wrap(call, fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	return a.s.dev.adoptedStream(call, a)
}

// Synchronize waits for the stream's work.
func (a *adoptedStream) Synchronize() error {
	s, err := a.resolve("cuStreamSynchronize")
	if err != nil {
		return err
	}
	return s.Synchronize()
}

// Query reports whether the stream's work has completed.
func (a *adoptedStream) Query() error {
	s, err := a.resolve("cuStreamQuery")
	if err != nil {
		return err
	}
	return s.Query()
}

// WaitEvent makes later work on the stream wait for e.
func (a *adoptedStream) WaitEvent(e gpu.Event) error {
	s, err := a.resolve("cuStreamWaitEvent")
	if err != nil {
		return err
	}
	return s.WaitEvent(e)
}

// Destroy forgets the wrapper; the stream stays its owner's.
func (a *adoptedStream) Destroy() error {
	if a == nil {
		return wrap("cuStreamDestroy", fmt.Errorf("nil stream: %w", gpu.ErrInvalidHandle))
	}
	if !a.dead.CompareAndSwap(false, true) {
		return wrap("cuStreamDestroy", fmt.Errorf("adopted stream %d: %w", a.id, gpu.ErrDestroyed))
	}
	t := &a.s.dev.foreign
	t.mu.Lock()
	if t.wrappers[a.key] == a {
		delete(t.wrappers, a.key)
	}
	t.mu.Unlock()
	return nil
}

// adoptedEvent is a borrowed event.
type adoptedEvent struct {
	e    *event
	key  wrapKey
	dead atomic.Bool
}

func (a *adoptedEvent) Device() gpu.Device { return a.e.dev }
func (a *adoptedEvent) Raw() uintptr       { return a.key.raw }

func (a *adoptedEvent) resolve(call string) (*event, error) {
	if a == nil {
		return nil, wrap(call, fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	return a.e.dev.adoptedEvent(call, a)
}

// Record captures the work enqueued on s so far.
func (a *adoptedEvent) Record(s gpu.Stream) error {
	e, err := a.resolve("cuEventRecord")
	if err != nil {
		return err
	}
	return e.Record(s)
}

// Query reports whether the event has completed.
func (a *adoptedEvent) Query() error {
	e, err := a.resolve("cuEventQuery")
	if err != nil {
		return err
	}
	return e.Query()
}

// Synchronize waits for the event.
func (a *adoptedEvent) Synchronize() error {
	e, err := a.resolve("cuEventSynchronize")
	if err != nil {
		return err
	}
	return e.Synchronize()
}

// ElapsedSince is the time from start to this event.
func (a *adoptedEvent) ElapsedSince(start gpu.Event) (time.Duration, error) {
	e, err := a.resolve("cuEventElapsedTime")
	if err != nil {
		return 0, err
	}
	return e.ElapsedSince(start)
}

// Destroy forgets the wrapper; the event stays its owner's.
func (a *adoptedEvent) Destroy() error {
	if a == nil {
		return wrap("cuEventDestroy", fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	if !a.dead.CompareAndSwap(false, true) {
		return wrap("cuEventDestroy", fmt.Errorf("adopted event: %w", gpu.ErrDestroyed))
	}
	t := &a.e.dev.foreign
	t.mu.Lock()
	if t.wrappers[a.key] == a {
		delete(t.wrappers, a.key)
	}
	t.mu.Unlock()
	return nil
}

// adoptedPool is a borrowed pool.
type adoptedPool struct {
	p    *memPool
	dead atomic.Bool
}

func (a *adoptedPool) Device() gpu.Device { return a.p.dev }
func (a *adoptedPool) Raw() uintptr       { return a.p.raw }

func (a *adoptedPool) resolve(call string) (*memPool, error) {
	if a == nil {
		return nil, wrap(call, fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	}
	return a.p.dev.adoptedPool(call, a)
}

// Attribute reads a pool attribute.
func (a *adoptedPool) Attribute(at gpu.PoolAttr) (uint64, error) {
	p, err := a.resolve("cuMemPoolGetAttribute")
	if err != nil {
		return 0, err
	}
	return p.Attribute(at)
}

// SetAttribute writes a pool attribute.
func (a *adoptedPool) SetAttribute(at gpu.PoolAttr, v uint64) error {
	p, err := a.resolve("cuMemPoolSetAttribute")
	if err != nil {
		return err
	}
	return p.SetAttribute(at, v)
}

// TrimTo releases idle memory of the pool.
func (a *adoptedPool) TrimTo(keep uint64) error {
	p, err := a.resolve("cuMemPoolTrimTo")
	if err != nil {
		return err
	}
	return p.TrimTo(keep)
}

// Destroy forgets the wrapper; the pool stays its owner's.
func (a *adoptedPool) Destroy() error {
	if a == nil {
		return wrap("cuMemPoolDestroy", fmt.Errorf("nil pool: %w", gpu.ErrInvalidHandle))
	}
	if !a.dead.CompareAndSwap(false, true) {
		return wrap("cuMemPoolDestroy", fmt.Errorf("adopted pool: %w", gpu.ErrDestroyed))
	}
	d := a.p.dev
	d.mu.Lock()
	if d.foreign.poolWrappers[a.p.raw] == a {
		delete(d.foreign.poolWrappers, a.p.raw)
	}
	d.mu.Unlock()
	return nil
}

// The capture methods forward to the stream, so that an adopted stream
// can be captured like one of ours (gpu.CaptureStream).

// BeginCapture begins a capture on the stream.
func (a *adoptedStream) BeginCapture(mode gpu.CaptureMode) error {
	s, err := a.resolve("cuStreamBeginCapture")
	if err != nil {
		return err
	}
	return s.BeginCapture(mode)
}

// EndCapture ends the stream's capture and returns its graph.
func (a *adoptedStream) EndCapture() (gpu.Graph, error) {
	s, err := a.resolve("cuStreamEndCapture")
	if err != nil {
		return nil, err
	}
	return s.EndCapture()
}

// CaptureID is the stream's capture, 0 when it is not capturing.
func (a *adoptedStream) CaptureID() uint64 {
	if a == nil || a.dead.Load() {
		return 0
	}
	return a.s.CaptureID()
}

// CaptureStatus is the stream's capture status.
func (a *adoptedStream) CaptureStatus() (gpu.CaptureStatus, error) {
	s, err := a.resolve("cuStreamGetCaptureInfo")
	if err != nil {
		return gpu.CaptureNone, err
	}
	return s.CaptureStatus()
}

// CaptureGated reports whether the capture gate covers the stream
// (gpu.CaptureGated): true for the legacy default stream, false for every
// other adopted stream, as cudagpu answers for the same handles. Every
// capture of a simulated stream is counted by the gate, so true would hold
// for all; answering as the card does makes resources on the simulator
// take the paths they take there (the pool's hot path on the legacy
// stream, where PyTorch and CuPy make their calls; the capture check on
// every request of any other adopted stream). False for a nil stream.
func (a *adoptedStream) CaptureGated() bool { return a != nil && a.key.raw == gpu.StreamLegacy }

var _ gpu.GatedCaptureStream = (*adoptedStream)(nil)
