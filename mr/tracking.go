// Tracking: an adaptor that remembers every live allocation with the call
// stack that made it, reports leaks, and writes a profile in pprof's format
// so that `go tool pprof` shows which code holds device memory, as a Go
// heap profile does for the Go heap.
//
// Cost: an allocation records the return addresses of its stack (program
// counters only; no symbol lookup) by following frame pointers
// (callers_fp.go; runtime.Callers where Go keeps none) into an array on
// the caller's stack, then interns the
// stack: stacks are hashed into a sharded table of stack records, so a
// stack seen before costs a hash and a lookup, and only a new call site
// allocates (one copy of its PCs). Symbols are resolved only when a profile
// or a leak report is made. A stack seen recently is found without a lock
// in recent, a small table of records by hash. The hash mixes each PC
// with a multiply off its dependency chain (hashPCs), so 16 PCs cost a few
// cycles each, not a multiply's latency each. In-use bytes and objects
// are not counted per operation: a profile sums them over the live
// allocations, so a free touches no stack record. Alloc bytes and
// objects are counted per shard of the pointer table, under the shard
// lock the allocation's insert holds anyway (allocCounts), in an array
// indexed by the stack record's number: no atomic add on a record that
// every goroutine allocating from that call site would share. Each shard
// sees every call site, so those arrays cost 16 bytes per record per
// shard; they cover the first allocCountsMax records only (at most 1 MiB
// per Tracking), and the records numbered past them (a program with more
// call sites, or many label sets) count in atomics of their own.
//
// Invariants:
//   - Every live allocation is in the pointer table with its stack record;
//     a stack record's in-use bytes and objects are the sums over the live
//     allocations that point to it (computed when a profile is made), and
//     its alloc bytes and objects the sums over every allocation ever made
//     from it (over the shards' allocCounts at its number, or its own
//     spill counts past allocCountsMax). Both change
//     only for allocations the upstream granted and frees it accepted.
//   - Stack records are never removed: a profile keeps reporting the
//     allocations a call site made after they are freed (alloc_space), and
//     the set of call sites of a program is bounded.
//
// Frames of package mr at the innermost end of a stack (other adaptors
// stacked above this one) are dropped when symbolizing, so the innermost
// frame is the code that asked for the memory.
//
// Labels: each allocation also records the allocating goroutine's pprof
// labels (pprof.Do, pprof.SetGoroutineLabels; proflabel.go), and a stack
// record is one (stack, label set) pair, so the profile's samples carry
// the labels and `go tool pprof -tagfocus key=value` slices device memory
// by them. Each distinct label set seen at a call site is a record of its
// own, kept like every record: labels of bounded cardinality (a tenant, a
// model, a phase) cost little; a label per request grows the profile by a
// record per request and call site (TrackingOptions.NoLabels turns labels
// off).

package mr

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/gpu"
)

// maxStackDepth bounds the frames recorded per allocation.
const maxStackDepth = 64

// stackShards is the number of locks the stack table is split over.
const stackShards = 16

// TrackingOptions configure a Tracking adaptor.
type TrackingOptions struct {
	// Depth is the number of return addresses recorded per allocation
	// (calls inlined at one of them add frames to a report); 0 means 32,
	// and more than 64 is 64.
	Depth int
	// Skip drops that many more frames from the innermost end, for
	// callers that allocate through helpers of their own.
	Skip int
	// NoLabels leaves the goroutines' pprof labels out.
	NoLabels bool
}

// stackRecord is one interned call stack (with its pprof label set, for
// Tracking) and what it holds.
type stackRecord struct {
	pcs    []uintptr
	labels *labelSet // nil: none
	hash   uint64
	next   *stackRecord // same shard, same hash bucket
	id     int          // numbers a table's records 0, 1, 2... (allocCounts)
	// spill counts alloc bytes and objects for a record numbered past
	// allocCountsMax, which the shards' arrays do not cover.
	spill [2]atomic.Int64
}

type stackShard struct {
	mu sync.Mutex
	m  map[uint64]*stackRecord
}

// stackTable interns call stacks: one record per distinct stack, found by
// its hash in one of stackShards shards (Tracking's and History's).
type stackTable struct {
	shards [stackShards]stackShard
	n      atomic.Int64 // records made; the next record's id
}

// allocCounts are the alloc bytes and objects of the allocations recorded
// in one shard of Tracking's pointer table, by stack record id, guarded by
// that shard's lock. Its array is made at least allocCountsMin entries
// long, 128 bytes, so that two shards' arrays share no cache line, and at
// most allocCountsMax: a record numbered past it counts in its spill.
type allocCounts struct {
	n [][2]int64
}

const (
	allocCountsMin = 8
	allocCountsMax = 1024
)

// add counts an allocation of size bytes from stack record r.
func (c *allocCounts) add(r *stackRecord, size int) {
	id := r.id
	if id >= allocCountsMax {
		r.spill[0].Add(int64(size))
		r.spill[1].Add(1)
		return
	}
	if id >= len(c.n) {
		n := make([][2]int64, min(allocCountsMax, max(allocCountsMin, 2*len(c.n), id+1)))
		copy(n, c.n)
		c.n = n
	}
	c.n[id][0] += int64(size)
	c.n[id][1]++
}

// trackRecord is what Tracking keeps per live allocation.
type trackRecord struct {
	stack  *stackRecord
	stream uint64
	seq    uint64
}

// Tracking records every live allocation with its call stack. It is safe
// for concurrent use.
type Tracking struct {
	passThrough
	dev    gpu.Device
	depth  int
	skip   int
	labels bool         // record the goroutines' pprof labels
	known  knownStreams // streams checked (args.go)
	live   ptrTable[gpu.DevicePtr, trackRecord]
	stacks stackTable
	recent [256]atomic.Pointer[stackRecord] // by hash; see the file comment
	allocs [ptrShards]allocCounts           // by live's shard
	seq    atomic.Uint64
	leaks  trackingLeaks // tracking_leaks.go
}

// NewTracking returns a Tracking adaptor over upstream.
func NewTracking(upstream Resource, opts TrackingOptions) *Tracking {
	d := opts.Depth
	if d <= 0 {
		d = 32
	}
	d = min(d, maxStackDepth)
	if !opts.NoLabels {
		checkLabels()
	}
	return &Tracking{passThrough: passThrough{upstream}, dev: upstream.Device(), depth: d, skip: max(opts.Skip, 0),
		labels: !opts.NoLabels}
}

// hashPCs hashes a stack. Each PC is multiplied on its own (pcMix: the
// multiplies of different PCs overlap in the pipeline, and the frame
// pointer walk makes them anyway) and folded in with a rotate and an
// exclusive or (hashStep), so the chain from one PC to the next is two
// one-cycle instructions; hashFinish adds the length and spreads the
// result into the low bits, which index recent and the shards.
func hashPCs(pcs []uintptr) uint64 {
	var h uint64
	for _, pc := range pcs {
		h = hashStep(h, pcMix(pc))
	}
	return hashFinish(h, len(pcs))
}

// pcMix is the multiply the stack hash takes of a return address, and the
// frame-pointer walk of its table of addresses (callers_fp.go): the walk
// computes it once for both.
func pcMix(pc uintptr) uint64 { return uint64(pc) * 0x9E3779B97F4A7C15 }

func hashStep(h, m uint64) uint64 { return bits.RotateLeft64(h, 23) ^ m }

func hashFinish(h uint64, n int) uint64 {
	h ^= uint64(n) * 0xFF51AFD7ED558CCD
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>29
}

// intern returns the record of pcs, whose hashPCs is hp, creating it
// (with its own copy of the PCs) the first time.
func (t *Tracking) intern(pcs []uintptr, hp uint64, ls *labelSet) *stackRecord {
	h := withLabels(hp, ls)
	slot := &t.recent[h%uint64(len(t.recent))]
	if r := slot.Load(); r != nil && r.hash == h && r.labels == ls && slices.Equal(r.pcs, pcs) {
		return r
	}
	r := t.stacks.internHash(pcs, ls, h)
	slot.Store(r)
	return r
}

func stackHash(pcs []uintptr, ls *labelSet) uint64 { return withLabels(hashPCs(pcs), ls) }

// withLabels is the stack hash of a stack whose hashPCs is h, with label
// set ls.
func withLabels(h uint64, ls *labelSet) uint64 {
	if ls != nil {
		h ^= ls.hash * 0x9E3779B97F4A7C15
	}
	return h
}

// intern returns the record of pcs and label set ls (nil: none), creating
// it (with its own copy of the PCs) the first time.
func (t *stackTable) intern(pcs []uintptr, ls *labelSet) *stackRecord {
	return t.internHash(pcs, ls, stackHash(pcs, ls))
}

// internHash is intern of pcs and ls, whose hash is h.
func (t *stackTable) internHash(pcs []uintptr, ls *labelSet, h uint64) *stackRecord {
	sh := &t.shards[h%stackShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for r := sh.m[h]; r != nil; r = r.next {
		if r.labels == ls && slices.Equal(r.pcs, pcs) {
			return r
		}
	}
	if sh.m == nil {
		sh.m = make(map[uint64]*stackRecord)
	}
	r := &stackRecord{pcs: slices.Clone(pcs), labels: ls, hash: h, next: sh.m[h], id: int(t.n.Add(1) - 1)}
	sh.m[h] = r
	return r
}

// Allocate allocates from the upstream and records the caller's stack.
func (t *Tracking) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := t.known.checkAlloc("tracking", t.dev, size, s); zero || err != nil {
		return 0, err
	}
	var buf [maxStackDepth]uintptr
	// From Allocate's caller on (callers_fp.go).
	n, hp := callersFPHash(t.skip, buf[:t.depth])
	p, err := t.up.Allocate(size, s)
	if err != nil {
		return 0, fmt.Errorf("tracking: %w", err)
	}
	var ls *labelSet
	if t.labels {
		ls = goroutineLabels()
	}
	st := t.intern(buf[:n], hp, ls)
	rec := trackRecord{stack: st, stream: s.ID(), seq: t.seq.Add(1)}
	// A record replaced (memory freed around the adaptor and handed out
	// again) is gone from the live allocations, and so from in-use.
	ac := &t.allocs[t.live.shardIndex(p)]
	t.live.insert(p, size, rec, func() { ac.add(st, size) })
	return p, nil
}

// Deallocate frees p through the upstream and forgets it. Bad frees are
// refused with typed errors before they reach the upstream.
func (t *Tracking) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := t.known.checkFree("tracking", t.dev, p, size, s); null || err != nil {
		return err
	}
	_, err := t.live.take(p, size, func(trackRecord) error { return t.up.Deallocate(p, size, s) })
	if err != nil {
		return fmt.Errorf("tracking: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (t *Tracking) Device() gpu.Device { return t.dev }

// Allocation is one live allocation as Tracking saw it.
type Allocation struct {
	Ptr    gpu.DevicePtr
	Size   int
	Stream uint64    // Stream.ID of the allocating stream
	Seq    uint64    // 1 for the adaptor's first allocation, then counting up
	Stack  []uintptr // return addresses as runtime.Callers gives them, innermost first
	// Labels are the allocating goroutine's pprof labels, or nil.
	Labels map[string]string
}

// Frames resolves the allocation's stack into source locations,
// innermost first.
func (a Allocation) Frames() []runtime.Frame {
	var out []runtime.Frame
	fr := runtime.CallersFrames(a.Stack)
	for {
		f, more := fr.Next()
		out = append(out, f)
		if !more {
			return out
		}
	}
}

// Live returns every live allocation, oldest first.
func (t *Tracking) Live() []Allocation {
	var out []Allocation
	for _, l := range t.liveAllocs() {
		out = append(out, l.Allocation)
	}
	return out
}

type liveAlloc struct {
	Allocation
	rec *stackRecord
}

func (t *Tracking) liveAllocs() []liveAlloc {
	var out []liveAlloc
	t.live.each(func(p gpu.DevicePtr, size int, r trackRecord) {
		out = append(out, liveAlloc{Allocation{Ptr: p, Size: size, Stream: r.stream, Seq: r.seq, Stack: r.stack.pcs,
			Labels: r.stack.labels.Map()}, r.stack})
	})
	slices.SortFunc(out, func(a, b liveAlloc) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// WriteLeakReport writes the live allocations to w, grouped by call stack,
// the stacks holding the most bytes first, each with its source location
// (frames of package mr at the innermost end left out), then the
// allocations whose owners dropped them and the garbage collector freed
// (MarkLeaked), then the captures
// of the device begun with BeginCapture and not released (their graphs'
// memory is held until Capture.Release), with where each began. With
// nothing live it writes only the summary line.
func (t *Tracking) WriteLeakReport(w io.Writer) error {
	type group struct {
		stack        []uintptr
		labels       *labelSet
		bytes, count int
		oldest       Allocation
	}
	byStack := make(map[*stackRecord]*group)
	var order []*group
	var total, count int
	for _, a := range t.liveAllocs() { // oldest first: a group's first is its oldest
		g := byStack[a.rec]
		if g == nil {
			g = &group{stack: a.Stack, labels: a.rec.labels, oldest: a.Allocation}
			byStack[a.rec] = g
			order = append(order, g)
		}
		g.bytes += a.Size
		g.count++
		total += a.Size
		count++
	}
	slices.SortStableFunc(order, func(a, b *group) int { return cmp.Compare(b.bytes, a.bytes) })
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "streamalloc: %d bytes live in %d allocations from %d call sites\n", total, count, len(order))
	for _, g := range order {
		fmt.Fprintf(bw, "\n%d bytes in %d allocations; oldest %#x (%d bytes, stream %d, allocation #%d)",
			g.bytes, g.count, uint64(g.oldest.Ptr), g.oldest.Size, g.oldest.Stream, g.oldest.Seq)
		if g.labels != nil {
			fmt.Fprintf(bw, "; labels %s", g.labels.String())
		}
		bw.WriteString(":\n")
		for _, f := range trimFrames(Allocation{Stack: g.stack}.Frames()) {
			fmt.Fprintf(bw, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		}
	}
	t.writeLeaked(bw)
	writeUnreleasedCaptures(bw, t.dev)
	return bw.Flush()
}

// mrPackage prefixes the functions of this package; such frames at the
// innermost end of a stack are adaptors stacked above Tracking.
const mrPackage = "github.com/streamalloc/streamalloc/mr."

func inMR(fn string) bool { return strings.HasPrefix(fn, mrPackage) }

// trimFrames drops frames of package mr from the innermost end (keeping at
// least one frame).
func trimFrames(fs []runtime.Frame) []runtime.Frame {
	i := 0
	for i < len(fs)-1 && inMR(fs[i].Function) {
		i++
	}
	return fs[i:]
}

// Profile returns a profile of the device memory allocated through the
// adaptor, in the layout of a Go heap profile: sample types alloc_objects
// (count), alloc_space (bytes), inuse_objects (count) and inuse_space
// (bytes), inuse_space by default, one sample per call stack. Every
// allocation is recorded (the period is 1 byte). Locations carry their
// functions, files and lines, so pprof needs no binary to show them.
func (t *Tracking) Profile() *profile.Profile {
	var recs []*stackRecord
	for i := range t.stacks.shards {
		sh := &t.stacks.shards[i]
		sh.mu.Lock()
		for _, r := range sh.m {
			for ; r != nil; r = r.next {
				recs = append(recs, r)
			}
		}
		sh.mu.Unlock()
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		TimeNanos:         time.Now().UnixNano(),
		Comments:          []string{fmt.Sprintf("streamalloc device memory, device %d", t.dev.Ordinal())},
	}
	exe, _ := os.Executable()
	mapping := &profile.Mapping{ID: 1, Limit: ^uint64(0), File: exe,
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	p.Mapping = []*profile.Mapping{mapping}
	b := profileBuilder{p: p, mapping: mapping,
		locs: make(map[uintptr]*profile.Location), funcs: make(map[[2]string]*profile.Function)}
	// Stable sample order: by stack hash, then PCs, then labels.
	slices.SortFunc(recs, func(a, b *stackRecord) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		if c := slices.Compare(a.pcs, b.pcs); c != 0 {
			return c
		}
		return strings.Compare(a.labels.keyString(), b.labels.keyString())
	})
	inuse := make(map[*stackRecord][2]int64)
	t.live.each(func(_ gpu.DevicePtr, size int, r trackRecord) {
		u := inuse[r.stack]
		inuse[r.stack] = [2]int64{u[0] + int64(size), u[1] + 1}
	})
	allocs := make([][2]int64, min(t.stacks.n.Load(), allocCountsMax))
	for i := range t.allocs {
		t.live.underShard(i, func() {
			for id, c := range t.allocs[i].n {
				if id < len(allocs) {
					allocs[id][0] += c[0]
					allocs[id][1] += c[1]
				}
			}
		})
	}
	for _, r := range recs {
		ab, ao := r.spill[0].Load(), r.spill[1].Load()
		if r.id < len(allocs) {
			ab, ao = ab+allocs[r.id][0], ao+allocs[r.id][1]
		}
		ib, iobj := inuse[r][0], inuse[r][1]
		if ao == 0 {
			continue
		}
		s := &profile.Sample{Value: []int64{ao, ab, iobj, ib}}
		if r.labels != nil {
			s.Label = make(map[string][]string, len(r.labels.labels))
			for _, l := range r.labels.labels {
				s.Label[l.Key] = []string{l.Value}
			}
		}
		pcs := r.pcs
		for len(pcs) > 1 && b.allInMR(pcs[0]) {
			pcs = pcs[1:]
		}
		for _, pc := range pcs {
			if loc := b.location(pc); loc != nil {
				s.Location = append(s.Location, loc)
			}
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

// WriteProfile writes Profile to w in pprof's gzipped protocol buffer
// format, for `go tool pprof`.
func (t *Tracking) WriteProfile(w io.Writer) error {
	if err := t.Profile().Write(w); err != nil {
		return fmt.Errorf("tracking: write profile: %w", err)
	}
	return nil
}

// profileBuilder turns PCs into the profile's locations and functions,
// each made once.
type profileBuilder struct {
	p       *profile.Profile
	mapping *profile.Mapping
	locs    map[uintptr]*profile.Location
	funcs   map[[2]string]*profile.Function
}

// frames returns the frames of one return address: the function it is in
// and the functions inlined into it there, innermost first.
func pcFrames(pc uintptr) []runtime.Frame {
	var out []runtime.Frame
	fr := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := fr.Next()
		if f.Function == "runtime.goexit" {
			break
		}
		out = append(out, f)
		if !more {
			break
		}
	}
	return out
}

// allInMR reports whether every frame at pc is in package mr.
func (b *profileBuilder) allInMR(pc uintptr) bool {
	fs := pcFrames(pc)
	for _, f := range fs {
		if !inMR(f.Function) {
			return false
		}
	}
	return len(fs) > 0
}

func (b *profileBuilder) location(pc uintptr) *profile.Location {
	if loc, ok := b.locs[pc]; ok {
		return loc
	}
	fs := pcFrames(pc)
	if len(fs) == 0 {
		b.locs[pc] = nil
		return nil
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.mapping, Address: uint64(pc)}
	for _, f := range fs {
		key := [2]string{f.Function, f.File}
		fn := b.funcs[key]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: f.Function,
				SystemName: f.Function, Filename: f.File}
			if f.Func != nil {
				fn.StartLine = int64(startLine(f))
			}
			b.funcs[key] = fn
			b.p.Function = append(b.p.Function, fn)
		}
		loc.Line = append(loc.Line, profile.Line{Function: fn, Line: int64(f.Line)})
	}
	b.locs[pc] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// startLine is the line of the function's entry, or 0 if unknown.
func startLine(f runtime.Frame) int {
	_, line := f.Func.FileLine(f.Entry)
	return line
}
