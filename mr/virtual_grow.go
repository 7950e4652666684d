// Virtual's growable allocations (Grower): a reserved range each, with
// physical memory committed and decommitted in place.
//
// AllocateGrowable reserves a range of its own (cuMemAddressReserve) of
// the limit asked for and commits its first granules; Commit and Decommit
// map and unmap any granules of it. The driver's cost is per physical
// allocation, not per byte: on an H100 (driver 580) creating, mapping and
// making accessible one allocation takes about 50 µs whether it holds one
// 2 MiB granule or 512 of them, and unmapping and releasing it about 40
// µs; one cuMemSetAccess or cuMemUnmap over several mappings costs what
// the mappings cost one by one. So a Commit maps each run of addresses it
// commits with as few allocations as it can: one new allocation (a piece)
// for the part no decommitted memory serves, so that a growth by a
// gigabyte is one piece, not 512.
//
// The price is that a piece is unmapped whole: the driver maps an
// allocation only whole (an offset other than 0 is CUDA_ERROR_NOT_SUPPORTED)
// and unmaps whole mappings only. A Decommit of part of a piece makes its
// granules decommitted for the caller, but their memory stays mapped
// (idle, counted in Stats().Mapped, Pending and Idle) until every granule
// of the piece is decommitted; a later Commit there takes them back
// without a driver call. Memory is given back to the device per piece.
//
// A piece whose granules are all decommitted waits, still mapped, for the
// events recorded on the decommitting streams; a later call that finds
// them complete (a query, never a host wait) unmaps it and releases its
// physical memory. Until then its memory can go to another commit without
// a trip through the device: a Commit first takes back the decommitted
// granules it covers (still mapped where it commits); for the rest it
// takes whole waiting pieces that fit in what is left of the run, of the
// same range first, then of others, largest first, and maps each after
// making its stream wait on the decommits' events (the allocation is then
// mapped at both places, and only the new owner's work, ordered after the
// decommit, uses it); only what no waiting piece fills is new memory. A
// piece's old address stays mapped until its decommits' work completes,
// and its range cannot commit there meanwhile (ErrGrowBlocked; the Pool
// places the request elsewhere).
//
// Whether a commit meets such addresses depends on how far the device has
// got with the decommit's work when the commit comes, and a refused commit
// changes where the Pool places its blocks from then on; so over the same
// requests a Pool's layout and peaks vary from run to run. With
// VirtualOptions.WaitForDecommits a commit there waits on the host for
// the decommits' events and unmaps the piece instead
// (unmapHandedLocked): every answer of Commit then follows from the calls
// alone, and only the physical memory still waiting (Stats().Pending, and
// PeakMapped with it) depends on the device's progress.
//
// Invariants (under Virtual.mu), for each growable allocation gr and each
// of its granules i below len(gr.gran):
//   - gran[i].pc == nil: unmapped; else mapped as part of piece pc, which
//     covers granules [pc.first, pc.first+pc.n) of gr and no others, and
//     either committed (ev == nil) or decommitted, its decommit's event ev
//     held;
//   - granules at and above len(gr.gran) are unmapped;
//   - pc.live counts its committed granules; a piece with live == 0 is in
//     Virtual.waiting (waiting set), and handed if its allocation now
//     belongs to another piece's mapping, which then unmaps it only;
//   - committed counts the committed granules of gr, held its pieces;
//   - freed: Deallocate decommitted every granule; the range is freed
//     when held reaches 0;
//   - stats.Mapped counts each allocation once, whatever maps it, until
//     the last of its mappings is unmapped and it is released (a piece
//     that received it, unmapped while the piece that handed it on still
//     waits, leaves the release to that one); stats.Pending counts the
//     decommitted granules of pieces not handed on, stats.Idle those of
//     pieces with committed granules left; stats.Live the committed bytes
//     of growable allocations and the live bytes of the others.

package mr

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

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
	pc *vpiece
	ev *vevent
}

// vpiece is one physical allocation mapped whole at granules [first,
// first+n) of gr.
type vpiece struct {
	gr       *vgrow
	first, n int
	h        gpu.Physical
	live     int
	waiting  bool
	handed   bool
}

// vevent is an event that several decommitted granules share.
type vevent struct {
	e    gpu.Event
	refs int
}

var _ Grower = (*Virtual)(nil)

// GrowGranularity is the device's minimum mapping granularity.
func (v *Virtual) GrowGranularity() int { return int(v.g) }

// DefaultVirtualPiecesPerCommit is the default
// VirtualOptions.PiecesPerCommit. On the recorded PyTorch traces a Pool
// over Virtual reaches the same peaks with it as with one granule a piece
// (TestPoolVirtualTraces), and a commit of 1 GiB maps 32 pieces, not 512.
const DefaultVirtualPiecesPerCommit = 32

// pieceFor is the size in granules of the pieces of new memory of a
// commit of k granules: the largest power of two not above k/perCommit.
func pieceFor(k, perCommit int) int {
	return 1 << (bits.Len(uint(max(k/perCommit, 1))) - 1)
}

// DecommitSpan returns the largest part [lo, hi) of [off, off+n) of the
// growable allocation at p whose Decommit would give all its memory back
// to the device: the pieces it covers lie inside it, but for granules
// already decommitted. Every granule of [off, off+n) must be committed.
// It returns lo == hi if there is none, or if p or the range is not valid.
func (v *Virtual) DecommitSpan(p gpu.DevicePtr, off, n int) (lo, hi int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	gr, first, k, err := v.rangeLocked("decommit span", p, off, n)
	if err != nil {
		return 0, 0
	}
	end := first + k
	if end > len(gr.gran) {
		return 0, 0
	}
	for i := first; i < end; i++ {
		if g := gr.gran[i]; g.pc == nil || g.ev != nil {
			return 0, 0
		}
	}
	// committedIn is how many of pc's committed granules lie in the range.
	committedIn := func(pc *vpiece) int { return min(pc.first+pc.n, end) - max(pc.first, first) }
	a, z := first, end
	if pc := gr.gran[first].pc; pc.first < first && pc.live != committedIn(pc) {
		a = pc.first + pc.n
	}
	if pc := gr.gran[end-1].pc; pc.first+pc.n > end && pc.live != committedIn(pc) {
		z = pc.first
	}
	if z <= a {
		return 0, 0
	}
	return a * int(v.g), z * int(v.g)
}

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
		if g := gr.gran[i]; g.pc != nil && g.ev == nil {
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

// at is the address of granule i of gr.
func (v *Virtual) at(gr *vgrow, i int) gpu.DevicePtr { return gr.p + gpu.DevicePtr(uint64(i)*v.g) }

// setLive sets pc.live, keeping stats.Idle: the decommitted granules of a
// piece with committed ones left.
func (v *Virtual) setLive(pc *vpiece, live int) {
	idle := func(l int) uint64 {
		if l == 0 {
			return 0
		}
		return uint64(pc.n-l) * v.g
	}
	v.stats.Idle += idle(live) - idle(pc.live)
	pc.live = live
}

// vmapped is a piece a commit mapped: from is the waiting piece whose
// allocation it took, nil if created.
type vmapped struct {
	pc, from *vpiece
}

// commitLocked commits granules [first, first+k) of gr, none of which is
// committed, for work on s: its own decommitted granules there are taken
// back (once s is ordered after their decommit), each run of the others
// gets waiting pieces that fit (after the same ordering) and one new
// allocation for the rest. On error nothing has changed, but for pieces
// whose memory had gone elsewhere and that it waited for and unmapped
// (WaitForDecommits), as a reap would have.
func (v *Virtual) commitLocked(gr *vgrow, first, k int, s gpu.Stream) error {
	var start time.Time
	if vmmTraceOn {
		start = time.Now()
	}
	if need := first + k; need > len(gr.gran) {
		gr.gran = append(gr.gran, make([]vgran, need-len(gr.gran))...)
	}
	// Decommitted granules in the range are still mapped there: take them
	// back. One whose memory went to another piece blocks the commit until
	// it is unmapped.
	var last *vevent
	for i := first; i < first+k; i++ {
		g := gr.gran[i]
		if g.pc == nil {
			continue
		}
		if g.pc.handed {
			if !v.waitDecommits {
				return fmt.Errorf("granule %d of %#x: %w", i, uint64(gr.p), ErrGrowBlocked)
			}
			if err := v.unmapHandedLocked(g.pc); err != nil {
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
	piece := pieceFor(k, v.perCommit)
	var done []vmapped
	undo := func() error {
		var errs []error
		for _, m := range done {
			errs = append(errs, v.vm.Unmap(v.at(gr, m.pc.first), uint64(m.pc.n)*v.g))
			for i := m.pc.first; i < m.pc.first+m.pc.n; i++ {
				gr.gran[i] = vgran{}
			}
			if m.from == nil {
				errs = append(errs, v.vm.ReleasePhysical(m.pc.h))
			} else {
				m.from.handed = false
			}
		}
		return errors.Join(errs...)
	}
	for i := first; i < first+k; {
		if gr.gran[i].pc != nil {
			i++
			continue
		}
		end := i
		for end < first+k && gr.gran[end].pc == nil {
			end++
		}
		// The run [i, end): waiting pieces that fit, then new memory.
		for at := i; at < end; {
			from, err := v.handOffLocked(gr, first, k, end-at, s)
			if err != nil {
				return errors.Join(err, undo())
			}
			pc := &vpiece{gr: gr, first: at, n: min(end-at, piece)}
			if from != nil {
				pc.n, pc.h = from.n, from.h
			} else if pc.h, err = v.createPhysical(uint64(pc.n) * v.g); err != nil {
				return errors.Join(fmt.Errorf("create: %w", err), undo())
			}
			if err := v.vm.Map(v.at(gr, at), uint64(pc.n)*v.g, pc.h, 0); err != nil {
				if from == nil {
					err = errors.Join(err, v.vm.ReleasePhysical(pc.h))
				} else {
					from.handed = false
				}
				return errors.Join(fmt.Errorf("map: %w", err), undo())
			}
			for j := at; j < at+pc.n; j++ {
				gr.gran[j].pc = pc
			}
			done = append(done, vmapped{pc, from})
			at += pc.n
		}
		// One call for the run: the driver's cost is per mapping anyway.
		if err := v.vm.SetAccess(v.at(gr, i), uint64(end-i)*v.g); err != nil {
			return errors.Join(fmt.Errorf("set access: %w", err), undo())
		}
		i = end
	}
	for _, m := range done {
		gr.held++
		n := uint64(m.pc.n) * v.g
		if m.from == nil {
			v.stats.Mapped += n
			v.usage.addReserved(int(n))
		} else {
			v.stats.Pending -= n
			v.stats.Handoffs += uint64(m.pc.n)
		}
	}
	// Commit: the taken-back granules stop waiting, every piece gains its
	// committed granules.
	for i := first; i < first+k; i++ {
		g := &gr.gran[i]
		if g.ev != nil {
			v.putWaitEvent(g.ev)
			g.ev = nil
			v.stats.Pending -= v.g
		}
		if g.pc.waiting {
			g.pc.waiting = false
			v.dropWaiting(g.pc)
		}
		v.setLive(g.pc, g.pc.live+1)
	}
	if vmmTraceOn {
		vmmTrace("commit", k, len(done), start)
	}
	gr.committed += k
	n := uint64(k) * v.g
	v.stats.PeakMapped = max(v.stats.PeakMapped, v.stats.Mapped)
	v.stats.Live += n
	v.stats.PeakLive = max(v.stats.PeakLive, v.stats.Live)
	v.usage.addUsed(int(n))
	return nil
}

// handOffLocked finds the largest waiting piece of at most room granules
// whose memory was not handed on yet, of gr first, then of another
// allocation, but not one covering granules [first, first+k) of gr, which
// the commit takes back in place; it makes s wait on its decommits, marks
// it handed and returns it, or nil if there is none.
func (v *Virtual) handOffLocked(gr *vgrow, first, k, room int, s gpu.Stream) (*vpiece, error) {
	var best *vpiece
	for _, pc := range v.waiting {
		if pc.handed || pc.n > room || pc.gr == gr && pc.first < first+k && pc.first+pc.n > first {
			continue
		}
		if best == nil || (pc.gr == gr) != (best.gr == gr) && pc.gr == gr ||
			(pc.gr == gr) == (best.gr == gr) && pc.n > best.n {
			best = pc
		}
	}
	if best == nil {
		return nil, nil
	}
	var last *vevent
	for i := best.first; i < best.first+best.n; i++ {
		if ev := best.gr.gran[i].ev; ev != last {
			if err := s.WaitEvent(ev.e); err != nil {
				return nil, fmt.Errorf("order stream %d after a decommit in %#x: %w", s.ID(), uint64(best.gr.p), err)
			}
			last = ev
		}
	}
	best.handed = true
	return best, nil
}

// dropWaiting takes pc off the waiting list.
func (v *Virtual) dropWaiting(pc *vpiece) {
	for j, w := range v.waiting {
		if w == pc {
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
		if i >= len(gr.gran) || gr.gran[i].pc == nil || gr.gran[i].ev != nil {
			return fmt.Errorf("%s: decommit [%#x, +%d): granule %d is not committed: %w", virtualName, uint64(p)+uint64(off), n, i, gpu.ErrInvalidValue)
		}
	}
	if err := v.decommitLocked(gr, first, k, s); err != nil {
		return fmt.Errorf("%s: decommit [%#x, +%d): %w", virtualName, uint64(p)+uint64(off), n, err)
	}
	// A query per waiting piece; an error leaves them waiting and is not
	// this call's failure.
	_ = v.reapLocked()
	return nil
}

// decommitLocked makes the committed granules among [first, first+k) of
// gr wait for an event recorded on s now; a piece left with no committed
// granule joins the waiting list.
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
		if g.pc == nil || g.ev != nil {
			continue
		}
		g.ev = ev
		ev.refs++
		v.setLive(g.pc, g.pc.live-1)
		if g.pc.live == 0 {
			g.pc.waiting = true
			v.waiting = append(v.waiting, g.pc)
		}
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
// is freed after the last piece is unmapped.
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

// pieceDoneLocked reports whether the decommits of every granule of
// waiting piece pc have completed, querying each of their events (with
// wait, waiting for each first); nil when they have, an error matching
// gpu.ErrNotReady when one has not.
func (v *Virtual) pieceDoneLocked(pc *vpiece, wait bool) error {
	var last *vevent
	for i := pc.first; i < pc.first+pc.n; i++ {
		ev := pc.gr.gran[i].ev
		if ev == last {
			continue
		}
		last = ev
		var err error
		if wait {
			err = ev.e.Synchronize()
		} else {
			err = ev.e.Query()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unmapPieceLocked unmaps waiting piece pc, whose decommits completed,
// and forgets it; its allocation is released unless it was handed on or
// came from a piece still mapped elsewhere. unmapped is false if the
// unmap failed (then nothing has changed); an error with unmapped true is
// a failed release or free of the range after it.
func (v *Virtual) unmapPieceLocked(pc *vpiece) (unmapped bool, err error) {
	gr := pc.gr
	if err := v.vm.Unmap(v.at(gr, pc.first), uint64(pc.n)*v.g); err != nil {
		return false, fmt.Errorf("unmap %#x: %w", uint64(v.at(gr, pc.first)), err)
	}
	if !pc.handed {
		n := uint64(pc.n) * v.g
		if d := v.donorLocked(pc.h); d != nil {
			// The memory came from a piece whose unmap waits still:
			// that one gives it back when it is unmapped.
			d.handed = false
		} else {
			v.forgetExportLocked(pc.h)
			if rerr := v.vm.ReleasePhysical(pc.h); rerr != nil {
				err = fmt.Errorf("release the memory of a piece of %#x: %w", uint64(gr.p), rerr)
			}
			v.stats.Mapped -= n
			v.stats.Pending -= n
			v.usage.subReserved(int(n))
		}
	}
	for i := pc.first; i < pc.first+pc.n; i++ {
		v.putWaitEvent(gr.gran[i].ev)
		gr.gran[i] = vgran{}
	}
	// Dead: a reap in progress still sees it in the waiting list.
	pc.h, pc.handed = 0, false
	gr.held--
	if gr.freed && gr.held == 0 {
		if ferr := v.vm.FreeAddress(gr.p, gr.limit); ferr != nil {
			err = errors.Join(err, fmt.Errorf("free the range %#x: %w", uint64(gr.p), ferr))
		} else {
			delete(v.grows, gr.p)
			v.stats.Reserved -= gr.limit
			v.stats.Growable--
		}
	}
	return true, err
}

// reapGrowablesLocked unmaps the waiting pieces whose decommits completed
// and frees the ranges of freed allocations left with nothing mapped;
// with wait, it waits for each event first.
func (v *Virtual) reapGrowablesLocked(wait bool) error {
	var start time.Time
	var pieces, granules int
	if vmmTraceOn {
		start = time.Now()
		defer func() {
			if pieces > 0 {
				vmmTrace("unmap", granules, pieces, start)
			}
		}()
	}
	var errs []error
	kept := v.waiting[:0]
	for _, pc := range v.waiting {
		err := v.pieceDoneLocked(pc, wait)
		if err == nil {
			var unmapped bool
			n := pc.n
			if unmapped, err = v.unmapPieceLocked(pc); unmapped {
				pieces, granules = pieces+1, granules+n
				pc.waiting = false
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", virtualName, err))
				}
				continue
			}
		}
		if !errors.Is(err, gpu.ErrNotReady) {
			errs = append(errs, fmt.Errorf("%s: decommit of a piece of %#x: %w", virtualName, uint64(pc.gr.p), err))
		}
		kept = append(kept, pc)
	}
	clear(v.waiting[len(kept):])
	v.waiting = kept
	return errors.Join(errs...)
}

// donorLocked returns the waiting piece that handed its allocation, h,
// on and still maps it, or nil.
func (v *Virtual) donorLocked(h gpu.Physical) *vpiece {
	for _, pc := range v.waiting {
		if pc.handed && pc.h == h {
			return pc
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

// waitingEventsLocked lists the events the waiting pieces wait for.
func (v *Virtual) waitingEventsLocked(evs []gpu.Event) []gpu.Event {
	for _, pc := range v.waiting {
		var last *vevent
		for i := pc.first; i < pc.first+pc.n; i++ {
			if ev := pc.gr.gran[i].ev; ev != last {
				evs = append(evs, ev.e)
				last = ev
			}
		}
	}
	return evs
}

// unmapHandedLocked waits on the host for the decommits of waiting piece
// pc, whose memory went to another piece, and unmaps it
// (VirtualOptions.WaitForDecommits): the memory stays with the piece it
// went to, so nothing is released. On error nothing has changed.
// The wait is bounded by VirtualOptions.DecommitWaitLimit: past it the
// commit is refused (ErrGrowBlocked), as without WaitForDecommits.
func (v *Virtual) unmapHandedLocked(pc *vpiece) error {
	if err := v.waitPieceLocked(pc); err != nil {
		return fmt.Errorf("wait for the decommit of granules %d-%d of %#x: %w", pc.first, pc.first+pc.n-1, uint64(pc.gr.p), err)
	}
	unmapped, err := v.unmapPieceLocked(pc)
	if !unmapped {
		return err
	}
	pc.waiting = false
	v.dropWaiting(pc)
	v.stats.HostWaits += uint64(pc.n)
	return err
}

// waitPieceLocked waits on the host for the decommits of waiting piece pc,
// at most v.waitLimit if set; a wait that reaches it returns an error
// matching ErrGrowBlocked and context.DeadlineExceeded.
func (v *Virtual) waitPieceLocked(pc *vpiece) error {
	if v.waitLimit <= 0 {
		return v.pieceDoneLocked(pc, true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), v.waitLimit)
	defer cancel()
	var last *vevent
	for i := pc.first; i < pc.first+pc.n; i++ {
		ev := pc.gr.gran[i].ev
		if ev == last {
			continue
		}
		last = ev
		if err := poll(ctx, ev.e.Query); err != nil {
			if ctx.Err() != nil {
				v.stats.WaitsRefused++
				return fmt.Errorf("waited %v: %w", v.waitLimit, errors.Join(ErrGrowBlocked, err))
			}
			return err
		}
	}
	return nil
}
