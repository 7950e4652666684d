package mr

// White-box checks of the pool: an invariant checker, a scripted fake
// device and upstream that need no simulator, and a fuzz test of operation
// sequences against a reference model.

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// checkInvariants verifies the invariants stated in pool.go and
// pool_stream.go. It takes p.mu and each stream's mutex in turn, so it
// must not run concurrently with operations that it would then miss.
func (p *Pool) checkInvariants() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	idx := p.chunks.all()
	reserved := 0
	homedTotal := 0
	for i, sp := range idx {
		c := sp.v
		reserved += c.held()
		if (c.limit > 0) != slices.Contains(p.vlist, c) || (c.limit > 0 && c.limit != c.size) {
			return fmt.Errorf("chunk %#x: limit %d, size %d, in vlist %v", c.base, c.limit, c.size, slices.Contains(p.vlist, c))
		}
		if i > 0 && idx[i-1].base+gpu.DevicePtr(idx[i-1].size) > c.base {
			return fmt.Errorf("chunks %#x and %#x overlap or are unsorted", idx[i-1].base, c.base)
		}
		if c.home.Load() == nil {
			return fmt.Errorf("chunk %#x has no home", c.base)
		}
	}
	if uint64(reserved) != p.usage.reserved.Load() {
		return fmt.Errorf("reserved %d, chunks sum to %d", p.usage.reserved.Load(), reserved)
	}
	for _, st := range p.streams.all() {
		if err := st.check(&p.chunks); err != nil {
			return fmt.Errorf("stream %d: %w", st.id, err)
		}
		st.mu.Lock()
		homedTotal += len(st.homed)
		st.mu.Unlock()
	}
	if homedTotal != len(idx) {
		return fmt.Errorf("%d chunks homed, %d indexed", homedTotal, len(idx))
	}
	if len(p.vlist) > 0 && p.grower == nil {
		return fmt.Errorf("%d growable chunks without a Grower", len(p.vlist))
	}
	for st, c := range p.vgrow {
		if !slices.Contains(p.vlist, c) {
			return fmt.Errorf("stream %d grows chunk %#x, which the pool does not hold", st.id, c.base)
		}
		if c.short {
			return fmt.Errorf("stream %d grows its long-lived blocks in short chunk %#x", st.id, c.base)
		}
	}
	for st, c := range p.vgrowShort {
		if !slices.Contains(p.vlist, c) {
			return fmt.Errorf("stream %d grows short chunk %#x, which the pool does not hold", st.id, c.base)
		}
		if !c.short {
			return fmt.Errorf("stream %d grows its short-lived blocks in long chunk %#x", st.id, c.base)
		}
	}
	return nil
}

func (st *poolStream) check(idx *spanIndex[*poolChunk]) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	// The fast slot (pool_fast.go), as the fast path sees it: an armed
	// slot holds a block of this stream counted as cached, at the address
	// the fast path reads. Settling it then files the block as the rest
	// of the checks expect.
	if v := st.fstate.Load(); v != fastEmpty {
		b := st.fblock
		switch {
		case b == nil:
			return fmt.Errorf("fast slot %#x armed without a block", v)
		case v&fastTag != fastCached && v&fastTag != fastLive:
			return fmt.Errorf("fast slot %#x: bad tag", v)
		case b.state != blockCached || b.c.cached < 1 || b.c.home.Load() != st:
			return fmt.Errorf("fast slot block %#x: state %d, chunk cached %d, home %p", b.ptr, b.state, b.c.cached, b.c.home.Load())
		case st.fptr.Load() != uint64(b.ptr):
			return fmt.Errorf("fast slot block %#x at address %#x", b.ptr, st.fptr.Load())
		case fastReq(v) > b.size || fastReq(v) <= b.size-Alignment || fastReq(v) > fastMaxReq:
			return fmt.Errorf("fast slot block %#x of %d bytes for requests of %d", b.ptr, b.size, fastReq(v))
		case !st.dirty:
			return fmt.Errorf("fast slot armed on a stream not listed dirty")
		}
		st.settle()
	}
	used := 0
	liveSeen := 0
	pendingBytes := 0
	freeSmall, freeLarge, freeShort := map[*poolBlock]bool{}, map[*poolBlock]bool{}, map[*poolBlock]bool{}
	cachedSeen, bornSeen := 0, 0
	quick := map[*poolBlock]bool{}
	for i, b := range st.quick {
		if (i < st.nquick) != (b != nil) {
			return fmt.Errorf("quick cache holds %d blocks, slot %d is %v", st.nquick, i, b)
		}
		if b != nil {
			quick[b] = true
		}
	}
	for i, c := range st.homed {
		if c.homeIdx != i || c.home.Load() != st {
			return fmt.Errorf("chunk %#x: homeIdx %d at %d, home %p", c.base, c.homeIdx, i, c.home.Load())
		}
		if found, _, _ := idx.find(c.base); found != c {
			return fmt.Errorf("chunk %#x not indexed", c.base)
		}
		at := c.base
		live, pending, cached, mapped := 0, 0, 0, 0
		var prev *poolBlock
		for b := c.first; b != nil; b = b.next {
			if b.c != c || b.prev != prev || b.ptr != at || b.size <= 0 || b.size%Alignment != 0 {
				return fmt.Errorf("chunk %#x: bad block %+v at %#x", c.base, *b, at)
			}
			if prev != nil && prev.state == blockFree && b.state == blockFree {
				return fmt.Errorf("chunk %#x: neighbouring free blocks at %#x", c.base, b.ptr)
			}
			if b.state != blockUnmapped {
				mapped += b.size
			}
			if b.state != blockPending && b.freedBy != nil {
				// Only pending blocks name the stream that freed them
				// (putFree relies on it).
				return fmt.Errorf("chunk %#x: block %#x in state %d freed by %p", c.base, b.ptr, b.state, b.freedBy)
			}
			switch b.state {
			case blockLive:
				live++
				liveSeen++
				used += b.req
				if st.live.get(b.ptr) != b {
					return fmt.Errorf("live block %#x not in live map", b.ptr)
				}
				if c.limit > 0 && st.life != nil {
					// Its birth is recorded (pool_lifetime.go).
					if _, ok := st.life.born[b.ptr]; !ok {
						return fmt.Errorf("live block %#x of growable chunk %#x has no birth", b.ptr, c.base)
					}
					bornSeen++
				}
				if alignUp(b.req) > b.size {
					return fmt.Errorf("live block %#x of %d bytes holds %d", b.ptr, b.size, b.req)
				}
			case blockPending:
				pending++
				pendingBytes += b.size
				if b.freedBy == nil || b.freedBy == st {
					return fmt.Errorf("pending block %#x freed by %v", b.ptr, b.freedBy)
				}
			case blockCached:
				cached++
				cachedSeen++
				if !quick[b] {
					return fmt.Errorf("cached block %#x not in the quick cache", b.ptr)
				}
			case blockUnmapped:
				g := st.pool.grower
				if c.limit == 0 || g == nil || b.ptr%gpu.DevicePtr(g.GrowGranularity()) != 0 || b.size%g.GrowGranularity() != 0 {
					return fmt.Errorf("chunk %#x: unmapped block %#x+%d (limit %d)", c.base, b.ptr, b.size, c.limit)
				}
			case blockFree:
				switch {
				case c.small:
					freeSmall[b] = true
				case c.short:
					freeShort[b] = true
				default:
					freeLarge[b] = true
				}
			}
			at += gpu.DevicePtr(b.size)
			prev = b
		}
		if at != c.base+gpu.DevicePtr(c.size) {
			return fmt.Errorf("chunk %#x: blocks end at %#x, chunk at %#x", c.base, at, c.base+gpu.DevicePtr(c.size))
		}
		if c.limit > 0 && mapped != c.mapped {
			return fmt.Errorf("chunk %#x: mapped %d, blocks %d", c.base, c.mapped, mapped)
		}
		if live != c.live || pending != c.pending || cached != c.cached {
			return fmt.Errorf("chunk %#x: counts live %d pending %d cached %d, blocks live %d pending %d cached %d",
				c.base, c.live, c.pending, c.cached, live, pending, cached)
		}
	}
	if st.life != nil && len(st.life.born) != bornSeen {
		return fmt.Errorf("%d births recorded, %d live blocks of growable chunks", len(st.life.born), bornSeen)
	}
	if cachedSeen != st.nquick {
		return fmt.Errorf("quick cache holds %d blocks, chunks %d cached ones", st.nquick, cachedSeen)
	}
	if liveSeen != st.live.len() {
		return fmt.Errorf("live map has %d entries, chunks %d live blocks", st.live.len(), liveSeen)
	}
	if int64(used) != st.used {
		return fmt.Errorf("used %d, live blocks hold %d", st.used, used)
	}
	if pendingBytes != st.pendingBytes {
		return fmt.Errorf("pendingBytes %d, pending blocks %d", st.pendingBytes, pendingBytes)
	}
	for _, pl := range st.pendingLists {
		n := 0
		for b := pl.head; b != nil; b = b.lnext {
			if b.state != blockPending || b.freedBy != pl.from || b.c.home.Load() != st {
				return fmt.Errorf("pending list of %d holds %+v", pl.from.id, *b)
			}
			if b.lnext != nil && b.lnext.lprev != b {
				return fmt.Errorf("pending list of %d: broken links", pl.from.id)
			}
			n += b.size
		}
		if n != pl.bytes {
			return fmt.Errorf("pending list of %d: bytes %d, blocks %d", pl.from.id, pl.bytes, n)
		}
	}
	for _, x := range []struct {
		t    *tlsf
		want map[*poolBlock]bool
	}{{&st.small, freeSmall}, {&st.large, freeLarge}, {&st.largeShort, freeShort}} {
		n, bytes := 0, 0
		for fl := range tlsfFL {
			if (x.t.flMap&(1<<fl) != 0) != (x.t.lv[fl].slMap != 0) {
				return fmt.Errorf("tlsf first-level bit %d wrong", fl)
			}
			// Only the lists the bitmaps name are walked: a list whose
			// bit is clear would leave its blocks uncounted below.
			for m := x.t.lv[fl].slMap; m != 0; m &= m - 1 {
				sl := bits.TrailingZeros32(m)
				if x.t.lv[fl].row[sl] == nil {
					return fmt.Errorf("tlsf bit (%d,%d) set on an empty list", fl, sl)
				}
				for b := x.t.lv[fl].row[sl]; b != nil; b = b.lnext {
					if f, s := tlsfClass(b.size); f != fl || s != sl {
						return fmt.Errorf("block of %d bytes in class (%d,%d)", b.size, fl, sl)
					}
					if !x.want[b] {
						return fmt.Errorf("tlsf lists %+v, not a free block here", *b)
					}
					if b.lnext != nil && b.lnext.lprev != b {
						return fmt.Errorf("tlsf (%d,%d): broken links", fl, sl)
					}
					n++
					bytes += b.size
				}
			}
		}
		if n != len(x.want) {
			return fmt.Errorf("tlsf lists %d blocks (%d bytes), chunks have %d free", n, bytes, len(x.want))
		}
	}
	return nil
}

// --- A fake device and upstream: enough of gpu for the pool, no memory.

var fakeIDs atomic.Uint64

type pfDevice struct {
	gpu.Device // nil: methods the pool must not call panic
	mu         sync.Mutex
	events     int // created and not destroyed
	records    int
	waits      int
	syncs      int
	failRecord error // next Record fails with this
	totalMem   uint64
}

func (d *pfDevice) Properties() gpu.Properties {
	return gpu.Properties{TotalMemory: d.totalMem}
}

func (d *pfDevice) NewEvent(bool) (gpu.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events++
	return &pfEvent{d: d}, nil
}

func (d *pfDevice) Synchronize() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	return nil
}

type pfStream struct {
	id uint64
	d  *pfDevice
}

func newPFStream(d *pfDevice) *pfStream { return &pfStream{id: fakeIDs.Add(1), d: d} }
func (s *pfStream) ID() uint64          { return s.id }
func (s *pfStream) Device() gpu.Device  { return s.d }
func (s *pfStream) Synchronize() error  { return nil }
func (s *pfStream) Query() error        { return nil }
func (s *pfStream) Destroy() error      { return nil }
func (s *pfStream) WaitEvent(e gpu.Event) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.waits++
	return nil
}

type pfEvent struct {
	gpu.Event
	d *pfDevice
}

func (e *pfEvent) Record(gpu.Stream) error {
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	if err := e.d.failRecord; err != nil {
		e.d.failRecord = nil
		return err
	}
	e.d.records++
	return nil
}

func (e *pfEvent) Destroy() error {
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	e.d.events--
	return nil
}

// pfUpstream hands out addresses from a bump pointer, up to capacity, and
// checks that frees match.
type pfUpstream struct {
	d        *pfDevice
	mu       sync.Mutex
	next     gpu.DevicePtr
	live     map[gpu.DevicePtr]int
	held     int
	capacity int
	allocs   int
	frees    int
}

func newPFUpstream(capacity int) *pfUpstream {
	return &pfUpstream{d: &pfDevice{totalMem: uint64(capacity)}, next: 1 << 32, live: map[gpu.DevicePtr]int{}, capacity: capacity}
}

// pfGrower is pfUpstream with growable allocations (Grower): a model of
// which granules of each range are committed, which refuses a commit of a
// committed granule, a decommit of an uncommitted one, and growth beyond
// its capacity; held counts committed bytes.
type pfGrower struct {
	*pfUpstream
	ranges map[gpu.DevicePtr][]bool // committed, per granule
}

const pfGranule = 2 << 20

func newPFGrower(capacity int) *pfGrower {
	return &pfGrower{pfUpstream: newPFUpstream(capacity), ranges: map[gpu.DevicePtr][]bool{}}
}

func (u *pfGrower) GrowGranularity() int { return pfGranule }

// neverBlocks: the model never refuses a commit with ErrGrowBlocked, so
// the pool places by lifetime over it (pool_lifetime.go).
func (u *pfGrower) neverBlocks() bool { return true }

func (u *pfGrower) AllocateGrowable(size, limit int, s gpu.Stream) (gpu.DevicePtr, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if size <= 0 || size > limit || size%pfGranule != 0 || limit%pfGranule != 0 {
		return 0, fmt.Errorf("fake grower: growable %d of %d: %w", size, limit, ErrInvalidSize)
	}
	if u.held+size > u.capacity {
		return 0, &OutOfMemoryError{Resource: "fake", Requested: size, Reserved: uint64(u.held)}
	}
	p := (u.next + pfGranule - 1) &^ (pfGranule - 1)
	u.next = p + gpu.DevicePtr(limit) + pfGranule
	g := make([]bool, limit/pfGranule)
	for i := range size / pfGranule {
		g[i] = true
	}
	u.ranges[p] = g
	u.held += size
	u.allocs++
	return p, nil
}

// span checks [off, off+n) of the range at p and returns its granules.
func (u *pfGrower) span(p gpu.DevicePtr, off, n int) ([]bool, error) {
	g, ok := u.ranges[p]
	if !ok {
		return nil, fmt.Errorf("fake grower: %#x: %w", p, ErrUnknownPointer)
	}
	if off < 0 || n <= 0 || off%pfGranule != 0 || n%pfGranule != 0 || (off+n)/pfGranule > len(g) {
		return nil, fmt.Errorf("fake grower: [%d, +%d) of %d granules: %w", off, n, len(g), ErrInvalidSize)
	}
	return g[off/pfGranule : (off+n)/pfGranule], nil
}

func (u *pfGrower) Commit(p gpu.DevicePtr, off, n int, s gpu.Stream) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	g, err := u.span(p, off, n)
	if err != nil {
		return err
	}
	for i, c := range g {
		if c {
			return fmt.Errorf("fake grower: commit of committed granule %d: %w", off/pfGranule+i, gpu.ErrInvalidValue)
		}
	}
	if u.held+n > u.capacity {
		return &OutOfMemoryError{Resource: "fake", Requested: n, Reserved: uint64(u.held)}
	}
	for i := range g {
		g[i] = true
	}
	u.held += n
	return nil
}

func (u *pfGrower) Decommit(p gpu.DevicePtr, off, n int, s gpu.Stream) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	g, err := u.span(p, off, n)
	if err != nil {
		return err
	}
	for i, c := range g {
		if !c {
			return fmt.Errorf("fake grower: decommit of uncommitted granule %d: %w", off/pfGranule+i, gpu.ErrInvalidValue)
		}
	}
	for i := range g {
		g[i] = false
	}
	u.held -= n
	return nil
}

func (u *pfGrower) Deallocate(p gpu.DevicePtr, n int, s gpu.Stream) error {
	u.mu.Lock()
	g, ok := u.ranges[p]
	if !ok {
		u.mu.Unlock()
		return u.pfUpstream.Deallocate(p, n, s)
	}
	defer u.mu.Unlock()
	if n != len(g)*pfGranule {
		return fmt.Errorf("fake grower: free %#x of %d, range of %d: %w", p, n, len(g)*pfGranule, ErrSizeMismatch)
	}
	for _, c := range g {
		if c {
			u.held -= pfGranule
		}
	}
	delete(u.ranges, p)
	u.frees++
	return nil
}

func (u *pfUpstream) Device() gpu.Device { return u.d }

func (u *pfUpstream) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held+n > u.capacity {
		return 0, &OutOfMemoryError{Resource: "fake", Requested: n, Reserved: uint64(u.held)}
	}
	p := u.next
	u.next += gpu.DevicePtr(alignUp(n)) + 4096 // gaps catch off-chunk pointers
	u.live[p] = n
	u.held += n
	u.allocs++
	return p, nil
}

func (u *pfUpstream) Deallocate(p gpu.DevicePtr, n int, s gpu.Stream) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if m, ok := u.live[p]; !ok || m != n {
		return fmt.Errorf("fake upstream: free %#x of %d (live %d): %w", p, n, m, ErrUnknownPointer)
	}
	delete(u.live, p)
	u.held -= n
	u.frees++
	return nil
}

// --- Tests.

func TestTLSFClasses(t *testing.T) {
	// Classes are monotone in size, and every block of a class above the
	// class of n is at least n bytes.
	prevF, prevS := 0, 0
	for u := 1; u < 1<<16; u++ {
		f, s := tlsfClass(u * Alignment)
		if f < prevF || (f == prevF && s < prevS) {
			t.Fatalf("class of %d units (%d,%d) below that of %d units (%d,%d)", u, f, s, u-1, prevF, prevS)
		}
		prevF, prevS = f, s
	}
	for _, n := range []int{256, 512, 8192, 8448, 1 << 20, 1<<20 + 256, 3 << 30, 1 << 50} {
		var tl tlsf
		b := &poolBlock{size: n}
		tl.insert(b)
		if got := tl.find(n); got != b {
			t.Errorf("find(%d) with one block of %d: %v", n, n, got)
		}
		if got := tl.find(n + Alignment); got != nil {
			t.Errorf("find(%d) with one block of %d: %+v", n+Alignment, n, got)
		}
		tl.remove(b)
		if n, bytes := tl.count(); n != 0 || bytes != 0 || tl.flMap != 0 {
			t.Errorf("after remove: %+v", tl)
		}
	}
}

func TestTLSFFindBestInClass(t *testing.T) {
	var tl tlsf
	// 1 MiB + k units share a class: find takes the smallest that fits.
	sizes := []int{1<<20 + 20*Alignment, 1<<20 + 5*Alignment, 1<<20 + 9*Alignment}
	for _, n := range sizes {
		tl.insert(&poolBlock{size: n})
	}
	if b := tl.find(1<<20 + 6*Alignment); b == nil || b.size != 1<<20+9*Alignment {
		t.Fatalf("find: got %+v, want the block of 1 MiB + 9 units", b)
	}
	if b := tl.find(1<<20 + 21*Alignment); b != nil && b.size < 1<<20+21*Alignment {
		t.Fatalf("find returned a block too small: %d", b.size)
	}
}

// findFit takes the smallest accepted block of the request's class, else
// the first accepted one of the classes above, passing over the blocks the
// predicate rejects, and returns nil when it accepts none large enough.
func TestTLSFFindFit(t *testing.T) {
	var tl tlsf
	a, b, c := &poolBlock{size: 1<<20 + 5*Alignment}, &poolBlock{size: 1<<20 + 9*Alignment}, &poolBlock{size: 1<<20 + 20*Alignment}
	d, e := &poolBlock{size: 4 << 20}, &poolBlock{size: 8 << 20}
	for _, x := range []*poolBlock{a, b, c, d, e} {
		tl.insert(x)
	}
	all := func(*poolBlock) bool { return true }
	but := func(no ...*poolBlock) func(*poolBlock) bool {
		return func(x *poolBlock) bool {
			for _, n := range no {
				if x == n {
					return false
				}
			}
			return true
		}
	}
	for _, tc := range []struct {
		name string
		size int
		ok   func(*poolBlock) bool
		want *poolBlock
	}{
		{"all, as find", 1 << 20, all, tl.find(1 << 20)},
		{"best of the class", 1<<20 + 6*Alignment, all, b},
		{"best accepted of the class", 1<<20 + Alignment, but(a), b},
		{"next class up", 1<<20 + 21*Alignment, all, d},
		{"past a rejected class", 1<<20 + 21*Alignment, but(d), e},
		{"past every rejected block", 1 << 20, but(a, b, c, d), e},
		{"none accepted", 2 << 20, but(d, e), nil},
		{"none large enough", 9 << 20, all, nil},
	} {
		if got := tl.findFit(tc.size, tc.ok); got != tc.want {
			t.Errorf("%s: findFit(%d) = %+v, want %+v", tc.name, tc.size, got, tc.want)
		}
	}
	if n, _ := tl.count(); n != 5 {
		t.Errorf("findFit removed blocks: %d left", n)
	}
}

// poolOp is one step of a fuzzed sequence.
type modelAlloc struct {
	p      gpu.DevicePtr
	size   int
	stream int
}

func runPoolModel(t *testing.T, data []byte, opts PoolOptions, capacity int, grow bool) {
	up := newPFUpstream(capacity)
	var upstream Resource = up
	var grower *pfGrower
	if grow {
		grower = newPFGrower(capacity)
		up, upstream = grower.pfUpstream, grower
	}
	p, err := NewPool(upstream, opts)
	if err != nil {
		t.Fatal(err)
	}
	streams := []*pfStream{newPFStream(up.d), newPFStream(up.d), newPFStream(up.d)}
	var live []modelAlloc
	used := 0
	sizeOf := func(a, b byte) int {
		switch a % 4 {
		case 0:
			return int(b) + 1 // tiny
		case 1:
			return int(b) * 1000 // up to 255 KB
		case 2:
			return int(b)<<12 + int(a) // up to 1 MiB and over
		default:
			return int(b) << 18 // up to 64 MiB
		}
	}
	for i := 0; i+2 < len(data); i += 3 {
		op, a, b := data[i], data[i+1], data[i+2]
		s := streams[int(op>>4)%len(streams)]
		switch op % 8 {
		case 0, 1, 2, 3: // allocate
			n := sizeOf(a, b)
			ptr, err := p.Allocate(n, s)
			if n == 0 {
				if ptr != 0 || err != nil {
					t.Fatalf("Allocate(0) = %#x, %v", ptr, err)
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrOutOfMemory) {
					t.Fatalf("Allocate(%d): %v", n, err)
				}
				var oom *OutOfMemoryError
				if !errors.As(err, &oom) || oom.Requested != n {
					t.Fatalf("Allocate(%d): OOM error %v", n, err)
				}
				if used+n <= capacity/4 && opts.MaxSize == 0 {
					t.Fatalf("Allocate(%d) failed with %d used of %d: %v", n, used, capacity, err)
				}
				continue
			}
			if ptr%Alignment != 0 {
				t.Fatalf("Allocate(%d) = %#x, misaligned", n, ptr)
			}
			for _, l := range live {
				if ptr < l.p+gpu.DevicePtr(l.size) && l.p < ptr+gpu.DevicePtr(n) {
					t.Fatalf("Allocate(%d) = %#x overlaps live %#x+%d", n, ptr, l.p, l.size)
				}
			}
			live = append(live, modelAlloc{ptr, n, int(op>>4) % len(streams)})
			used += n
		case 4, 5, 6: // free, maybe on another stream
			if len(live) == 0 {
				continue
			}
			j := int(a) % len(live)
			l := live[j]
			if err := p.Deallocate(l.p, l.size, s); err != nil {
				t.Fatalf("Deallocate(%#x, %d): %v", l.p, l.size, err)
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			used -= l.size
			// A second free of the same pointer is a typed error and
			// changes nothing.
			if b%7 == 0 {
				err := p.Deallocate(l.p, l.size, s)
				want := ErrDoubleFree
				if _, _, indexed := p.chunks.find(l.p); !indexed {
					want = ErrUnknownPointer // its chunk was released
				}
				if !errors.Is(err, want) {
					t.Fatalf("double free: %v, want %v", err, want)
				}
			}
		case 7: // release, or a bad free
			if b%2 == 0 {
				if err := p.Release(); err != nil {
					t.Fatalf("Release: %v", err)
				}
			} else if len(live) > 0 {
				l := live[int(a)%len(live)]
				if err := p.Deallocate(l.p, l.size+1, s); !errors.Is(err, ErrSizeMismatch) {
					t.Fatalf("free with wrong size: %v", err)
				}
				inside := l.p + 1
				if l.size > Alignment {
					inside = l.p + Alignment
				}
				if err := p.Deallocate(inside, l.size, s); !errors.Is(err, ErrUnknownPointer) {
					t.Fatalf("free inside a block: %v", err)
				}
			}
		}
		if err := p.checkInvariants(); err != nil {
			t.Fatalf("after op %d (%d %d %d): %v", i/3, op, a, b, err)
		}
		if u := p.Usage(); u.Used != uint64(used) || u.Reserved > uint64(max(capacity, opts.MaxSize)) || u.Reserved != uint64(up.held) {
			t.Fatalf("usage %+v, model used %d, upstream holds %d", u, used, up.held)
		}
		if opts.MaxSize > 0 && p.Usage().Reserved > uint64(opts.MaxSize) {
			t.Fatalf("reserved %d above MaxSize %d", p.Usage().Reserved, opts.MaxSize)
		}
	}
	for _, l := range live {
		if err := p.Deallocate(l.p, l.size, streams[l.stream]); err != nil {
			t.Fatalf("final Deallocate: %v", err)
		}
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
		t.Fatalf("after freeing everything and Release: %+v", u)
	}
	if up.held != 0 || len(up.live) != 0 || (grower != nil && len(grower.ranges) != 0) {
		t.Fatalf("upstream still holds %d bytes in %d chunks", up.held, len(up.live))
	}
}

// poolFuzzOptions are the pool configurations FuzzPoolOps runs, chosen by
// an input's first byte, with their upstream capacities.
var poolFuzzOptions = []struct {
	opts     PoolOptions
	capacity int
	grow     bool // over a Grower (pool_vgrow.go)
}{
	{PoolOptions{}, 4 << 30, false},
	{PoolOptions{MaxSize: 96 << 20, ChunkSize: 8 << 20}, 1 << 30, false},
	{PoolOptions{ReleaseThreshold: 4 << 20, InitialSize: 10 << 20}, 1 << 30, false},
	{PoolOptions{SplitBig: true, ChunkSize: 8 << 20, MaxSize: 160 << 20}, 1 << 30, false},
	{PoolOptions{SplitBig: true, SplitGiantAtMark: true, ChunkSize: 4 << 20}, 1 << 30, false},
	{PoolOptions{}, 1 << 30, true},
	{PoolOptions{MaxSize: 96 << 20}, 1 << 30, true},
	{PoolOptions{ReleaseThreshold: 4 << 20, InitialSize: 10 << 20}, 1 << 30, true},
	{PoolOptions{SplitBig: true, ReservedSlack: 0.25, ChunkSize: 4 << 20}, 1 << 30, false},
	{PoolOptions{ReservedSlack: 1, MaxSize: 96 << 20, ReleaseThreshold: 32 << 20}, 1 << 30, false},
	{PoolOptions{PackHoles: true, MaxSize: 96 << 20}, 1 << 30, true},
	{PoolOptions{SmallAtPeak: true}, 1 << 30, true},
	{PoolOptions{SmallAtPeak: true, MaxSize: 96 << 20, ReleaseThreshold: 4 << 20}, 1 << 30, true},
	{PoolOptions{SmallAtPeak: true}, 1 << 30, true},
	{PoolOptions{SmallAtPeak: true, MappedSlack: 0.01, MaxSize: 96 << 20, ReleaseThreshold: 4 << 20}, 1 << 30, true},
	{PoolOptions{PackHoles: true, HolesKeepPair: true, SmallAtPeak: true}, 1 << 30, true},
	{PoolOptions{PackHoles: true, HolesKeepPair: true, SmallAtPeak: true, MaxSize: 96 << 20, ReleaseThreshold: 4 << 20}, 1 << 30, true},
}

// poolFuzzMaxOps bounds the operations of one input: longer inputs add
// nothing a sequence of shorter ones would not, and a short input is
// minimized in moments rather than in the minute the fuzzer allows.
const poolFuzzMaxOps = 64

// FuzzPoolOps runs operation sequences against the pool and checks it
// against a model after each (runPoolModel). An input is a configuration
// byte, then three bytes per operation: the kind and stream, then two that
// make a size or pick a block (see runPoolModel); every byte counts, so
// the fuzzer's mutations mean something, and an execution takes well under
// a millisecond.
func FuzzPoolOps(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 4, 0, 7, 7, 0, 0})
	f.Add([]byte{1, 0x03, 2, 9, 0x13, 1, 200, 0x24, 0, 0, 0x00, 3, 60, 0x17, 1, 2})
	f.Add([]byte{2, 0x02, 3, 255, 0x12, 1, 40, 0x15, 0, 1, 0x27, 0, 0, 0x01, 0, 0})
	// Over a Grower: rounds of a 6 MiB block kept and a 3 MiB temporary
	// freed at once, whose signature repeats, so that the pool places
	// the later temporaries in a short-lived range (pool_lifetime.go).
	for c, o := range poolFuzzOptions {
		if !o.grow {
			continue
		}
		b := []byte{byte(c)}
		for r := range 8 {
			b = append(b, 0x00, 3, 24, 0x00, 3, 12, 0x04, byte(r+1), 0)
		}
		f.Add(b)
	}
	// With SmallAtPeak: a small chunk filled by eight requests of about
	// 255 KB, a 3 MiB block, and small requests that would grow a small
	// chunk at the high-water mark (pool_vpeak.go).
	for c, o := range poolFuzzOptions {
		if !o.opts.SmallAtPeak {
			continue
		}
		b := []byte{byte(c)}
		for range 8 {
			b = append(b, 0x00, 1, 255)
		}
		b = append(b, 0x00, 3, 12, 0x00, 1, 255, 0x00, 0, 7, 0x04, 9, 0, 0x00, 1, 200)
		f.Add(b)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for c := range poolFuzzOptions {
		b := []byte{byte(c)}
		for range poolFuzzMaxOps * 3 {
			b = append(b, byte(r.Uint32()))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c := poolFuzzOptions[int(data[0])%len(poolFuzzOptions)]
		ops := data[1:]
		if len(ops) > poolFuzzMaxOps*3 {
			ops = ops[:poolFuzzMaxOps*3]
		}
		runPoolModel(t, ops, c.opts, c.capacity, c.grow)
	})
}

// The fuzz target stays cheap: an input of the longest kind runs well
// within 20 ms even under -race, and in about a third of a millisecond
// without it, so the fuzzer runs thousands a second (53,757 in 20 s on the
// development machine). Before, inputs were 600 random bytes, each run in
// three configurations, and every new input was minimized for up to a
// minute: the fuzzer managed 15 executions in 90 s.
func TestFuzzPoolOpsIsCheap(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	start := time.Now()
	const runs = 50
	for i := range runs {
		b := make([]byte, 1+poolFuzzMaxOps*3)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		c := poolFuzzOptions[i%len(poolFuzzOptions)]
		runPoolModel(t, b[1:], c.opts, c.capacity, c.grow)
	}
	if per := time.Since(start) / runs; per > 20*time.Millisecond {
		t.Errorf("%v per input of %d operations", per, poolFuzzMaxOps)
	}
}

func TestPtrMap(t *testing.T) {
	var m ptrMap
	ref := map[gpu.DevicePtr]*poolBlock{}
	r := rand.New(rand.NewPCG(3, 4))
	var keys []gpu.DevicePtr
	for i := range 200000 {
		if len(keys) > 0 && r.IntN(2) == 0 {
			// Often the latest key, which may sit in the front slot.
			j := len(keys) - 1
			if r.IntN(2) == 0 {
				j = r.IntN(len(keys))
			}
			k := keys[j]
			keys[j] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			if r.IntN(2) == 0 {
				m.del(k)
			} else {
				// The free's path: one probe finds it, delAt removes it there.
				b, at := m.find(k)
				if b != ref[k] {
					t.Fatalf("op %d: find(%#x) = %p, want %p", i, k, b, ref[k])
				}
				m.delAt(at)
			}
			delete(ref, k)
		} else {
			// Addresses clustered like a pool's: 256-aligned, close.
			k := gpu.DevicePtr(1<<32 + r.IntN(1<<16)*Alignment)
			if ref[k] != nil {
				continue
			}
			b := &poolBlock{ptr: k}
			m.put(k, b)
			ref[k] = b
			keys = append(keys, k)
		}
		if m.len() != len(ref) {
			t.Fatalf("op %d: len %d, want %d", i, m.len(), len(ref))
		}
		if i%1000 == 0 {
			for k, b := range ref {
				if m.get(k) != b {
					t.Fatalf("op %d: get(%#x) wrong", i, k)
				}
			}
			for j := range 100 {
				k := gpu.DevicePtr(1<<32 + (1<<16+j)*Alignment)
				if m.get(k) != nil {
					t.Fatalf("get of absent key %#x found something", k)
				}
				if b, _ := m.find(k); b != nil {
					t.Fatalf("find of absent key %#x found something", k)
				}
			}
		}
	}
}

// Blocks freed on another stream cost their owner one event wait when it
// takes them back, however many there are; an idle chunk stolen by
// another stream costs one wait too.
func TestPoolOneEventPerSteal(t *testing.T) {
	up := newPFUpstream(1 << 40)
	// One small chunk is all the pool may hold: S3 must take S1's.
	p, err := NewPool(up, PoolOptions{MaxSize: poolSmallChunk})
	if err != nil {
		t.Fatal(err)
	}
	s1, s2, s3 := newPFStream(up.d), newPFStream(up.d), newPFStream(up.d)
	const n = 4096
	const count = poolSmallChunk / n // exactly one small chunk
	var ps []gpu.DevicePtr
	alloc := func(s *pfStream) {
		q, err := p.Allocate(n, s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, q)
	}
	for range count {
		alloc(s1)
	}
	for _, q := range ps {
		if err := p.Deallocate(q, n, s2); err != nil {
			t.Fatal(err)
		}
	}
	ps = ps[:0]
	waits, records, grows := up.d.waits, up.d.records, up.allocs
	for range count {
		alloc(s1)
	}
	if w, r, g := up.d.waits-waits, up.d.records-records, up.allocs-grows; w != 1 || r != 1 || g != 0 {
		t.Errorf("S1 reusing %d blocks S2 freed: %d waits, %d records, %d growths; want 1, 1, 0", count, w, r, g)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	// Free them all on S1: the chunk is idle, and S3 steals it whole.
	for _, q := range ps {
		if err := p.Deallocate(q, n, s1); err != nil {
			t.Fatal(err)
		}
	}
	ps = ps[:0]
	waits, records, grows = up.d.waits, up.d.records, up.allocs
	for range count {
		alloc(s3)
	}
	if w, r, g := up.d.waits-waits, up.d.records-records, up.allocs-grows; w != 1 || r != 1 || g != 0 {
		t.Errorf("S3 taking S1's idle chunk: %d waits, %d records, %d growths; want 1, 1, 0", w, r, g)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	// Events are reused: a handful exist, not one per steal.
	if up.d.events > 2*poolStreamEvents {
		t.Errorf("%d events alive", up.d.events)
	}
}

// A stream's working chunk (the one it last allocated from) is not taken
// by another stream while memory is plentiful: the other stream grows, so
// that busy streams do not pass chunks around.
func TestPoolWorkingChunkKept(t *testing.T) {
	up := newPFUpstream(1 << 40)
	p, err := NewPool(up, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := newPFStream(up.d), newPFStream(up.d)
	pair := func(s *pfStream, n int) {
		q, err := p.Allocate(n, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Deallocate(q, n, s); err != nil {
			t.Fatal(err)
		}
	}
	pair(s1, 4096)
	pair(s1, 1<<20)
	waits, grows := up.d.waits, up.allocs
	pair(s2, 4096)
	pair(s2, 1<<20)
	if w, g := up.d.waits-waits, up.allocs-grows; w != 0 || g != 2 {
		t.Errorf("S2 while S1 works from its chunks: %d waits, %d growths; want 0, 2", w, g)
	}
	// An idle chunk that is not S1's working chunk is taken.
	q, _ := p.Allocate(1<<20, s1)
	r, _ := p.Allocate(8<<20, s1) // does not fit: S1 grows another chunk, its working one
	p.Deallocate(q, 1<<20, s1)    // the first large chunk is idle, not working
	waits, grows = up.d.waits, up.allocs
	s3 := newPFStream(up.d)
	pair(s3, 1<<20)
	if w, g := up.d.waits-waits, up.allocs-grows; w != 1 || g != 0 {
		t.Errorf("S3 with an idle chunk of S1 that S1 does not work from: %d waits, %d growths; want 1, 0", w, g)
	}
	p.Deallocate(r, 8<<20, s1)
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
