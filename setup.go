// Package streamalloc sets up stream-ordered GPU memory management in one
// call, as rmm.reinitialize does for RAPIDS: it opens the devices, builds
// the resource the configuration names on each, stacks the adaptors it
// asks for (a memory limit as a fraction of the device, statistics,
// allocation tracking, recovery from out-of-memory) and makes the stack
// each device's current resource (mr.SetCurrent), so that buf.New and
// buf.NewVector allocate from it when they are given no resource.
//
//	h, err := streamalloc.Setup(streamalloc.Config{Stats: true})
//	if err != nil { ... }
//	defer h.Close()
//	v, err := buf.NewVector[float32](nil, 1<<20, s) // from device 0's pool
//	fmt.Print(h.Summary())
//
// The libraries underneath (mr, buf, gpu) are what the handle is made of,
// and every piece stays reachable (Handle.Resource, Handle.Device) for
// code that needs more than the configuration offers.
//
// Each device's stack, nearest first:
//
//	Tracking (Config.Tracking) > Stats (Config.Stats) > History (Config.History) > Retry >
//	    Limit (Config.MemoryFraction) > the resource (Config.Resource)
//
// Stats and History sit above Retry so that they count what the program
// saw: a request that a retry satisfied is one allocation, and an
// out-of-memory refusal is the final one. Retry sits above the limit so that a refusal by the
// budget is retried after the pool's idle memory is released too.
//
// Invariants: a Handle restores, at Close, the current resource each
// device had before Setup (unless another was set since), and closes
// every resource it built, each once, after the last use through the
// handle; Close reports every error and may be called again.
package streamalloc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

// Errors of Setup's configuration, wrapped with the field at fault.
var (
	// ErrConfig is a configuration value out of range.
	ErrConfig = errors.New("streamalloc: bad configuration")
	// ErrClosed is returned by a Handle's methods after Close.
	ErrClosed = errors.New("streamalloc: handle closed")
)

// Config says what Setup builds. The zero value is a Pool over the
// driver's stream-ordered allocator (Async) on device 0 of the GPU, or of
// the simulated GPU where there is none, with out-of-memory recovery and
// no limit.
type Config struct {
	// Backend is "auto" (the default: the GPU if a driver and a device
	// are there, else the simulator), "cuda" or "sim".
	Backend string
	// Devices are the ordinals to set up; none means device 0.
	Devices []int
	// Use, if not empty, are the devices to set up, in place of Backend
	// and Devices (devices the program opened itself).
	Use []gpu.Device

	// Resource is the name of the resource of each device, as
	// mr/registry names it: "pool" (the default), "async", "direct",
	// "managed", "arena", "binning", "fixedsize".
	Resource string
	// Upstream is what a suballocator (pool, arena, binning, fixedsize)
	// draws its chunks from: "async" (the default: a driver pool of its
	// own) or "direct" (cuMemAlloc).
	Upstream string
	// New, if set, builds each device's resource in place of Resource
	// and Upstream, and returns the function that closes it.
	New func(dev gpu.Device) (mr.Resource, func() error, error)

	// MemoryFraction, if not zero, limits what each device's stack
	// hands out to that fraction of the device's memory (0 < f <= 1),
	// like torch.cuda.set_per_process_memory_fraction: an mr.Limit with
	// a budget of its own per device.
	MemoryFraction float64
	// Stats stacks an mr.Stats adaptor with per-stream counters.
	Stats bool
	// Tracking stacks an mr.Tracking adaptor: every live allocation with
	// its call stack, leak reports and pprof profiles.
	Tracking bool
	// History, if not zero, stacks an mr.History adaptor keeping that
	// many allocation events (mr.DefaultHistoryCapacity is PyTorch's
	// default), for Handle.DumpSnapshot: the memory history in the
	// format of torch.cuda.memory._dump_snapshot. Negative is an error.
	History int
	// RetryAttempts is how many times a request refused for lack of
	// memory is retried after reaping and releasing (mr.Retry); 0 means
	// 3, a negative value no retry (refusals are still counted and
	// observed).
	RetryAttempts int
	// OnOutOfMemory, if set, is called once for each request refused
	// for lack of memory after every retry, with the refusal and the
	// statistics of the device's whole stack (mr.RetryOptions.OnFailure;
	// report.Summary() is the text).
	OnOutOfMemory func(mr.OutOfMemoryReport)
	// KeepCurrent leaves the devices' current resources alone: the
	// stacks are only reachable through the handle.
	KeepCurrent bool
}

// Handle is what Setup built: a stack of resources per device. It is safe
// for concurrent use.
type Handle struct {
	mu      sync.Mutex
	closed  bool
	devices []*deviceStack
}

// deviceStack is one device's part of a Handle.
type deviceStack struct {
	dev      gpu.Device
	top      mr.Resource
	base     mr.Resource
	closeFn  func() error
	previous mr.Resource // the current resource before Setup, or nil with KeepCurrent
	current  bool        // Setup made top the current resource
	history  *mr.History // Config.History's adaptor, or nil
}

// Setup builds what cfg says on each device and returns the handle. On
// error nothing is left open and no current resource is changed.
func Setup(cfg Config) (*Handle, error) {
	if cfg.MemoryFraction < 0 || cfg.MemoryFraction > 1 {
		return nil, fmt.Errorf("%w: MemoryFraction %v is not in [0, 1]", ErrConfig, cfg.MemoryFraction)
	}
	if cfg.History < 0 {
		return nil, fmt.Errorf("%w: History %d is negative", ErrConfig, cfg.History)
	}
	devs, err := openDevices(cfg)
	if err != nil {
		return nil, err
	}
	h := &Handle{}
	for _, dev := range devs {
		ds, err := build(cfg, dev)
		if err != nil {
			// Close what was built; nothing is current yet.
			err = fmt.Errorf("streamalloc: setup device %d: %w", dev.Ordinal(), err)
			return nil, errors.Join(err, h.Close())
		}
		h.devices = append(h.devices, ds)
	}
	if !cfg.KeepCurrent {
		for _, ds := range h.devices {
			ds.previous = mr.SetCurrent(ds.dev, ds.top)
			ds.current = true
		}
	}
	return h, nil
}

func openDevices(cfg Config) ([]gpu.Device, error) {
	if len(cfg.Use) > 0 {
		seen := map[gpu.Device]bool{}
		for _, d := range cfg.Use {
			if d == nil {
				return nil, fmt.Errorf("%w: nil device in Use: %w", ErrConfig, gpu.ErrInvalidHandle)
			}
			if seen[d] {
				return nil, fmt.Errorf("%w: device %d twice in Use", ErrConfig, d.Ordinal())
			}
			seen[d] = true
		}
		return cfg.Use, nil
	}
	kind := cfg.Backend
	if kind == "" {
		kind = "auto"
	}
	b, err := backend.Open(kind)
	if err != nil {
		return nil, fmt.Errorf("streamalloc: setup: %w", err)
	}
	ords := cfg.Devices
	if len(ords) == 0 {
		ords = []int{0}
	}
	var out []gpu.Device
	seen := map[int]bool{}
	for _, o := range ords {
		if seen[o] {
			return nil, fmt.Errorf("%w: device %d twice in Devices", ErrConfig, o)
		}
		seen[o] = true
		d, err := b.Device(o)
		if err != nil {
			return nil, fmt.Errorf("streamalloc: setup: device %d: %w", o, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// build makes one device's stack.
func build(cfg Config, dev gpu.Device) (*deviceStack, error) {
	base, closeFn, err := newBase(cfg, dev)
	if err != nil {
		return nil, err
	}
	ds := &deviceStack{dev: dev, base: base, closeFn: closeFn}
	top := base
	if cfg.MemoryFraction > 0 {
		total := dev.Properties().TotalMemory
		if _, t, err := dev.MemGetInfo(); err == nil && t != 0 {
			total = t
		}
		top = mr.NewLimit(top, mr.NewBudget(uint64(float64(total)*cfg.MemoryFraction)))
	}
	var onFailure func(mr.OutOfMemoryReport)
	if cfg.OnOutOfMemory != nil {
		onFailure = func(rep mr.OutOfMemoryReport) {
			// The whole stack, not only what is below the Retry adaptor.
			rep.Stats = mr.StatsOf(ds.top)
			cfg.OnOutOfMemory(rep)
		}
	}
	top = mr.NewRetry(top, mr.RetryOptions{Attempts: cfg.RetryAttempts, OnFailure: onFailure})
	if cfg.History > 0 {
		ds.history = mr.NewHistory(top, mr.HistoryOptions{Capacity: cfg.History})
		top = ds.history
	}
	if cfg.Stats {
		top = mr.NewStats(top, mr.StatsOptions{PerStream: true})
	}
	if cfg.Tracking {
		top = mr.NewTracking(top, mr.TrackingOptions{})
	}
	ds.top = top
	return ds, nil
}

func newBase(cfg Config, dev gpu.Device) (mr.Resource, func() error, error) {
	if cfg.New != nil {
		r, closeFn, err := cfg.New(dev)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			return nil, nil, fmt.Errorf("%w: New returned no resource", ErrConfig)
		}
		if closeFn == nil {
			closeFn = func() error { return nil }
		}
		return r, closeFn, nil
	}
	name := cfg.Resource
	if name == "" {
		name = "pool"
	}
	var o registry.Options
	switch cfg.Upstream {
	case "", "async":
		o.Upstream = registry.UpstreamAsync
	case "direct":
		o.Upstream = registry.UpstreamDirect
	default:
		return nil, nil, fmt.Errorf("%w: Upstream %q (want async or direct)", ErrConfig, cfg.Upstream)
	}
	r, closeFn, err := registry.New(name, dev, o)
	if err != nil {
		if errors.Is(err, registry.ErrUnknown) {
			return nil, nil, fmt.Errorf("%w: Resource: %w", ErrConfig, err)
		}
		return nil, nil, err
	}
	return r, closeFn, nil
}

// stack returns the stack of device ordinal.
func (h *Handle) stack(ordinal int) (*deviceStack, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	for _, ds := range h.devices {
		if ds.dev.Ordinal() == ordinal {
			return ds, nil
		}
	}
	return nil, fmt.Errorf("streamalloc: device %d was not set up: %w", ordinal, gpu.ErrInvalidDevice)
}

// Devices returns the devices set up, in the order of the configuration.
func (h *Handle) Devices() []gpu.Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]gpu.Device, len(h.devices))
	for i, ds := range h.devices {
		out[i] = ds.dev
	}
	return out
}

// Device returns the set-up device of that ordinal.
func (h *Handle) Device(ordinal int) (gpu.Device, error) {
	ds, err := h.stack(ordinal)
	if err != nil {
		return nil, err
	}
	return ds.dev, nil
}

// Resource returns the top of device ordinal's stack: what buf.New uses
// when given no resource (unless KeepCurrent).
func (h *Handle) Resource(ordinal int) (mr.Resource, error) {
	ds, err := h.stack(ordinal)
	if err != nil {
		return nil, err
	}
	return ds.top, nil
}

// Resources returns the top of each device's stack, in the order of
// Devices (for mrpprof.Register, mrprom.ForChain and the like).
func (h *Handle) Resources() []mr.Resource {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]mr.Resource, len(h.devices))
	for i, ds := range h.devices {
		out[i] = ds.top
	}
	return out
}

// Stats reads every statistic of device ordinal's stack (mr.StatsOf).
func (h *Handle) Stats(ordinal int) (mr.ChainStats, error) {
	ds, err := h.stack(ordinal)
	if err != nil {
		return mr.ChainStats{}, err
	}
	return mr.StatsOf(ds.top), nil
}

// ErrNoHistory is returned by WriteSnapshot and DumpSnapshot when the
// configuration recorded no history (Config.History).
var ErrNoHistory = errors.New("streamalloc: no memory history recorded (Config.History is 0)")

// WriteSnapshot writes device ordinal's memory history and the layout of
// its memory as the pickle torch.cuda.memory._dump_snapshot writes
// (mr.History.WriteSnapshot), for PyTorch's memory_viz and for
// streamalloc replay.
func (h *Handle) WriteSnapshot(ordinal int, w io.Writer) error {
	ds, err := h.stack(ordinal)
	if err != nil {
		return err
	}
	if ds.history == nil {
		return ErrNoHistory
	}
	return ds.history.WriteSnapshot(w)
}

// DumpSnapshot writes WriteSnapshot's pickle to the file at path.
func (h *Handle) DumpSnapshot(ordinal int, path string) error {
	ds, err := h.stack(ordinal)
	if err != nil {
		return err
	}
	if ds.history == nil {
		return ErrNoHistory
	}
	return ds.history.DumpSnapshot(path)
}

// WriteSummary writes the summary of every device's stack
// (mr.WriteSummary), one after the other.
func (h *Handle) WriteSummary(w io.Writer) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	devs := h.devices
	h.mu.Unlock()
	for i, ds := range devs {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if err := mr.WriteSummary(w, ds.top); err != nil {
			return err
		}
	}
	return nil
}

// Summary returns WriteSummary's text ("streamalloc: handle closed" after
// Close).
func (h *Handle) Summary() string {
	var b strings.Builder
	if err := h.WriteSummary(&b); err != nil {
		return err.Error()
	}
	return b.String()
}

// String is one line per device: its ordinal and its stack on one line
// (mr.ChainStats.String).
func (h *Handle) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return "streamalloc: closed"
	}
	var lines []string
	for _, ds := range h.devices {
		lines = append(lines, fmt.Sprintf("device %d: %v", ds.dev.Ordinal(), mr.StatsOf(ds.top)))
	}
	return strings.Join(lines, "\n")
}

// Close restores each device's previous current resource (if the handle's
// stack is still the current one), then reaps the pending frees and
// releases the cached memory of each stack, waiting for frees still
// running, and closes the resources it built. Memory still allocated from
// a stack is reported as an error by the resources that hold it (an own
// driver pool refuses to close under live allocations); free it and call
// Close again. It returns every error met.
func (h *Handle) Close() error { return h.CloseContext(context.Background()) }

// CloseContext is Close with its waits for frees still running bounded by
// ctx: when ctx ends it stops, leaves the stacks it has not closed open
// (their frees stay pending) and returns an error matching ctx.Err(); call
// it again to finish.
func (h *Handle) CloseContext(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	var errs []error
	for _, ds := range h.devices {
		if ds.current {
			if cur := mr.Current(ds.dev); cur == ds.top {
				mr.SetCurrent(ds.dev, ds.previous)
			}
			ds.current = false
		}
	}
	left := 0
	for _, ds := range h.devices {
		if ds.closeFn == nil {
			continue
		}
		if ctx.Err() != nil {
			left++
			continue
		}
		if _, err := mr.ReclaimContext(ctx, ds.top); err != nil {
			errs = append(errs, fmt.Errorf("streamalloc: close device %d: %w", ds.dev.Ordinal(), err))
			if ctx.Err() != nil {
				left++
				continue
			}
		}
		if err := ds.closeFn(); err != nil {
			errs = append(errs, fmt.Errorf("streamalloc: close device %d: %w", ds.dev.Ordinal(), err))
			left++
			continue
		}
		ds.closeFn = nil
	}
	h.closed = left == 0
	return errors.Join(errs...)
}
