// GraphPool: the private memory that suballocators serve to captures (the
// rules are in capture.go).
//
// A GraphPool holds, per resource that served one of its captures, a
// private pool: chunks taken from that resource's upstream, cut into
// blocks. A request inside a capture takes the best-fitting free block it
// may use, splitting it, or a new chunk; a free inside the capture puts
// the block back, remembering the capture and the stream that freed it.
// A block freed in the current capture goes to a request on the same
// stream at once (stream order is graph order) and to one on another
// stream of the capture after a captured event wait on the stream that
// freed it and on the one that allocated it (edges of the graph); a block
// freed outside any capture or in an earlier capture of the pool goes to
// any request (the promise of pools shared by graphs: they replay in
// capture order, one at a time). Free neighbours freed alike coalesce.
//
// Chunks are allocated from the upstream on a stream of the GraphPool's
// own, which is synchronized before the memory is used, so the graph's
// nodes on any stream may use it; both calls run inside gpu.RelaxCapture,
// which a global-mode capture requires. Nothing is given back before
// Release, which frees every chunk upstream on the caller's stream.
//
// Invariants: a block is in exactly one of live and free; free blocks of
// a chunk never overlap live ones; the reserved bytes are the sum of the
// chunks, the used bytes the sum of live blocks' sizes. All state is
// guarded by GraphPool.mu. It is held across the calls to upstreams
// (growth, Release) and the driver calls of captured waits, none of which
// calls back into the capture wing: their streams do not capture, and the
// pointers they free are the upstreams' own.

package mr

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// graphPoolGranularity is what private chunks are rounded up to.
const graphPoolGranularity = 2 << 20

// graphPools holds every GraphPool that served a capture and is not
// released, for freeOutsideCapture.
var graphPools sync.Map // *GraphPool -> struct{}

// GraphPool is private memory for captures (see capture.go). The zero
// value is not usable; make one with NewGraphPool to share it between
// captures (CaptureOptions.Pool). It is safe for concurrent use.
type GraphPool struct {
	dev gpu.Device

	mu        sync.Mutex
	active    *Capture // the capture drawing from it now
	captures  []*Capture
	privs     map[Resource]*privatePool
	internal  gpu.Stream // where chunks are allocated
	events    []gpu.Event
	strangers map[uint64]gpu.Stream // streams that freed its blocks outside captures
	released  bool
	usage     usageMeter
}

// NewGraphPool returns an empty GraphPool for captures on dev.
func NewGraphPool(dev gpu.Device) *GraphPool {
	return &GraphPool{dev: dev, privs: make(map[Resource]*privatePool), strangers: make(map[uint64]gpu.Stream)}
}

// Usage is what the GraphPool holds: Reserved the chunks taken from
// upstreams, Used the blocks allocated and not freed.
func (gp *GraphPool) Usage() Usage { return gp.usage.snapshot() }

func (gp *GraphPool) begin(c *Capture) error {
	gp.mu.Lock()
	defer gp.mu.Unlock()
	switch {
	case gp.released:
		return fmt.Errorf("mr: begin capture: graph pool: %w", ErrReleased)
	case gp.active != nil:
		return fmt.Errorf("mr: begin capture: graph pool serves capture %d: %w", gp.active.id, ErrCaptureActive)
	}
	gp.active = c
	gp.captures = append(gp.captures, c)
	graphPools.Store(gp, struct{}{})
	return nil
}

func (gp *GraphPool) end(c *Capture) {
	gp.mu.Lock()
	if gp.active == c {
		gp.active = nil
	}
	gp.mu.Unlock()
}

// Release gives every chunk back to its upstream, in stream order on s,
// after s waits on the streams that freed blocks of the pool outside
// captures. It refuses (ErrCaptureActive, ErrGraphInUse) while a capture
// draws from the pool or one of its captures is not released (its own
// capture excepted, whose Release calls this). s must not be capturing.
func (gp *GraphPool) Release(s gpu.Stream) error {
	if err := checkStream("mr", "release graph pool", gp.dev, s); err != nil {
		return err
	}
	if gpu.Capturing(s) {
		return fmt.Errorf("mr: release graph pool on stream %d: %w", s.ID(), ErrStreamCapturing)
	}
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if gp.released {
		return fmt.Errorf("mr: release graph pool: %w", ErrReleased)
	}
	if gp.active != nil {
		return fmt.Errorf("mr: release graph pool: capture %d: %w", gp.active.id, ErrCaptureActive)
	}
	for _, c := range gp.captures {
		if !c.ownGP && !c.isReleased() {
			return fmt.Errorf("mr: release graph pool: capture %d not released: %w", c.id, ErrGraphInUse)
		}
	}
	var errs []error
	err := gpu.RelaxCapture(gp.dev, func() error {
		ev, err := gp.eventLocked()
		if err != nil {
			return err
		}
		for _, x := range gp.strangers {
			if x.ID() == s.ID() || gpu.Capturing(x) {
				continue
			}
			if err := ev.Record(x); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
				return fmt.Errorf("order after stream %d: %w", x.ID(), err)
			} else if err == nil {
				if err := s.WaitEvent(ev); err != nil {
					return fmt.Errorf("order after stream %d: %w", x.ID(), err)
				}
			}
		}
		for res, pp := range gp.privs {
			for _, ch := range pp.chunks {
				if err := pp.up.Deallocate(ch.base, ch.size, s); err != nil {
					errs = append(errs, fmt.Errorf("free chunk %#x upstream: %w", uint64(ch.base), err))
					continue
				}
				gp.usage.subReserved(ch.size)
			}
			gp.usage.subUsed(pp.used)
			delete(gp.privs, res)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mr: release graph pool: %w", err)
	}
	for _, e := range gp.events {
		e.Destroy()
	}
	gp.events = nil
	if gp.internal != nil {
		gp.internal.Destroy()
		gp.internal = nil
	}
	gp.released = true
	graphPools.Delete(gp)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mr: release graph pool: %w", err)
	}
	return nil
}

// isReleased reads the flag without c.mu: GraphPool.Release holds gp.mu,
// and a Capture takes gp.mu under c.mu.
func (c *Capture) isReleased() bool { return c.released.Load() }

// eventLocked returns an event of the pool's own (one is enough: a wait
// takes the event as it is when enqueued).
func (gp *GraphPool) eventLocked() (gpu.Event, error) {
	if len(gp.events) == 0 {
		e, err := gp.dev.NewEvent(false)
		if err != nil {
			return nil, fmt.Errorf("new event: %w", err)
		}
		gp.events = append(gp.events, e)
	}
	return gp.events[0], nil
}

// privatePool is one resource's memory in a GraphPool.
type privatePool struct {
	name  string
	up    Resource
	block int // every block is this size (FixedSize); 0: the rounded request

	chunks []*privChunk
	live   map[gpu.DevicePtr]*privBlock
	free   []*privBlock
	used   int
}

type privChunk struct {
	base gpu.DevicePtr
	size int
}

type privBlock struct {
	ptr       gpu.DevicePtr
	size, req int
	ch        *privChunk
	allocOn   gpu.Stream // the stream that allocated it last
	allocIn   uint64     // the capture that allocated it
	freedOn   gpu.Stream // the stream that freed it (nil: a fresh block)
	freedIn   uint64     // the capture that freed it (0: outside any)
	owner     uint32     // live: the Owner it was handed out to (owner.go)
}

// captureClient describes a suballocating resource to the GraphPool.
type captureClient struct {
	name  string   // for errors: "pool", "arena", "fixed-size"
	res   Resource // the resource itself
	up    Resource // where chunks come from
	block int      // FixedSize's block size; 0 otherwise
	owner uint32   // the Owner of the request (owner.go); 0 but for Pool
}

func (gp *GraphPool) privLocked(cl captureClient) *privatePool {
	pp := gp.privs[cl.res]
	if pp == nil {
		pp = &privatePool{name: cl.name, up: cl.up, block: cl.block, live: make(map[gpu.DevicePtr]*privBlock)}
		gp.privs[cl.res] = pp
	}
	return pp
}

// captureAllocate serves a request of a suballocator on capturing stream s
// (capture id) from the capture's GraphPool.
func captureAllocate(cl captureClient, id uint64, size int, s gpu.Stream) (gpu.DevicePtr, error) {
	op := cl.name + ": allocate"
	if err := checkStream(cl.name, opAllocate, cl.res.Device(), s); err != nil {
		return 0, err
	}
	if size < 0 || size > maxAlignable {
		return 0, fmt.Errorf("%s %d bytes: %w", op, size, ErrInvalidSize)
	}
	if size == 0 {
		return 0, nil
	}
	c, err := captureOf(op, id, s)
	if err != nil {
		return 0, err
	}
	return c.gp.allocate(cl, c, size, s)
}

func (gp *GraphPool) allocate(cl captureClient, c *Capture, size int, s gpu.Stream) (gpu.DevicePtr, error) {
	gp.mu.Lock()
	defer gp.mu.Unlock()
	if gp.released {
		return 0, fmt.Errorf("%s: graph pool: %w", cl.name, ErrReleased)
	}
	pp := gp.privLocked(cl)
	need := alignUp(size)
	if pp.block > 0 {
		need = pp.block
	}
	// Best fit among the blocks s may take without a wait, then among
	// those that need one.
	var best, bestWait *privBlock
	for _, b := range pp.free {
		if b.size < need {
			continue
		}
		if b.needsWait(c, s) {
			if bestWait == nil || b.size < bestWait.size {
				bestWait = b
			}
		} else if best == nil || b.size < best.size {
			best = b
		}
	}
	if best == nil && bestWait != nil {
		if err := gp.orderLocked(s, bestWait.freedOn, bestWait.allocOn); err != nil {
			return 0, fmt.Errorf("%s: allocate %d bytes in capture %d: %w", cl.name, size, c.id, err)
		}
		best = bestWait
	}
	if best == nil {
		b, err := gp.growLocked(pp, need)
		if err != nil {
			return 0, fmt.Errorf("%s: allocate %d bytes in capture %d: %w", cl.name, size, c.id, err)
		}
		best = b
	} else {
		pp.unfree(best)
	}
	if best.size > need {
		rest := &privBlock{ptr: best.ptr + gpu.DevicePtr(need), size: best.size - need, ch: best.ch,
			allocOn: best.allocOn, allocIn: best.allocIn, freedOn: best.freedOn, freedIn: best.freedIn}
		best.size = need
		pp.free = append(pp.free, rest)
	}
	best.req, best.allocOn, best.allocIn, best.owner = size, s, c.id, cl.owner
	best.freedOn, best.freedIn = nil, 0
	pp.live[best.ptr] = best
	pp.used += best.size
	gp.usage.addUsed(best.size)
	return best.ptr, nil
}

// needsWait reports whether a request on s in capture c must wait on the
// streams that freed and allocated b: b was freed in c on another stream.
func (b *privBlock) needsWait(c *Capture, s gpu.Stream) bool {
	if b.freedOn == nil || b.freedIn != c.id {
		return false
	}
	return b.freedOn.ID() != s.ID() || (b.allocOn != nil && b.allocOn.ID() != s.ID())
}

// orderLocked makes s (capturing) wait on the current work of the other
// streams of its capture, with captured events: edges of the graph.
func (gp *GraphPool) orderLocked(s gpu.Stream, others ...gpu.Stream) error {
	for _, x := range others {
		if x == nil || x.ID() == s.ID() {
			continue
		}
		if gpu.CaptureID(x) != gpu.CaptureID(s) {
			return fmt.Errorf("stream %d left the capture: %w", x.ID(), ErrStreamCapturing)
		}
		ev, err := gp.eventLocked()
		if err != nil {
			return err
		}
		if err := ev.Record(x); err != nil {
			return fmt.Errorf("record on stream %d: %w", x.ID(), err)
		}
		if err := s.WaitEvent(ev); err != nil {
			return fmt.Errorf("stream %d wait on stream %d: %w", s.ID(), x.ID(), err)
		}
	}
	return nil
}

// growLocked takes a chunk for a block of need bytes from the upstream,
// on the pool's own stream, synchronized, inside gpu.RelaxCapture.
func (gp *GraphPool) growLocked(pp *privatePool, need int) (*privBlock, error) {
	size := poolRoundUp(need, graphPoolGranularity)
	var base gpu.DevicePtr
	err := gpu.RelaxCapture(gp.dev, func() error {
		if gp.internal == nil {
			s, err := gp.dev.NewStream()
			if err != nil {
				return fmt.Errorf("graph pool stream: %w", err)
			}
			gp.internal = s
		}
		p, err := pp.up.Allocate(size, gp.internal)
		if err != nil {
			return fmt.Errorf("grow by %d bytes: %w", size, err)
		}
		if err := gp.internal.Synchronize(); err != nil {
			pp.up.Deallocate(p, size, gp.internal)
			return fmt.Errorf("grow by %d bytes: synchronize: %w", size, err)
		}
		if p%Alignment != 0 {
			pp.up.Deallocate(p, size, gp.internal)
			return fmt.Errorf("grow by %d bytes: upstream returned misaligned %#x: %w", size, uint64(p), gpu.ErrInvalidValue)
		}
		base = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	ch := &privChunk{base: base, size: size}
	pp.chunks = append(pp.chunks, ch)
	gp.usage.addReserved(size)
	return &privBlock{ptr: base, size: size, ch: ch}, nil
}

func (pp *privatePool) unfree(b *privBlock) {
	for i, x := range pp.free {
		if x == b {
			pp.free[i] = pp.free[len(pp.free)-1]
			pp.free[len(pp.free)-1] = nil
			pp.free = pp.free[:len(pp.free)-1]
			return
		}
	}
}

// putFree returns b to the free list, coalescing it with free neighbours
// of its chunk that were freed alike.
func (pp *privatePool) putFree(b *privBlock) {
	merged := true
	for merged {
		merged = false
		for i, x := range pp.free {
			if x.ch != b.ch || x.freedIn != b.freedIn || !sameStream(x.freedOn, b.freedOn) || !sameStream(x.allocOn, b.allocOn) {
				continue
			}
			switch {
			case x.ptr+gpu.DevicePtr(x.size) == b.ptr:
				b.ptr, b.size = x.ptr, b.size+x.size
			case b.ptr+gpu.DevicePtr(b.size) == x.ptr:
				b.size += x.size
			default:
				continue
			}
			pp.free = append(pp.free[:i], pp.free[i+1:]...)
			merged = true
			break
		}
	}
	pp.free = append(pp.free, b)
}

func sameStream(a, b gpu.Stream) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.ID() == b.ID()
}

// captureDeallocate is a suballocator's free on capturing stream s
// (capture id): a block of the capture's GraphPool goes back to it; any
// other pointer (allocated before the capture) is kept for Release,
// after res confirms it knows it (check, may be nil).
func captureDeallocate(cl captureClient, id uint64, p gpu.DevicePtr, size int, s gpu.Stream, check func(gpu.DevicePtr, int) error) error {
	op := cl.name + ": deallocate"
	if err := checkStream(cl.name, opDeallocate, cl.res.Device(), s); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s %d bytes: %w", op, size, ErrInvalidSize)
	}
	if p == 0 {
		if size == 0 {
			return nil
		}
		return fmt.Errorf("%s null pointer as %d bytes: %w", op, size, ErrSizeMismatch)
	}
	c, err := captureOf(op, id, s)
	if err != nil {
		return err
	}
	if handled, err := c.gp.free(cl, c, p, size, s); handled {
		return err
	}
	if check != nil {
		if err := check(p, size); err != nil {
			return fmt.Errorf("%s %#x in capture %d: %w", op, uint64(p), id, err)
		}
	}
	return c.deferOwnedFree(cl.res, p, size, cl.owner)
}

// free frees p if it is a live block of cl's private pool in gp; handled
// is false if gp has no such block. c is the capture freeing it (nil:
// outside any).
func (gp *GraphPool) free(cl captureClient, c *Capture, p gpu.DevicePtr, size int, s gpu.Stream) (handled bool, err error) {
	gp.mu.Lock()
	defer gp.mu.Unlock()
	pp := gp.privs[cl.res]
	if pp == nil {
		return false, nil
	}
	b := pp.live[p]
	if b == nil {
		for _, x := range pp.free {
			if x.ptr <= p && p < x.ptr+gpu.DevicePtr(x.size) {
				return true, fmt.Errorf("%s: deallocate %#x: %w", cl.name, uint64(p), ErrDoubleFree)
			}
		}
		return false, nil
	}
	if b.owner != cl.owner {
		return true, fmt.Errorf("%s: deallocate %#x: %w", cl.name, uint64(p), ErrUnknownPointer)
	}
	if b.req != size {
		return true, fmt.Errorf("%s: deallocate %#x of %d bytes as %d: %w", cl.name, uint64(p), b.req, size, ErrSizeMismatch)
	}
	delete(pp.live, p)
	pp.used -= b.size
	gp.usage.subUsed(b.size)
	b.freedOn = s
	if c != nil {
		b.freedIn = c.id
	} else {
		b.freedIn = 0
		gp.strangers[s.ID()] = s
	}
	pp.putFree(b)
	return true, nil
}

// freeOutsideCapture frees p on s (not capturing) if it is a block that a
// capture of some GraphPool got from cl's resource: a graph's output freed
// by the program. handled is false otherwise. Resources call it on their
// unknown-pointer path only.
func freeOutsideCapture(cl captureClient, p gpu.DevicePtr, size int, s gpu.Stream) (handled bool, err error) {
	handled = false
	graphPools.Range(func(k, _ any) bool {
		handled, err = k.(*GraphPool).free(cl, nil, p, size, s)
		return !handled
	})
	return handled, err
}
