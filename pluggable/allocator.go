// Package pluggable is streamalloc as the device allocator of a host
// program that calls it through a C ABI: PyTorch's CUDAPluggableAllocator,
// CuPy's CFunctionAllocator, or any C code (package capi exports it). It
// holds everything the C ABI does, so that all of it is tested on the
// simulator: the configuration, one resource per device made on first
// use, raw stream handles adopted, statistics, counting of failures, the
// memory history and the profile.
//
// # Contract with the host
//
// Alloc returns 0 (NULL) for anything it cannot serve, as PyTorch
// requires, and never panics: out of memory is counted (Stats.OOMs), any
// other failure (a bad device, a stream of another context) counted as an
// error, and the message kept for LastError. Free never fails the host
// either: a pointer this allocator did not hand out, a double free or a
// wrong size is refused by the resource before the driver sees it, counted
// (Stats.BadFrees) and reported (LastError, and the first few on standard
// error). A Go panic below is recovered in the method that the C ABI
// calls, counted as an error, and the call answers as it would on an
// error; no panic can cross into C, where it would abort the host.
//
// # Streams
//
// The host's stream (a cudaStream_t) is adopted on every call
// (gpu.Adopter): a lock-free map lookup once seen, and for the legacy
// default stream (0), on which PyTorch makes every call of a program that
// uses no stream of its own, and CuPy all of its calls, the wrapper kept
// in the device's state after its first adoption. PyTorch frees on the
// stream it allocated on (CUDAPluggableAllocator passes the allocation's
// stream to free), so its frees are same-stream frees that the next
// allocation on that stream reuses at once; a free on another stream is
// ordered by an event, as everywhere in streamalloc. CuPy's allocator
// interface has no stream: its allocations and frees use the legacy
// default stream, which the driver orders against every blocking stream
// (CuPy's streams are blocking unless made non_blocking).
//
// # Invariants
//
// One resource per device, made on first use, never replaced; the
// configuration is fixed from then on (Configure fails with ErrStarted).
// Live bytes and counts change only for allocations the resource granted
// and frees it accepted, so they never drift on errors.
package pluggable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// ConfigEnv is the environment variable read at first use when Configure
// was not called.
const ConfigEnv = "STREAMALLOC_CONF"

// MaxDevices bounds the device ordinals the allocator serves.
const MaxDevices = 64

// Errors of the allocator.
var (
	// ErrStarted: Configure after the first allocation.
	ErrStarted = errors.New("pluggable: already in use; configure before the first allocation")
	// ErrBadDevice: a device ordinal the backend does not have.
	ErrBadDevice = errors.New("pluggable: no such device")
	// ErrNotTracking: WriteProfile without the track option.
	ErrNotTracking = errors.New("pluggable: the profile needs the track option")
	// ErrPanic: a panic below the allocator, recovered.
	ErrPanic = errors.New("pluggable: recovered panic")
)

// reportedBadFrees is how many bad frees are written to standard error;
// all are counted.
const reportedBadFrees = 8

// Allocator is one process's allocator over one backend. The zero value
// is not usable; use New, or Default, the one the C ABI serves.
type Allocator struct {
	mu      sync.Mutex // configuration and the opening of devices
	cfg     Config
	set     bool // cfg came from Configure
	started atomic.Bool
	backend gpu.Backend
	ndev    int
	logFile *os.File
	openErr error

	devs [MaxDevices]atomic.Pointer[device]

	errors, panics atomic.Uint64
	lastErr        atomic.Pointer[string]
	reported       atomic.Int32
	stderr         io.Writer

	// wrap, if set, wraps each device's resource (tests use it to make
	// the resource panic); vmmDevice, the device upstream=vmm builds its
	// Virtual on (tests use it to hide the simulator's virtual memory).
	wrap      func(mr.Resource) mr.Resource
	vmmDevice func(gpu.Device) gpu.Device
}

// device is the state of one device in use.
//
// Layout: a call of the host touches, of this state, only deviceHot, the
// first 64 bytes, on one cache line. The state is padded to 512 bytes, a
// size class whose objects the Go heap places at multiples of 512 from a
// page, with no header before them (TestDeviceHotLine checks both on the
// running runtime). In the host's process the host's own work between
// calls evicts the allocator's lines, so each line a call touches is a
// miss (BENCHMARKS.md, "Cold calls: the lines a call touches").
type device struct {
	deviceHot
	deviceCold
	_ [deviceSize - unsafe.Sizeof(deviceHot{}) - unsafe.Sizeof(deviceCold{})]byte
}

// deviceSize is the size of a device's state: see device.
const deviceSize = 512

// deviceCold is the state of a device that calls served by the pool on
// the legacy stream do not touch.
type deviceCold struct {
	dev  gpu.Device
	res  mr.Resource // the top of the stack the host calls
	base mr.Resource // the pool or async resource under the adaptors
	// device is the resource that holds device memory (Direct or Async at
	// the bottom, seen through counted for a pool; the Virtual over vmm,
	// whose mapped memory includes frees whose work is still running):
	// its Usage is what Stats reports as reserved.
	device  mr.UsageReporter
	counted *mr.Stats // a pool's calls to its upstream; nil for async
	peaks   []any     // what ResetPeaks resets
	// bottom is a pool's upstream when it caches memory itself (a driver
	// pool, or Virtual's frees waiting for their work), which Release
	// trims after the pool gave its chunks back.
	bottom mr.Releaser
	// pool is the pool of kind pool, virtual the Virtual under it
	// (upstream=vmm), and vmmFallback why the pool is over cuMemAlloc
	// instead (the driver has no virtual memory management).
	pool        *mr.Pool
	virtual     *mr.Virtual
	vmmFallback string
	track       *mr.Tracking
	log         *mr.Logging
	closers     []func() error

	ooms, badFrees atomic.Uint64
	legacyMu       sync.Mutex // serializes the keeping of legacy
	noSize         *sizeTable // sizes of allocations freed without one (CuPy)
}

// deviceHot is what every allocation and free of the host reads and
// writes, on one cache line.
type deviceHot struct {
	// top is the pool when it is the top of the stack (no tracking,
	// logging or test wrapper above it), called directly rather than
	// through res: no interface table to load. Nil otherwise.
	top *mr.Pool
	// legacy is the adopted legacy default stream once hasLegacy is set
	// (written once, under legacyMu, before hasLegacy): the stream of
	// every PyTorch call on the default stream and of every CuPy call,
	// served without the adoption's lookup.
	hasLegacy atomic.Bool
	legacy    gpu.Stream
	// allocs and frees count successful calls (their difference is the
	// live allocations: a free is counted after its allocation, except a
	// host's stale free racing its address's reuse, which Stats reads as
	// none live); live is the bytes of the allocations not yet freed,
	// peakLive its high-water mark.
	allocs, frees  atomic.Uint64
	live, peakLive atomic.Int64
}

// Default is the allocator of the process, the one the C ABI calls.
var Default = New()

// New returns an allocator that reads its configuration from
// STREAMALLOC_CONF at first use unless Configure is called before.
func New() *Allocator { return &Allocator{stderr: os.Stderr} }

// Configure sets the configuration (ParseConfig's grammar). It fails with
// an error matching ErrStarted once a device is in use, and with one
// matching ErrConfig for a bad string (the configuration is then as
// before).
func (a *Allocator) Configure(conf string) error {
	c, err := ParseConfig(conf)
	if err != nil {
		a.setLastErr(err)
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started.Load() {
		err := fmt.Errorf("%w (configuration %q)", ErrStarted, conf)
		a.setLastErr(err)
		return err
	}
	a.cfg, a.set = c, true
	return nil
}

// Config returns the configuration in effect (or that will be, at first
// use).
func (a *Allocator) Config() (Config, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.configLocked()
}

func (a *Allocator) configLocked() (Config, error) {
	if a.set {
		return a.cfg, nil
	}
	return ParseConfig(os.Getenv(ConfigEnv))
}

// start opens the backend on first use; a.mu is held.
func (a *Allocator) startLocked() error {
	if a.started.Load() {
		return a.openErr
	}
	a.started.Store(true)
	a.openErr = a.openLocked()
	return a.openErr
}

func (a *Allocator) openLocked() error {
	c, err := a.configLocked()
	if err != nil {
		return fmt.Errorf("%s: %w", ConfigEnv, err)
	}
	a.cfg = c
	switch c.Backend {
	case "sim":
		a.backend = sim.New(sim.Config{Capacity: c.SimCapacity})
	default:
		if a.backend, err = cudagpu.Open(); err != nil {
			return err
		}
	}
	if a.ndev, err = a.backend.DeviceCount(); err != nil {
		return err
	}
	if c.Log != "" {
		if a.logFile, err = os.Create(c.Log); err != nil {
			return fmt.Errorf("pluggable: history: %w", err)
		}
	}
	return nil
}

// device returns the state of device ordinal, opening it on first use.
func (a *Allocator) device(ordinal int) (*device, error) {
	if ordinal < 0 || ordinal >= MaxDevices {
		return nil, fmt.Errorf("%w: device %d", ErrBadDevice, ordinal)
	}
	if d := a.devs[ordinal].Load(); d != nil {
		return d, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if d := a.devs[ordinal].Load(); d != nil {
		return d, nil
	}
	if err := a.startLocked(); err != nil {
		return nil, err
	}
	if ordinal >= a.ndev {
		return nil, fmt.Errorf("%w: device %d of %d", ErrBadDevice, ordinal, a.ndev)
	}
	d, err := a.openDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("pluggable: device %d: %w", ordinal, err)
	}
	a.devs[ordinal].Store(d)
	return d, nil
}

// openDevice builds the resource stack of one device from the
// configuration: the kind, then Tracking and Logging if asked for.
func (a *Allocator) openDevice(ordinal int) (*device, error) {
	gd, err := a.backend.Device(ordinal)
	if err != nil {
		return nil, err
	}
	c := a.cfg
	d := &device{deviceCold: deviceCold{dev: gd, noSize: new(sizeTable)}}
	switch c.Kind {
	case "async":
		opts := mr.AsyncOptions{ReleaseThreshold: c.ReleaseThreshold}
		switch c.AsyncPool {
		case "own":
			opts.OwnPool = true
		case "current":
			opts.CurrentPool = true
		}
		r, err := mr.NewAsync(gd, opts)
		if err != nil {
			return nil, err
		}
		d.base, d.device, d.closers = r, r, append(d.closers, r.Close)
		d.peaks = []any{r}
	default:
		vmmDev := gd
		if a.vmmDevice != nil {
			vmmDev = a.vmmDevice(gd)
		}
		if err := d.openPool(c, vmmDev); err != nil {
			return nil, err
		}
		if d.vmmFallback != "" {
			fmt.Fprintf(a.stderr, "streamalloc: device %d: upstream=vmm unavailable, the pool is over cuMemAlloc: %s\n", ordinal, d.vmmFallback)
		}
	}
	d.res = d.base
	if c.Track {
		d.track = mr.NewTracking(d.res, mr.TrackingOptions{})
		d.res = d.track
	}
	if a.logFile != nil {
		d.log = mr.NewLogging(d.res, a.logFile, mr.LoggingOptions{Thread: uint64(ordinal)})
		d.res = d.log
	}
	if a.wrap != nil {
		d.res = a.wrap(d.res)
	}
	if d.pool != nil && d.res == mr.Resource(d.pool) {
		d.top = d.pool
	}
	return d, nil
}

// openPool builds the pool of kind pool over the upstream c names. Over
// direct and async the pool's calls to its upstream are counted on the
// way (Stats.DeviceAllocs); over vmm the pool sits on the Virtual itself,
// which it must see to grow in place (mr.Grower), and counts them itself.
// With in_place=false (c.Chunked) the pool is over the Virtual through the
// counting adaptor, which does not implement mr.Grower: the pool then
// finds a plain upstream and cuts chunks, each one of Virtual's physical
// allocations. vmmDev is the device the Virtual is built on: d.dev but in
// tests.
func (d *device) openPool(c Config, vmmDev gpu.Device) error {
	popts := mr.PoolOptions{ChunkSize: int(c.ChunkSize), InitialSize: int(c.InitialSize),
		MaxSize: int(c.MaxSize), ReleaseThreshold: int(c.ReleaseThreshold), SplitBig: c.SplitBig,
		SplitGiantAtMark: c.SplitGiant, ReservedSlack: c.Slack}
	var up mr.Resource
	switch c.Upstream {
	case "vmm":
		vopts := mr.VirtualOptions{WaitForDecommits: c.WaitDecommits, PiecesPerCommit: c.Pieces, WaitForFrees: c.WaitFrees}
		if c.WaitDecommits {
			vopts.DecommitWaitLimit = DecommitWaitLimit
		}
		v, err := mr.NewVirtual(vmmDev, vopts)
		if errors.Is(err, gpu.ErrNotSupported) {
			d.vmmFallback = err.Error()
			up = mr.NewDirect(d.dev)
			break
		}
		if err != nil {
			return err
		}
		d.virtual, d.bottom = v, v
		d.closers = []func() error{func() error { return v.ReleaseContext(context.Background()) }, v.Close}
		if c.Chunked {
			up = v
			break
		}
		if c.MappedSlack {
			popts.MappedSlack = VMMMappedSlack
		}
		popts.SmallAtPeak = c.SmallAtPeak
		p, err := mr.NewPool(v, popts)
		if err != nil {
			return errors.Join(err, closeAll(d.closers))
		}
		d.pool, d.base, d.device = p, p, v
		d.closers = append([]func() error{p.Close}, d.closers...)
		d.peaks = []any{p, v}
		return nil
	case "async":
		r, err := mr.NewAsync(d.dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: maxOption})
		if err != nil {
			return err
		}
		up, d.bottom, d.closers = r, r, []func() error{r.Close}
	default:
		up = mr.NewDirect(d.dev)
	}
	d.counted = mr.NewStats(up, mr.StatsOptions{})
	p, err := mr.NewPool(d.counted, popts)
	if err != nil {
		return errors.Join(err, closeAll(d.closers))
	}
	d.pool, d.base, d.device = p, p, d.counted
	if d.virtual != nil {
		// The memory mapped, frees whose work has not yet completed
		// included: what the device holds, where the adaptor would count
		// only the pool's chunks.
		d.device = d.virtual
	}
	d.closers = append([]func() error{p.Close}, d.closers...)
	d.peaks = []any{p, d.counted, up}
	return nil
}

// closeAll calls each closer in order and joins their errors.
func closeAll(closers []func() error) error {
	var errs []error
	for _, f := range closers {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

// setLastErr keeps err's message for LastError and counts it.
func (a *Allocator) setLastErr(err error) {
	msg := err.Error()
	a.lastErr.Store(&msg)
}

// fail counts an error of a call and keeps its message.
func (a *Allocator) fail(err error) {
	a.errors.Add(1)
	a.setLastErr(err)
}

// recovered turns a recovered panic into a counted error.
func (a *Allocator) recovered(op string, r any) {
	a.panics.Add(1)
	a.fail(fmt.Errorf("%w in %s: %v", ErrPanic, op, r))
}

// LastError is the message of the last failure (a configuration, an
// allocation, a free), or "".
func (a *Allocator) LastError() string {
	if p := a.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Alloc returns size bytes on device for work enqueued on stream (a raw
// cudaStream_t: 0 is the legacy default stream), or 0 if it cannot: out of
// memory (counted in Stats.OOMs) or another error (counted in the
// allocator's errors, with LastError). A size of 0 returns 0 and counts
// nothing.
func (a *Allocator) Alloc(size uint64, ordinal int, stream uintptr) (p uintptr) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("alloc", r)
			p = 0
		}
	}()
	if size == 0 {
		return 0
	}
	d, err := a.device(ordinal)
	if err != nil {
		a.fail(fmt.Errorf("pluggable: alloc %d bytes: %w", size, err))
		return 0
	}
	s, err := d.stream(stream)
	if err != nil {
		a.fail(fmt.Errorf("pluggable: alloc %d bytes on device %d: %w", size, ordinal, err))
		return 0
	}
	return a.alloc(d, size, s)
}

func (a *Allocator) alloc(d *device, size uint64, s gpu.Stream) uintptr {
	if size > maxOption {
		d.ooms.Add(1)
		a.setLastErr(fmt.Errorf("pluggable: alloc %d bytes: %w", size, mr.ErrOutOfMemory))
		return 0
	}
	var ptr gpu.DevicePtr
	var err error
	if d.top != nil {
		ptr, err = d.top.Allocate(int(size), s)
	} else {
		ptr, err = d.res.Allocate(int(size), s)
	}
	if err != nil {
		if errors.Is(err, mr.ErrOutOfMemory) {
			d.ooms.Add(1)
			a.setLastErr(err)
		} else {
			a.fail(err)
		}
		return 0
	}
	d.allocs.Add(1)
	d.raisePeakLive(d.live.Add(int64(size)))
	return uintptr(ptr)
}

// raisePeakLive makes the peak of live bytes at least live.
func (d *device) raisePeakLive(live int64) {
	for {
		peak := d.peakLive.Load()
		if live <= peak || d.peakLive.CompareAndSwap(peak, live) {
			return
		}
	}
}

// Free frees ptr, of size bytes, allocated on device, in stream order on
// stream. A free the resource refuses (unknown pointer, double free, wrong
// size, bad stream) changes nothing, is counted in Stats.BadFrees and
// returned; Free(0, 0, ...) does nothing.
func (a *Allocator) Free(ptr uintptr, size uint64, ordinal int, stream uintptr) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("free", r)
			err = fmt.Errorf("%w in free: %v", ErrPanic, r)
		}
	}()
	if ptr == 0 && size == 0 {
		return nil
	}
	d, err := a.device(ordinal)
	if err != nil {
		return a.badFree(nil, fmt.Errorf("pluggable: free %#x: %w", ptr, err))
	}
	s, err := d.stream(stream)
	if err != nil {
		return a.badFree(d, fmt.Errorf("pluggable: free %#x on device %d: %w", ptr, ordinal, err))
	}
	return a.free(d, ptr, size, s)
}

func (a *Allocator) free(d *device, ptr uintptr, size uint64, s gpu.Stream) error {
	if size > maxOption {
		return a.badFree(d, fmt.Errorf("pluggable: free %#x of %d bytes: %w", ptr, size, mr.ErrSizeMismatch))
	}
	var err error
	if d.top != nil {
		err = d.top.Deallocate(gpu.DevicePtr(ptr), int(size), s)
	} else {
		err = d.res.Deallocate(gpu.DevicePtr(ptr), int(size), s)
	}
	if err != nil {
		return a.badFree(d, err)
	}
	d.frees.Add(1)
	d.live.Add(-int64(size))
	return nil
}

// badFree counts and reports a refused free.
func (a *Allocator) badFree(d *device, err error) error {
	if d != nil {
		d.badFrees.Add(1)
	} else {
		a.errors.Add(1)
	}
	a.setLastErr(err)
	if a.reported.Add(1) <= reportedBadFrees {
		fmt.Fprintf(a.stderr, "streamalloc: bad free (counted, nothing freed): %v\n", err)
	}
	return err
}

// AllocNoStream is Alloc for hosts whose interface has no stream and frees
// without a size (CuPy): it allocates on the legacy default stream and
// remembers the size for FreeNoSize.
func (a *Allocator) AllocNoStream(size uint64, ordinal int) (p uintptr) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("alloc", r)
			p = 0
		}
	}()
	if size == 0 {
		return 0
	}
	d, s, err := a.legacyStream(ordinal)
	if err != nil {
		a.fail(fmt.Errorf("pluggable: alloc %d bytes: %w", size, err))
		return 0
	}
	p = a.alloc(d, size, s)
	if p != 0 {
		d.noSize.put(p, size)
	}
	return p
}

// FreeNoSize frees an allocation of AllocNoStream, on the legacy default
// stream; a pointer it did not hand out is a bad free.
func (a *Allocator) FreeNoSize(ptr uintptr, ordinal int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("free", r)
			err = fmt.Errorf("%w in free: %v", ErrPanic, r)
		}
	}()
	if ptr == 0 {
		return nil
	}
	d, s, err := a.legacyStream(ordinal)
	if err != nil {
		return a.badFree(d, fmt.Errorf("pluggable: free %#x: %w", ptr, err))
	}
	size, ok := d.noSize.take(ptr)
	if !ok {
		return a.badFree(d, fmt.Errorf("pluggable: free %#x: %w", ptr, mr.ErrUnknownPointer))
	}
	if err := a.free(d, ptr, size, s); err != nil {
		d.noSize.put(ptr, size) // still live
		return err
	}
	return nil
}

func (a *Allocator) legacyStream(ordinal int) (*device, gpu.Stream, error) {
	d, err := a.device(ordinal)
	if err != nil {
		return nil, nil, err
	}
	s, err := d.stream(gpu.StreamLegacy)
	if err != nil {
		return d, nil, err
	}
	return d, s, nil
}

// stream adopts raw, a stream handle of the host: the legacy default
// stream from d.legacy once adopted, any other through the device's
// adoption (a lock-free lookup once seen). The adopted legacy stream is
// never destroyed here, and adopting a handle twice gives the same
// wrapper, so the kept one is the one AdoptStream would return.
func (d *device) stream(raw uintptr) (gpu.Stream, error) {
	if raw == gpu.StreamLegacy && d.hasLegacy.Load() {
		return d.legacy, nil
	}
	s, err := d.dev.AdoptStream(raw)
	if err != nil || raw != gpu.StreamLegacy {
		return s, err
	}
	d.legacyMu.Lock()
	if !d.hasLegacy.Load() {
		d.legacy = s
		d.hasLegacy.Store(true)
	}
	d.legacyMu.Unlock()
	return s, nil
}

// Recover, deferred by an entry point of the C ABI, turns a panic in that
// entry point into a counted error (the call then returns its zero
// values), so that no panic crosses into C.
func (a *Allocator) Recover(entry string) {
	if r := recover(); r != nil {
		a.recovered(entry, r)
	}
}
