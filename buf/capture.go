// Block-use tracking across CUDA graph capture (the rules are in the
// package comment, "CUDA graphs").
//
// A use on a capturing stream does not run: it becomes part of a graph
// that runs at every launch, on whatever stream the launch names. So a
// buffer keeps, for each capture that uses it, a second tracking state
// (graphUse.local) with the same rules as the first but holding events
// recorded inside that capture only: uses inside the capture wait on each
// other there, and those waits are the graph's edges. Nothing inside
// waits on the state outside (the driver refuses a capturing stream
// waiting on an event recorded outside, and invalidates the capture), and
// nothing outside waits on the state inside (an outside stream waiting on
// a captured event would join the capture). The two meet at each launch:
// the capture's hook (captureUses, an mr.CaptureHook) makes the launch a
// use of every buffer the graph touches, with the access the graph makes
// of it, on the launch stream: the stream waits on the buffer's outside
// state (the writer before the capture, the uses after earlier launches,
// uses in between), the graph is launched, and an event recorded after it
// becomes the buffer's last write or a read. That is why a capture must be
// begun with mr.BeginCapture and its graph launched through the executable
// made from Capture.End's graph.
//
// Memory and lifetimes. A buffer allocated inside a capture (born in it)
// is the graph's: its outside state starts empty, and the first launch
// writes it. Memory a graph uses outlives the program's Close as long as
// the graph may run: closing, on any stream, a buffer that a graph of a
// capture not yet released uses (other than the graph that allocated it)
// closes it for the program at once, and frees the memory at the last
// such capture's Release, on Release's stream, after every use recorded
// outside. A buffer born in a capture and closed inside it is freed there
// (a node of the graph); closed outside, it is freed at once (an output of
// the graph, by mr's rules); it is closed for the program when its capture
// is released, whose memory it was. Resize refuses while a graph that is
// not released uses the buffer (the graph keeps the old address).
//
// Locks: Buffer.mu before captureUses.mu before the capture's own (mr
// calls the hooks with none of its locks held); usesMu is taken with at
// most Buffer.mu held. A hook never holds captureUses.mu while it locks
// buffers, and locks them in creation order, as UseAll does.

package buf

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// graphUse is what a buffer keeps of one capture that uses it; guarded
// by the buffer's mu.
type graphUse struct {
	cu     *captureUses
	local  tracking // uses inside the capture; emptied when it ends
	access Access   // how the graph uses the buffer (0: it only closed it)
	born   bool     // the buffer was allocated in the capture
}

// captureUses is the buffers one capture uses, and its hook.
type captureUses struct {
	id uint64

	mu      sync.Mutex
	members []*core // in creation order once the capture ended
	ended   bool
}

var (
	usesMu   sync.Mutex
	usesByID = make(map[uint64]*captureUses) // captures running
)

// usesOf returns the captureUses of capture id, which s is part of,
// adding its hook to the capture on first use.
func usesOf(s gpu.Stream, id uint64) (*captureUses, error) {
	usesMu.Lock()
	defer usesMu.Unlock()
	if cu := usesByID[id]; cu != nil {
		return cu, nil
	}
	c := mr.CaptureOf(s)
	if c == nil || c.ID() != id {
		return nil, fmt.Errorf("stream %d is in capture %d, which was not begun with mr.BeginCapture: its launches could not be ordered with the buffer's other uses: %w",
			s.ID(), id, mr.ErrStreamCapturing)
	}
	cu := &captureUses{id: id}
	if err := c.AddHook(cu); err != nil {
		return nil, err
	}
	usesByID[id] = cu
	return cu, nil
}

// graphUseOn returns the buffer's state for the capture s is part of,
// making it on first use; b.mu is held.
func (b *core) graphUseOn(s gpu.Stream) (*graphUse, error) {
	id := gpu.CaptureID(s)
	for _, g := range b.graphs {
		if g.cu.id == id {
			return g, nil
		}
	}
	cu, err := usesOf(s, id)
	if err != nil {
		return nil, err
	}
	cu.mu.Lock()
	defer cu.mu.Unlock()
	if cu.ended {
		return nil, fmt.Errorf("stream %d: capture %d: %w", s.ID(), id, mr.ErrCaptureEnded)
	}
	cu.members = append(cu.members, b)
	g := &graphUse{cu: cu}
	b.graphs = append(b.graphs, g)
	return g, nil
}

// graphUseOf returns the buffer's state for cu, or nil; b.mu is held.
func (b *core) graphUseOf(cu *captureUses) *graphUse {
	for _, g := range b.graphs {
		if g.cu == cu {
			return g
		}
	}
	return nil
}

// trackingOn is the tracking state a use on s waits on and is recorded
// in: the buffer's own, or, on a capturing stream, that of the capture;
// b.mu is held.
func (b *core) trackingOn(s gpu.Stream) (*tracking, error) {
	if gpu.CaptureID(s) == 0 {
		return &b.track, nil
	}
	g, err := b.graphUseOn(s)
	if err != nil {
		return nil, err
	}
	return &g.local, nil
}

// bornIn makes a buffer just allocated on capturing stream s the
// capture's: written there by the allocation (lazily), unwritten outside.
func (b *core) bornIn(s gpu.Stream) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.graphUseOn(s)
	if err != nil {
		return err
	}
	g.born, g.access = true, Write
	g.local.allocated(s)
	b.track = tracking{}
	return nil
}

// closeInGraphs is Close for a buffer that a capture uses or that is
// closed on a capturing stream; done is false when the ordinary Close
// applies. b.mu is held, b is tracked.
func (b *core) closeInGraphs(sn *snapshot, s gpu.Stream) (done bool, err error) {
	if gpu.CaptureID(s) != 0 {
		g, err := b.graphUseOn(s)
		if err != nil {
			return true, err
		}
		if g.born {
			// The capture's memory: the free is a node of the graph,
			// after the uses inside it.
			if err := b.waitAllIn(&g.local, s); err != nil {
				return true, err
			}
			if err := b.res.Deallocate(sn.ptr, sn.size, s); err != nil {
				return true, err
			}
			g.local.release(b.events)
			b.track.release(b.events)
			b.cur.Store(nil)
			return true, nil
		}
		// Memory from before the capture, which every replay uses.
		b.deferred = sn
		b.cur.Store(nil)
		return true, nil
	}
	for _, g := range b.graphs {
		if !g.born {
			b.deferred = sn
			b.cur.Store(nil)
			return true, nil
		}
	}
	return false, nil
}

// CaptureEnded drops the tracking inside the capture: its events were
// recorded in a graph and are nobody's to wait on.
func (cu *captureUses) CaptureEnded(graph bool) {
	usesMu.Lock()
	delete(usesByID, cu.id)
	usesMu.Unlock()
	cu.mu.Lock()
	cu.ended = true
	slices.SortFunc(cu.members, func(a, b *core) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	members := cu.members
	cu.mu.Unlock()
	for _, b := range members {
		b.mu.Lock()
		if g := b.graphUseOf(cu); g != nil {
			g.local.release(b.events)
		}
		b.mu.Unlock()
	}
}

// BeforeLaunch makes the launch on s a use of every buffer the graph
// touches: s waits as a use with the graph's access would, and after the
// launch an event recorded on s is the use. The buffers stay locked from
// the waits to the record, so no use on another goroutine falls between.
func (cu *captureUses) BeforeLaunch(s gpu.Stream) (func(bool), error) {
	if s == nil {
		return nil, fmt.Errorf("buf: launch: nil stream: %w", gpu.ErrInvalidHandle)
	}
	if gpu.Capturing(s) {
		return nil, fmt.Errorf("buf: launch graph of capture %d into a capture on stream %d: %w", cu.id, s.ID(), mr.ErrStreamCapturing)
	}
	cu.mu.Lock()
	members := cu.members
	cu.mu.Unlock()
	type used struct {
		b *core
		a Access
	}
	var locked []*core
	var uses []used
	unlock := func() {
		for i := len(locked) - 1; i >= 0; i-- {
			locked[i].mu.Unlock()
		}
	}
	for _, b := range members {
		b.mu.Lock()
		locked = append(locked, b)
		g := b.graphUseOf(cu)
		if g == nil || b.untracked || g.access == 0 || (b.cur.Load() == nil && b.deferred == nil) {
			continue
		}
		if err := checkStream(b.dev, s); err != nil {
			unlock()
			return nil, fmt.Errorf("buf: launch graph of capture %d: %w", cu.id, err)
		}
		var err error
		if g.access.Writes() {
			err = b.waitAllIn(&b.track, s)
		} else {
			err = b.waitOn(&b.track.lastWrite, s)
		}
		if err != nil {
			unlock()
			return nil, fmt.Errorf("buf: launch graph of capture %d on stream %d: order after the uses of buffer %d: %w", cu.id, s.ID(), b.id, err)
		}
		uses = append(uses, used{b, g.access})
	}
	return func(launched bool) {
		if launched {
			for _, u := range uses {
				u.b.finishIn(&u.b.track, s, u.a)
			}
		}
		unlock()
	}, nil
}

// Released ends the capture's part in its buffers: a buffer it allocated
// is closed (its memory went with the capture), and a buffer the program
// closed while graphs used it is freed on s once no other capture that is
// not released uses it.
func (cu *captureUses) Released(s gpu.Stream) error {
	cu.mu.Lock()
	members := cu.members
	cu.members = nil
	cu.mu.Unlock()
	var errs []error
	for _, b := range members {
		if err := b.releasedBy(cu, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b *core) releasedBy(cu *captureUses, s gpu.Stream) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.IndexFunc(b.graphs, func(g *graphUse) bool { return g.cu == cu })
	if i < 0 {
		return nil
	}
	g := b.graphs[i]
	b.graphs = slices.Delete(b.graphs, i, i+1)
	g.local.release(b.events)
	if g.born {
		b.deferred = nil
		if b.cur.Load() != nil {
			b.track.release(b.events)
			b.cur.Store(nil)
		}
		return nil
	}
	if len(b.graphs) > 0 || b.deferred == nil {
		return nil
	}
	sn := b.deferred
	if err := checkStream(b.dev, s); err != nil {
		return fmt.Errorf("buf: free %#x after capture %d: %w", uint64(sn.ptr), cu.id, err)
	}
	if err := b.waitAllIn(&b.track, s); err != nil {
		return fmt.Errorf("buf: free %#x after capture %d: %w", uint64(sn.ptr), cu.id, err)
	}
	if err := b.res.Deallocate(sn.ptr, sn.size, s); err != nil {
		return fmt.Errorf("buf: free %#x after capture %d: %w", uint64(sn.ptr), cu.id, err)
	}
	b.deferred = nil
	b.track.release(b.events)
	return nil
}
