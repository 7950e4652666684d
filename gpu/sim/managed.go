// Managed memory: residency per page, page faults, prefetch and advice.
//
// Every managed allocation (MallocManaged, or a chunk of a managed pool)
// has a residency: one word per ManagedPage bytes saying where the page
// has a valid copy (the host, the device, or, read-mostly, both), whether
// the device maps the host's copy without holding one, and the advice
// given for the page. A page starts unpopulated: its first toucher takes a
// fault that populates it, as on the card.
//
// Who touches what:
//   - A kernel (every Launch view, Chunks and what is built on it) touching
//     a page the device holds no copy of and does not map takes a device
//     fault, counted in ManagedStats.DeviceFaults. The page then moves to
//     the device; read-mostly, it is duplicated and the host keeps its
//     copy; with the host as preferred location, it stays and the device
//     maps it. Advised accessed-by this device, a populated page is mapped
//     and never faults. The simulator cannot tell a kernel's reads from its
//     writes, so a kernel's touch of a read-mostly page duplicates it.
//   - The host touches managed memory only through HostAccess (the model
//     has no host pointer to it): a page with no host copy takes a host
//     fault and moves to the host (read-mostly and read: is duplicated);
//     a write collapses a read-mostly duplicate to the host's copy.
//   - PrefetchAsync runs on its stream like any other operation: in
//     order, after the work before it and before the work after it; it
//     moves each page that is not there yet (counted per direction) and
//     takes no fault. Read-mostly pages are duplicated instead.
//   - Copies, sets and copies between devices do not change residency
//     and count no faults: the copy engine reaches either side.
//
// Page size: the card's driver migrates managed memory in blocks of up to
// 2 MiB on a fault and 64 KiB at the least on x86 hosts; the model uses
// one size, ManagedPage, so its counts are a model of the driver's, not
// its numbers. The words are updated by stream workers and by the host
// with race synchronization disabled (doc.go): they order nothing.
//
// Invariants: a populated page has a host copy, a device copy, or both;
// both only if it is read-mostly; the device maps a page only while the
// page has a host copy and no device copy.

package sim

import (
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

// ManagedPage is the unit of residency of the simulator's managed memory.
const ManagedPage = 64 << 10

// Bits of a page's residency word.
const (
	resHost       = 1 << iota // the host has a valid copy
	resDevice                 // the device has a valid copy
	resMapped                 // the device maps the host's copy
	advReadMostly             // advised read-mostly
	advPrefHost               // preferred location: the host
	advPrefDevice             // preferred location: the device
	advAccessedBy             // advised accessed-by the device
	advHostAccess             // advised accessed-by the host (recorded only)
)

// residency is the state of each page of one managed segment.
type residency struct {
	pages []atomic.Uint32
}

func newResidency(size uint64) *residency {
	return &residency{pages: make([]atomic.Uint32, (size+ManagedPage-1)/ManagedPage)}
}

// ManagedStats counts what happened to a device's managed memory, in
// pages of ManagedPage bytes, since the device was created.
type ManagedStats struct {
	DeviceFaults       uint64 // kernel touches of pages the device neither held nor mapped
	HostFaults         uint64 // HostAccess touches of pages the host did not hold
	PrefetchedToDevice uint64 // pages a prefetch moved or copied to the device
	PrefetchedToHost   uint64 // pages a prefetch moved or copied to the host
	Duplicated         uint64 // of all the above, read-mostly pages copied rather than moved
}

type managedCounters struct {
	deviceFaults, hostFaults, toDevice, toHost, duplicated atomic.Uint64
}

// pageTally is what one page's transition adds to the counters.
type pageTally struct {
	deviceFaults, hostFaults, toDevice, toHost, duplicated uint64
}

func (c *managedCounters) add(t pageTally) {
	for _, x := range []struct {
		c *atomic.Uint64
		n uint64
	}{{&c.deviceFaults, t.deviceFaults}, {&c.hostFaults, t.hostFaults}, {&c.toDevice, t.toDevice}, {&c.toHost, t.toHost}, {&c.duplicated, t.duplicated}} {
		if x.n != 0 {
			x.c.Add(x.n)
		}
	}
}

// ManagedStats returns the device's managed-memory counters. They cover
// the work that has run: synchronize first to read them for the work
// enqueued.
func (d *Device) ManagedStats() ManagedStats {
	c := &d.managed
	return ManagedStats{
		DeviceFaults:       c.deviceFaults.Load(),
		HostFaults:         c.hostFaults.Load(),
		PrefetchedToDevice: c.toDevice.Load(),
		PrefetchedToHost:   c.toHost.Load(),
		Duplicated:         c.duplicated.Load(),
	}
}

// update applies f to the words of the pages of [off, off+n), with race
// synchronization disabled, and adds to c what f tallied for each page's
// transition. A word another toucher changed meanwhile is read again and
// f called again with a fresh tally, so that c counts only the
// transitions that took place.
func (r *residency) update(off, n uint64, c *managedCounters, f func(st uint32, t *pageTally) uint32) {
	raceDisable()
	defer raceEnable()
	for i := off / ManagedPage; i <= (off+n-1)/ManagedPage && i < uint64(len(r.pages)); i++ {
		w := &r.pages[i]
		for {
			old := w.Load()
			var t pageTally
			if w.CompareAndSwap(old, f(old, &t)) {
				c.add(t)
				break
			}
		}
	}
}

// touchManaged records a kernel's touch of [p, p+n): a device fault for
// each managed page the device neither holds nor maps.
func (d *Device) touchManaged(p gpu.DevicePtr, n int) {
	if n <= 0 {
		return
	}
	seg, off := d.lookup(uint64(p), uint64(n))
	if seg == nil || seg.res == nil {
		return
	}
	seg.res.update(off, uint64(n), &d.managed, func(st uint32, t *pageTally) uint32 {
		populated := st&(resHost|resDevice) != 0
		switch {
		case st&resDevice != 0:
			return st
		case populated && st&(resMapped|advAccessedBy) != 0:
			return st
		}
		t.deviceFaults++
		switch {
		case populated && st&advReadMostly != 0:
			t.duplicated++
			return st | resDevice
		case populated && st&advPrefHost != 0:
			return st | resMapped
		}
		return st&^(resHost|resMapped) | resDevice
	})
}

// HostAccess models the host's loads (write false) or stores to the
// managed range [p, p+n), which the simulator has no host pointer for: a
// host fault for each page the host holds no copy of, which then moves to
// the host (a read of a read-mostly page duplicates it); a write leaves
// the host's copy the only one. It touches no bytes. A range that is not
// inside one managed allocation of the device is an error matching
// gpu.ErrInvalidValue.
func (d *Device) HostAccess(p gpu.DevicePtr, n int, write bool) error {
	seg, off, err := d.managedRange("HostAccess", p, n)
	if err != nil {
		return err
	}
	seg.res.update(off, uint64(n), &d.managed, func(st uint32, t *pageTally) uint32 {
		if st&resHost == 0 {
			t.hostFaults++
			if !write && st&(advReadMostly|resDevice) == advReadMostly|resDevice {
				t.duplicated++
				return st | resHost
			}
			st = st&^(resDevice|resMapped) | resHost
		}
		if write {
			st &^= resDevice
		}
		return st
	})
	return nil
}

// managedRange finds the managed segment holding all of [p, p+n).
func (d *Device) managedRange(call string, p gpu.DevicePtr, n int) (*segment, uint64, error) {
	if n <= 0 {
		return nil, 0, driverErrf(call, gpu.ErrInvalidValue, "size %d", n)
	}
	seg, off := d.lookup(uint64(p), uint64(n))
	if seg == nil || seg.res == nil {
		return nil, 0, driverErrf(call, gpu.ErrInvalidValue, "[%#x, +%d) is not inside one managed allocation of device %d", uint64(p), n, d.ordinal)
	}
	return seg, off, nil
}

// checkLocation validates loc (gpu.CheckLocation) and refuses a host
// NUMA node other than 0 (the model has one) with ErrInvalidValue. It
// reports whether loc is on the host.
func (d *Device) checkLocation(call string, loc gpu.Location) (bool, error) {
	if err := gpu.CheckLocation(d.ordinal, loc); err != nil {
		return false, wrap(call, err)
	}
	if loc.Kind == gpu.LocationHostNUMA && loc.ID != 0 {
		return false, driverErrf(call, gpu.ErrInvalidValue, "%v: the simulator has NUMA node 0 only", loc)
	}
	return loc.Kind != gpu.LocationDevice, nil
}

var _ gpu.ManagedMemory = (*Device)(nil)

// PrefetchAsync is cuMemPrefetchAsync: it moves the managed range
// [p, p+n) to loc when s reaches it. The model does not capture
// prefetches into graphs: on a capturing stream it is an error matching
// gpu.ErrStreamCaptureUnsupported that changes nothing.
func (d *Device) PrefetchAsync(p gpu.DevicePtr, n int, loc gpu.Location, gs gpu.Stream) error {
	const call = "cuMemPrefetchAsync"
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if err := d.inject(OpMemPrefetch); err != nil {
		return err
	}
	if _, _, err := d.managedRange(call, p, n); err != nil {
		return err
	}
	toHost, err := d.checkLocation(call, loc)
	if err != nil {
		return err
	}
	if s.cs.capt.Load() != nil {
		return driverErrf(call, gpu.ErrStreamCaptureUnsupported, "prefetch on a capturing stream")
	}
	o := &op{kind: opPrefetch, name: call, dst: p, n: n}
	if toHost {
		o.val = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	s.enqueueLocked(o)
	return nil
}

// runPrefetch moves the pages of a prefetch on the stream's worker. Memory
// freed since the enqueue is an illegal address, as for a copy.
func (d *Device) runPrefetch(o *op) error {
	seg, off := d.lookup(uint64(o.dst), uint64(o.n))
	if seg == nil || seg.res == nil {
		return driverErrf(o.name, gpu.ErrIllegalAddress, "[%#x, +%d) is no longer managed memory", uint64(o.dst), o.n)
	}
	toHost := o.val == 1
	here, there := uint32(resDevice), uint32(resHost)
	if toHost {
		here, there = resHost, resDevice
	}
	seg.res.update(off, uint64(o.n), &d.managed, func(st uint32, t *pageTally) uint32 {
		if st&here != 0 {
			return st
		}
		if toHost {
			t.toHost++
		} else {
			t.toDevice++
		}
		if st&advReadMostly != 0 && st&there != 0 {
			t.duplicated++
			return st | here
		}
		return st&^(there|resMapped) | here
	})
	return nil
}

// Advise is cuMemAdvise: it records a for the pages of the managed range
// [p, p+n). Unsetting read-mostly keeps the device's copy of a duplicated
// page; setting a preferred location replaces the other.
func (d *Device) Advise(p gpu.DevicePtr, n int, a gpu.Advice, loc gpu.Location) error {
	const call = "cuMemAdvise"
	if err := d.inject(OpMemAdvise); err != nil {
		return err
	}
	seg, off, err := d.managedRange(call, p, n)
	if err != nil {
		return err
	}
	if err := gpu.CheckAdvice(d.ordinal, a, loc); err != nil {
		return wrap(call, err)
	}
	var onHost bool
	if a.TakesLocation() {
		if onHost, err = d.checkLocation(call, loc); err != nil {
			return err
		}
	}
	var f func(uint32) uint32
	switch a {
	case gpu.AdviseSetReadMostly:
		f = func(st uint32) uint32 { return st | advReadMostly }
	case gpu.AdviseUnsetReadMostly:
		f = func(st uint32) uint32 {
			if st&(resHost|resDevice) == resHost|resDevice {
				st &^= resHost
			}
			return st &^ advReadMostly
		}
	case gpu.AdviseSetPreferredLocation:
		pref := uint32(advPrefDevice)
		if onHost {
			pref = advPrefHost
		}
		f = func(st uint32) uint32 { return st&^(advPrefHost|advPrefDevice) | pref }
	case gpu.AdviseUnsetPreferredLocation:
		f = func(st uint32) uint32 { return st &^ (advPrefHost | advPrefDevice) }
	case gpu.AdviseSetAccessedBy, gpu.AdviseUnsetAccessedBy:
		bit := uint32(advAccessedBy)
		if onHost {
			bit = advHostAccess
		}
		if a == gpu.AdviseSetAccessedBy {
			f = func(st uint32) uint32 { return st | bit }
		} else {
			f = func(st uint32) uint32 { return st &^ bit }
		}
	default:
		return driverErrf(call, gpu.ErrInvalidValue, "%v", a)
	}
	seg.res.update(off, uint64(n), &d.managed, func(st uint32, _ *pageTally) uint32 { return f(st) })
	return nil
}

// NewManagedPool creates a pool whose chunks are managed memory: its
// allocations start unpopulated and fault, prefetch and take advice like
// MallocManaged's.
func (d *Device) NewManagedPool() (gpu.MemPool, error) {
	if err := d.inject(OpMemPoolCreate); err != nil {
		return nil, err
	}
	return d.createMemPool(func(p *memPool) { p.managed = true }), nil
}

// String is the counts in one line.
func (s ManagedStats) String() string {
	return fmt.Sprintf("device faults %d, host faults %d, prefetched to device %d, to host %d, duplicated %d",
		s.DeviceFaults, s.HostFaults, s.PrefetchedToDevice, s.PrefetchedToHost, s.Duplicated)
}
