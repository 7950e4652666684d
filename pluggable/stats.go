// Statistics, release, the memory history and the profile of the devices
// in use.

package pluggable

import (
	"errors"
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// Stats are one device's figures since first use (peaks since the last
// ResetPeaks).
type Stats struct {
	// Reserved is the device memory the resource holds: what the bottom
	// of the stack took from the device (for a pool over cuMemAlloc, the
	// pool's chunks; over a driver pool, and for async, the driver pool's
	// reserved bytes, which the driver rounds up; over vmm, the memory
	// mapped, chunks or granules given back whose work is still running
	// included). PeakReserved is its high-water mark.
	Reserved, PeakReserved uint64
	// Live is the bytes of the allocations not yet freed (as requested),
	// PeakLive its high-water mark.
	Live, PeakLive uint64
	// Allocs and Frees count successful calls; LiveAllocs is their
	// difference.
	Allocs, Frees, LiveAllocs uint64
	// DeviceAllocs and DeviceFrees count a pool's calls to its upstream
	// (growths and chunks given back, each a cuMemAlloc/cuMemFree over
	// direct), what PyTorch counts as num_device_alloc/free. Over vmm
	// they count the pool's new chunks and commits of granules into a
	// growable one (each maps memory), and its chunks given back and
	// decommits (mr.PoolStats); with in_place=false, its chunks, as over
	// direct. Zero for async, whose driver pool does not say.
	DeviceAllocs, DeviceFrees uint64
	// AddressSpace is the virtual address space reserved, which holds no
	// memory (upstream=vmm; 0 otherwise): Reserved counts only what is
	// mapped in it.
	AddressSpace uint64
	// VMMFallback reports that upstream=vmm was asked for and the driver
	// has no virtual memory management: the pool is over cuMemAlloc
	// (upstream=direct) instead.
	VMMFallback bool
	// OOMs counts allocations refused for want of memory; BadFrees, frees
	// refused (nothing was freed); Errors, other failed calls of the whole
	// allocator (a bad device, a panic recovered), not only this device's.
	OOMs, BadFrees, Errors uint64
}

// Stats returns device ordinal's figures; a device not yet in use returns
// zeros and no error, a bad ordinal an error matching ErrBadDevice.
func (a *Allocator) Stats(ordinal int) (st Stats, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("stats", r)
			err = fmt.Errorf("%w in stats: %v", ErrPanic, r)
		}
	}()
	if ordinal < 0 || ordinal >= MaxDevices {
		return Stats{}, fmt.Errorf("%w: device %d", ErrBadDevice, ordinal)
	}
	st.Errors = a.errors.Load()
	d := a.devs[ordinal].Load()
	if d == nil {
		return st, nil
	}
	use := d.device.Usage()
	st.Reserved, st.PeakReserved = use.Reserved, use.PeakReserved
	switch {
	case d.counted != nil:
		c := d.counted.Snapshot().Allocations
		st.DeviceAllocs, st.DeviceFrees = c.Total, c.Total-c.Current
	case d.virtual != nil:
		ps := d.pool.Stats()
		st.DeviceAllocs, st.DeviceFrees = ps.Growths+ps.InPlaceGrowths, ps.Releases+ps.Decommits
	}
	if d.virtual != nil {
		st.AddressSpace = d.virtual.Stats().Reserved
	}
	st.VMMFallback = d.vmmFallback != ""
	st.Live, st.PeakLive = uint64(max(d.live.Load(), 0)), uint64(max(d.peakLive.Load(), 0))
	// Frees first: a free is counted after its allocation, so allocs
	// loaded after frees is not below it. A host's double free racing the
	// reuse of its address on another thread is counted before that
	// allocation, as the live bytes fall below zero then: both read 0.
	st.Frees = d.frees.Load()
	st.Allocs = d.allocs.Load()
	st.LiveAllocs = st.Allocs - min(st.Frees, st.Allocs)
	st.OOMs, st.BadFrees = d.ooms.Load(), d.badFrees.Load()
	return st, nil
}

// ResetPeaks lowers device ordinal's peaks to the current values.
func (a *Allocator) ResetPeaks(ordinal int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("reset peaks", r)
			err = fmt.Errorf("%w in reset peaks: %v", ErrPanic, r)
		}
	}()
	if ordinal < 0 || ordinal >= MaxDevices {
		return fmt.Errorf("%w: device %d", ErrBadDevice, ordinal)
	}
	d := a.devs[ordinal].Load()
	if d == nil {
		return nil
	}
	// An allocation that compared its live bytes with the peak before
	// this store skipped raising it; raising again from a fresh reading
	// leaves the peak no lower than the live bytes.
	d.peakLive.Store(d.live.Load())
	d.raisePeakLive(d.live.Load())
	var errs []error
	for _, r := range d.peaks {
		switch r := r.(type) {
		case interface{ ResetPeaks() }:
			r.ResetPeaks()
		case interface{ ResetPeaks() error }:
			errs = append(errs, r.ResetPeaks())
		}
	}
	return errors.Join(errs...)
}

// Release gives the cached memory of device ordinal (every device in use
// for -1) back to the device, as torch.cuda.empty_cache does: what no
// allocation uses. Like empty_cache it synchronizes the device, so that
// the frees enqueued before it have completed and their memory goes too.
func (a *Allocator) Release(ordinal int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("release", r)
			err = fmt.Errorf("%w in release: %v", ErrPanic, r)
		}
	}()
	if ordinal < -1 || ordinal >= MaxDevices {
		return fmt.Errorf("%w: device %d", ErrBadDevice, ordinal)
	}
	var errs []error
	for i := range a.devs {
		if ordinal != -1 && i != ordinal {
			continue
		}
		if d := a.devs[i].Load(); d != nil {
			if err := d.release(); err != nil {
				errs = append(errs, fmt.Errorf("pluggable: release device %d: %w", i, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		a.fail(err)
		return err
	}
	return nil
}

// WriteProfile writes the live allocations of every device in use, as a
// pprof profile (go tool pprof), to path. It needs the track option. The
// stacks end where the host called in: from C they show the entry point
// (sa_torch_alloc, sa_cupy_malloc), not the host's own frames.
func (a *Allocator) WriteProfile(path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("write profile", r)
			err = fmt.Errorf("%w in write profile: %v", ErrPanic, r)
		}
	}()
	var tracks []*mr.Tracking
	for i := range a.devs {
		if d := a.devs[i].Load(); d != nil && d.track != nil {
			tracks = append(tracks, d.track)
		}
	}
	if cfg, _ := a.Config(); !cfg.Track {
		a.setLastErr(ErrNotTracking)
		return ErrNotTracking
	}
	f, err := os.Create(path)
	if err != nil {
		a.fail(err)
		return err
	}
	err = writeProfiles(f, tracks)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		a.fail(err)
	}
	return err
}

// Flush writes the buffered lines of the memory history (the log option)
// to its file.
func (a *Allocator) Flush() (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.recovered("flush", r)
			err = fmt.Errorf("%w in flush: %v", ErrPanic, r)
		}
	}()
	var errs []error
	for i := range a.devs {
		if d := a.devs[i].Load(); d != nil && d.log != nil {
			errs = append(errs, d.log.Flush())
		}
	}
	if err := errors.Join(errs...); err != nil {
		a.fail(err)
		return err
	}
	return nil
}

// SimNewStream makes a stream on simulated device ordinal as another
// library would, and returns its raw handle (backend=sim only: the C ABI's
// tests use it to pass raw streams in).
func (a *Allocator) SimNewStream(ordinal int) (uintptr, error) {
	sd, err := a.simDevice(ordinal)
	if err != nil {
		return 0, err
	}
	return sd.NewRawStream()
}

// SimDestroyStream destroys a stream of SimNewStream. The default
// streams' handles (0 and gpu.StreamPerThread) are refused with an error
// matching gpu.ErrInvalidHandle, as the driver refuses them, before their
// wrappers are touched: the device's state keeps the legacy stream's
// wrapper (device.stream), which must not be forgotten.
func (a *Allocator) SimDestroyStream(ordinal int, raw uintptr) error {
	sd, err := a.simDevice(ordinal)
	if err != nil {
		return err
	}
	if raw == gpu.StreamLegacy || raw == gpu.StreamPerThread {
		return fmt.Errorf("pluggable: destroy stream %#x on device %d: a default stream: %w", raw, ordinal, gpu.ErrInvalidHandle)
	}
	if s, err := sd.AdoptStream(raw); err == nil {
		s.Destroy() // forget our wrapper before the owner destroys the stream
	}
	return sd.DestroyRawStream(raw)
}

func (a *Allocator) simDevice(ordinal int) (*sim.Device, error) {
	d, err := a.device(ordinal)
	if err != nil {
		return nil, err
	}
	sd, ok := d.dev.(*sim.Device)
	if !ok {
		return nil, fmt.Errorf("pluggable: device %d is not simulated (backend=sim): %w", ordinal, ErrBadDevice)
	}
	return sd, nil
}

// release gives back what the device's stack caches: the pool's idle
// chunks, then (after the device has run the frees of those chunks) what
// a driver pool under it keeps.
func (d *device) release() error {
	if err := d.dev.Synchronize(); err != nil {
		return err
	}
	if _, err := mr.Reclaim(d.res, true); err != nil {
		return err
	}
	if d.bottom == nil {
		return nil
	}
	if err := d.dev.Synchronize(); err != nil {
		return err
	}
	return d.bottom.Release()
}
