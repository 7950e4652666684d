// Virtual's growable allocations (Grower): a reserved range each, with
// physical memory committed and decommitted granule by granule.
//
// AllocateGrowable reserves a range of its own (cuMemAddressReserve) of
// the limit asked for and commits its first granules; Commit and Decommit
// map and unmap any granules of it. Every granule is its own physical
// allocation (cuMemCreate of one granule) and its own mapping, so that any
// granule can be unmapped and its memory given back to the device alone: a
// physical allocation goes back only when all of it is unmapped, and an
// unmap takes whole mappings.
//
// A decommitted granule (by Decommit, or by Deallocate for all of them)
// waits, still mapped, for an event recorded on the decommitting stream; a
// later call that finds the event complete (a query, never a host wait)
// unmaps it and releases its physical memory. Until then its memory can go
// to another commit without a trip through the device: a Commit first
// takes back the waiting granules it covers (still mapped where it
// commits); for the others it takes the memory of waiting granules, of the
// same range first, then of others, which it maps after making its stream
// wait on the decommit's event (the handle is then mapped at both places,
// and only the new owner's work, ordered after the decommit, uses it); and
// only when none waits does it create physical memory. So the device never
// holds a decommitted granule and a new one at once, whatever the work
// still queued, and memory one stream's range let go is not stranded while
// another's grows. The price: a granule's old address stays mapped until
// its decommit's work completes, and its range cannot commit there
// meanwhile (ErrGrowBlocked; the Pool places the request elsewhere).
//
// Whether a commit meets such addresses depends on how far the device has
// got with the decommit's work when the commit comes, and a refused commit
// changes where the Pool places its blocks from then on; so over the same
// requests a Pool's layout and peaks vary from run to run. With
// VirtualOptions.WaitForDecommits a commit there waits on the host for
// the decommit's event and unmaps the granule instead
// (unmapHandedLocked): every answer of Commit then follows from the calls
// alone, and only the physical memory still waiting (Stats().Pending, and
// PeakMapped with it) depends on the device's progress.
//
// Invariants (under Virtual.mu), for each growable allocation gr and each
// of its granules i below len(gr.gran):
//   - gran[i].h == 0: unmapped; else mapped with that handle, and either
//     committed (ev == nil) or waiting for ev (then listed in
//     Virtual.waiting, and handed if its handle now belongs to another
//     granule's mapping, which then unmaps it only);
//   - granules at and above len(gr.gran) are unmapped;
//   - committed counts the committed granules, held the mapped ones;
//   - freed: Deallocate decommitted every granule; the range is freed
//     when held reaches 0;
//   - stats.Mapped counts each handle once, whatever maps it, until the
//     last of its mappings is unmapped and it is released (a granule that
//     received it, unmapped while the granule that handed it on still
//     waits, leaves the release to that one); stats.Pending counts the
//     waiting granules not handed on; stats.Live the
//     committed bytes of growable allocations and the live bytes of the
//     others.

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// vgrow is a growable allocation of a Virtual resource.
type vgrow struct {
	p         gpu.DevicePtr
	limit     uint64
	gran      []vgran
	committed int
	held      int
	freed     bool
}

// vgran is one granule of a growable allocation.
type vgran struct {
	h      gpu.Physical
	ev     *vevent
	handed bool
}

// vwaiting names a waiting granule.
type vwaiting struct {
	gr *vgrow
	i  int
}

// vevent is an event that several waiting granules share.
type vevent struct {
	e    gpu.Event
	refs int
}

var _ Grower = (*Virtual)(nil)

// GrowGranularity is the device's minimum mapping granularity.
func (v *Virtual) GrowGranularity() int { return int(v.g) }

// AllocateGrowable reserves limit bytes of address space of their own and
// commits the first size bytes; see Grower.
func (v *Virtual) AllocateGrowable(size, limit int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc(virtualName, v.dev, size, s); zero || err != nil {
		if zero {
			return 0, fmt.Errorf("%s: allocate growable: size 0: %w", virtualName, ErrInvalidSize)
		}
		return 0, err
	}
	if limit < size || uint64(size)%v.g != 0 || uint64(limit)%v.g != 0 {
		return 0, fmt.Errorf("%s: allocate growable %d of %d bytes: not multiples of the granularity %d, or size above limit: %w",
			virtualName, size, limit, v.g, ErrInvalidSize)
	}
	if gpu.Capturing(s) {
		return 0, fmt.Errorf("%s: allocate growable on stream %d: %w", virtualName, s.ID(), ErrStreamCapturing)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return 0, fmt.Errorf("%s: allocate growable: %w", virtualName, ErrClosed)
	}
	reapErr := v.reapLocked()
	p, err := v.vm.ReserveAddress(uint64(limit), 0)
	if err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			return 0, v.oomLocked(size, s, "no address space for the growable range", errors.Join(reapErr, err))
		}
		return 0, fmt.Errorf("%s: allocate growable: reserve %d bytes: %w", virtualName, limit, err)
	}
	gr := &vgrow{p: p, limit: uint64(limit)}
	if err := v.commitLocked(gr, 0, size/int(v.g), s); err != nil {
		if ferr := v.vm.FreeAddress(p, uint64(limit)); ferr != nil {
			err = errors.Join(err, ferr)
		}
		if errors.Is(err, gpu.ErrOutOfMemory) {
			return 0, v.oomLocked(size, s, "the device is out of memory", errors.Join(reapErr, err))
		}
		return 0, fmt.Errorf("%s: allocate growable %d bytes: %w", virtualName, size, err)
	}
	if v.grows == nil {
		v.grows = make(map[gpu.DevicePtr]*vgrow)
	}
	v.grows[p] = gr
	v.stats.Reserved += uint64(limit)
	v.stats.Growable++
	return p, nil
}

// Commit maps physical memory at [p+off, p+off+n); see Grower.
func (v *Virtual) Commit(p gpu.DevicePtr, off, n int, s gpu.Stream) error {
	if err := checkStream(virtualName, opAllocate, v.dev, s); err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("%s: commit on stream %d: %w", virtualName, s.ID(), ErrStreamCapturing)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	gr, first, k, err := v.rangeLocked("commit", p, off, n)
	if err != nil {
		return err
	}
	for i := first; i < first+k && i < len(gr.gran); i++ {
		if g := gr.gran[i]; g.h != 0 && g.ev == nil {
			return fmt.Errorf("%s: commit [%#x, +%d): granule %d is committed: %w", virtualName, uint64(p)+uint64(off), n, i, gpu.ErrInvalidValue)
		}
	}
	reapErr := v.reapLocked()
	if err := v.commitLocked(gr, first, k, s); err != nil {
		if errors.Is(err, gpu.ErrOutOfMemory) {
			return v.oomLocked(n, s, "the device is out of memory", errors.Join(reapErr, err))
		}
		return fmt.Errorf("%s: commit [%#x, +%d): %w", virtualName, uint64(p)+uint64(off), n, err)
	}
	return nil
}

// rangeLocked checks that p is a live growable allocation and [off,
// off+n) a non-empty range of whole granules inside it, and returns the
// allocation and the range in granules.
func (v *Virtual) rangeLocked(op string, p gpu.DevicePtr, off, n int) (*vgrow, int, int, error) {
	gr := v.grows[p]
	if gr == nil || gr.freed {
		return nil, 0, 0, fmt.Errorf("%s: %s: %w", virtualName, op, pointerError(p, ErrUnknownPointer))
	}
	if off < 0 || n <= 0 || uint64(off)%v.g != 0 || uint64(n)%v.g != 0 || uint64(off)+uint64(n) > gr.limit {
		return nil, 0, 0, fmt.Errorf("%s: %s [%d, +%d) of %#x (%d bytes): not whole granules of %d inside it: %w",
			virtualName, op, off, n, uint64(p), gr.limit, v.g, ErrInvalidSize)
	}
	return gr, off / int(v.g), n / int(v.g), nil
}

// commitLocked commits granules [first, first+k) of gr, none of which is
// committed, for work on s: its own waiting granules there are taken back
// (once s is ordered after their decommit), the others get the memory of
// waiting granules elsewhere (after the same ordering) or new memory. On
// error nothing has changed, but for granules whose memory had gone
// elsewhere and that it waited for and unmapped (WaitForDecommits), as a
// reap would have.
func (v *Virtual) commitLocked(gr *vgrow, first, k int, s gpu.Stream) error {
	if need := first + k; need > len(gr.gran) {
		gr.gran = append(gr.gran, make([]vgran, need-len(gr.gran))...)
	}
	// Waiting granules in the range are still mapped there: take them
	// back. One whose memory went to another granule blocks the commit
	// until it is unmapped.
	var last *vevent
	for i := first; i < first+k; i++ {
		g := gr.gran[i]
		if g.h == 0 {
			continue
		}
		if g.handed {
			if !v.waitDecommits {
				return fmt.Errorf("granule %d of %#x: %w", i, uint64(gr.p), ErrGrowBlocked)
			}
			if err := v.unmapHandedLocked(gr, i); err != nil {
				return err
			}
			continue
		}
		if g.ev != last {
			if err := s.WaitEvent(g.ev.e); err != nil {
				return fmt.Errorf("order stream %d after a decommit: %w", s.ID(), err)
			}
			last = g.ev
		}
	}
	type mapped struct {
		i    int
		from vwaiting // gr nil: created
	}
	var done []mapped
	undo := func() error {
		var errs []error
		for _, m := range done {
			at := gr.p + gpu.DevicePtr(uint64(m.i)*v.g)
			errs = append(errs, v.vm.Unmap(at, v.g))
			h := gr.gran[m.i].h
			gr.gran[m.i] = vgran{}
			if m.from.gr == nil {
				errs = append(errs, v.vm.ReleasePhysical(h))
				v.stats.Mapped -= v.g
				v.usage.subReserved(int(v.g))
			} else {
				m.from.gr.gran[m.from.i].handed = false
				v.stats.Pending += v.g
				v.stats.Handoffs--
			}
		}
		return errors.Join(errs...)
	}
	for i := first; i < first+k; i++ {
		if gr.gran[i].h != 0 {
			continue
		}
		at := gr.p + gpu.DevicePtr(uint64(i)*v.g)
		// The memory of gr's own decommits first, then of another
		// range's, then new memory.
		h, from, err := v.handOffLocked(gr, first, k, true, s)
		if err == nil && from.gr == nil {
			h, from, err = v.handOffLocked(gr, first, k, false, s)
		}
		if err == nil && from.gr == nil {
			if h, err = v.vm.CreatePhysical(v.g); err != nil {
				err = fmt.Errorf("create: %w", err)
			}
		}
		if err != nil {
			return errors.Join(err, undo())
		}
		if err := v.vm.Map(at, v.g, h, 0); err != nil {
			if from.gr == nil {
				err = errors.Join(err, v.vm.ReleasePhysical(h))
			} else {
				from.gr.gran[from.i].handed = false
			}
			return errors.Join(fmt.Errorf("map: %w", err), undo())
		}
		if err := v.vm.SetAccess(at, v.g); err != nil {
			err = errors.Join(err, v.vm.Unmap(at, v.g))
			if from.gr == nil {
				err = errors.Join(err, v.vm.ReleasePhysical(h))
			} else {
				from.gr.gran[from.i].handed = false
			}
			return errors.Join(fmt.Errorf("set access: %w", err), undo())
		}
		gr.gran[i].h = h
		done = append(done, mapped{i, from})
		if from.gr == nil {
			v.stats.Mapped += v.g
			v.usage.addReserved(int(v.g))
		} else {
			v.stats.Pending -= v.g
			v.stats.Handoffs++
		}
	}
	// Commit: the taken-back granules stop waiting.
	for i := first; i < first+k; i++ {
		g := &gr.gran[i]
		if g.ev != nil {
			v.putWaitEvent(g.ev)
			g.ev = nil
			v.stats.Pending -= v.g
			v.dropWaiting(gr, i)
		} else {
			gr.held++
		}
	}
	gr.committed += k
	n := uint64(k) * v.g
	v.stats.PeakMapped = max(v.stats.PeakMapped, v.stats.Mapped)
	v.stats.Live += n
	v.stats.PeakLive = max(v.stats.PeakLive, v.stats.Live)
	v.usage.addUsed(int(n))
	return nil
}

// handOffLocked finds a waiting granule whose memory was not handed on
// yet, of gr (own) or of another allocation, but not among granules
// [first, first+k) of gr, which the commit takes back in place; it makes s
// wait on its decommit, marks it handed and returns its handle; from.gr is
// nil if there is none. It takes the granules decommitted first.
func (v *Virtual) handOffLocked(gr *vgrow, first, k int, own bool, s gpu.Stream) (gpu.Physical, vwaiting, error) {
	for _, w := range v.waiting {
		g := &w.gr.gran[w.i]
		if g.handed || (w.gr == gr) != own || (w.gr == gr && w.i >= first && w.i < first+k) {
			continue
		}
		if err := s.WaitEvent(g.ev.e); err != nil {
			return 0, vwaiting{}, fmt.Errorf("order stream %d after a decommit in %#x: %w", s.ID(), uint64(w.gr.p), err)
		}
		g.handed = true
		return g.h, w, nil
	}
	return 0, vwaiting{}, nil
}

// dropWaiting takes granule i of gr off the waiting list.
func (v *Virtual) dropWaiting(gr *vgrow, i int) {
	for j, w := range v.waiting {
		if w.gr == gr && w.i == i {
			v.waiting = append(v.waiting[:j], v.waiting[j+1:]...)
			return
		}
	}
}

// Decommit takes the memory of [p+off, p+off+n) in stream order; see
// Grower.
func (v *Virtual) Decommit(p gpu.DevicePtr, off, n int, s gpu.Stream) error {
	if err := checkStream(virtualName, opDeallocate, v.dev, s); err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("%s: decommit on stream %d: %w", virtualName, s.ID(), ErrStreamCapturing)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	gr, first, k, err := v.rangeLocked("decommit", p, off, n)
	if err != nil {
		return err
	}
	for i := first; i < first+k; i++ {
		if i >= len(gr.gran) || gr.gran[i].h == 0 || gr.gran[i].ev != nil {
			return fmt.Errorf("%s: decommit [%#x, +%d): granule %d is not committed: %w", virtualName, uint64(p)+uint64(off), n, i, gpu.ErrInvalidValue)
		}
	}
	if err := v.decommitLocked(gr, first, k, s); err != nil {
		return fmt.Errorf("%s: decommit [%#x, +%d): %w", virtualName, uint64(p)+uint64(off), n, err)
	}
	// A query per waiting granule; an error leaves them waiting and is
	// not this call's failure.
	_ = v.reapLocked()
	return nil
}

// decommitLocked makes the committed granules among [first, first+k) of
// gr wait for an event recorded on s now.
func (v *Virtual) decommitLocked(gr *vgrow, first, k int, s gpu.Stream) error {
	e, err := v.events.Get()
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	if err := e.Record(s); err != nil {
		v.events.Put(e)
		return fmt.Errorf("record on stream %d: %w", s.ID(), err)
	}
	ev := &vevent{e: e}
	for i := first; i < first+k && i < len(gr.gran); i++ {
		g := &gr.gran[i]
		if g.h == 0 || g.ev != nil {
			continue
		}
		g.ev = ev
		ev.refs++
		v.waiting = append(v.waiting, vwaiting{gr, i})
		gr.committed--
		v.stats.Live -= v.g
		v.stats.Pending += v.g
		v.usage.subUsed(int(v.g))
	}
	if ev.refs == 0 {
		v.events.Put(e)
	}
	return nil
}

// deallocateGrowable frees the growable allocation at p, if p is one:
// every committed granule waits for an event recorded on s, and the range
// is freed after the last is unmapped.
func (v *Virtual) deallocateGrowable(p gpu.DevicePtr, size int, s gpu.Stream) (bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	gr := v.grows[p]
	if gr == nil {
		return false, nil
	}
	if gr.freed {
		return true, fmt.Errorf("%s: deallocate: %w", virtualName, pointerError(p, ErrDoubleFree))
	}
	if uint64(size) != gr.limit {
		return true, fmt.Errorf("%s: deallocate: %w", virtualName, sizeMismatchError(p, int(gr.limit), size))
	}
	if err := v.decommitLocked(gr, 0, len(gr.gran), s); err != nil {
		return true, fmt.Errorf("%s: deallocate %#x: %w", virtualName, uint64(p), err)
	}
	gr.freed = true
	if gr.held == 0 {
		// Nothing was mapped any more: the range goes now.
		if err := v.vm.FreeAddress(gr.p, gr.limit); err != nil {
			return true, fmt.Errorf("%s: deallocate %#x: free the range: %w", virtualName, uint64(p), err)
		}
		delete(v.grows, gr.p)
		v.stats.Reserved -= gr.limit
		v.stats.Growable--
	}
	_ = v.reapLocked()
	return true, nil
}

func (v *Virtual) putWaitEvent(ev *vevent) {
	ev.refs--
	if ev.refs == 0 {
		v.events.Put(ev.e)
	}
}

// reapGrowablesLocked unmaps the waiting granules whose decommit
// completed and frees the ranges of freed allocations left with nothing
// mapped; with wait, it waits for each event first.
func (v *Virtual) reapGrowablesLocked(wait bool) error {
	var errs []error
	kept := v.waiting[:0]
	for _, w := range v.waiting {
		g := &w.gr.gran[w.i]
		var err error
		if wait {
			err = g.ev.e.Synchronize()
		} else {
			err = g.ev.e.Query()
		}
		if err == nil {
			at := w.gr.p + gpu.DevicePtr(uint64(w.i)*v.g)
			if err = v.vm.Unmap(at, v.g); err != nil {
				err = fmt.Errorf("unmap %#x: %w", uint64(at), err)
			}
		}
		if err != nil {
			if !errors.Is(err, gpu.ErrNotReady) {
				errs = append(errs, fmt.Errorf("%s: decommit of a granule of %#x: %w", virtualName, uint64(w.gr.p), err))
			}
			kept = append(kept, w)
			continue
		}
		if !g.handed {
			if d := v.donorLocked(g.h); d != nil {
				// The memory came from a granule whose unmap waits
				// still: that one gives it back when it is unmapped.
				d.handed = false
			} else {
				if err := v.vm.ReleasePhysical(g.h); err != nil {
					errs = append(errs, fmt.Errorf("%s: release the memory of a granule of %#x: %w", virtualName, uint64(w.gr.p), err))
				}
				v.stats.Mapped -= v.g
				v.stats.Pending -= v.g
				v.usage.subReserved(int(v.g))
			}
		}
		v.putWaitEvent(g.ev)
		*g = vgran{}
		w.gr.held--
		if w.gr.freed && w.gr.held == 0 {
			if err := v.vm.FreeAddress(w.gr.p, w.gr.limit); err != nil {
				errs = append(errs, fmt.Errorf("%s: free the range %#x: %w", virtualName, uint64(w.gr.p), err))
			} else {
				delete(v.grows, w.gr.p)
				v.stats.Reserved -= w.gr.limit
				v.stats.Growable--
			}
		}
	}
	clear(v.waiting[len(kept):])
	v.waiting = kept
	return errors.Join(errs...)
}

// donorLocked returns the waiting granule that handed its memory, handle
// h, on and still maps it, or nil.
func (v *Virtual) donorLocked(h gpu.Physical) *vgran {
	for _, w := range v.waiting {
		if g := &w.gr.gran[w.i]; g.handed && g.h == h {
			return g
		}
	}
	return nil
}

// liveGrowablesLocked counts the growable allocations not freed, and
// their committed bytes.
func (v *Virtual) liveGrowablesLocked() (n int, bytes uint64) {
	for _, gr := range v.grows {
		if !gr.freed {
			n++
			bytes += uint64(gr.committed) * v.g
		}
	}
	return n, bytes
}

// waitingEventsLocked lists the events the waiting granules wait for.
func (v *Virtual) waitingEventsLocked(evs []gpu.Event) []gpu.Event {
	for _, w := range v.waiting {
		evs = append(evs, w.gr.gran[w.i].ev.e)
	}
	return evs
}

// unmapHandedLocked waits on the host for the decommit of granule i of
// gr, whose memory went to another granule, and unmaps it
// (VirtualOptions.WaitForDecommits): the memory stays with the granule it
// went to, so nothing is released. On error nothing has changed.
func (v *Virtual) unmapHandedLocked(gr *vgrow, i int) error {
	g := &gr.gran[i]
	if err := g.ev.e.Synchronize(); err != nil {
		return fmt.Errorf("wait for the decommit of granule %d of %#x: %w", i, uint64(gr.p), err)
	}
	at := gr.p + gpu.DevicePtr(uint64(i)*v.g)
	if err := v.vm.Unmap(at, v.g); err != nil {
		return fmt.Errorf("unmap %#x: %w", uint64(at), err)
	}
	v.putWaitEvent(g.ev)
	*g = vgran{}
	gr.held--
	v.dropWaiting(gr, i)
	v.stats.HostWaits++
	return nil
}
