// Package mrtest is the conformance suite that every memory resource and
// adaptor of streamalloc passes: the contracts of package mr (zero size,
// alignment, typed errors for bad input that change nothing, out of
// memory), and stream-ordered correctness under real use: data written by a
// kernel on the allocation's stream and checked by a kernel before the free,
// many goroutines each on its own stream, memory allocated on one stream and
// freed on another and then reused, and nothing held upstream once
// everything was freed and released.
//
// A resource's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		dev := testdev.Device(t)
//		mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
//			p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
//			if err != nil {
//				tb.Fatal(err)
//			}
//			return p
//		}, dev, mrtest.Options{DetectsDoubleFree: true, Foreign: testdev.Foreign(t)})
//	}
//
// The cases, as Run names its subtests:
//
//	ZeroSize          Allocate(0) is the null pointer, Deallocate(0, 0) a no-op
//	Alignment         sizes from 1 B to MaxSize: aligned, disjoint, patterns kept
//	BadInput          negative size, nil stream, another device's stream,
//	                  unknown and interior pointers, wrong sizes, double free:
//	                  each its sentinel, usage unchanged, the allocation intact
//	Pattern           random allocations and frees on one stream, each filled
//	                  by a kernel and checked before its free
//	Goroutines        Options.Goroutines goroutines, each on its own stream
//	CrossStream       allocated and written on S1, read and freed on S2 behind
//	                  an event, while S1 allocates again and writes at once
//	CrossStreamReuse  64 or more rounds of allocate on S1, free on S2: the
//	                  resource's peak reserved memory, and what the device
//	                  lost, stay within 16 blocks or 64 MiB, whichever is more
//	OutOfMemory       an *mr.OutOfMemoryError naming the request, the stream
//	                  and the resource, for OOMSize and for sizes within
//	                  2 MiB of 2^63 (no rounding may overflow); usage
//	                  unchanged; the resource works afterwards
//	ReleaseAll        blocks allocated on several streams, freed on others
//	Capture           a loop of allocate, fill, check, free captured on one and
//	                  on two streams and replayed while other streams allocate
//	                  and fill with another pattern: no corrupted word; a block
//	                  allocated before the capture and freed in it, graph
//	                  outputs; or, with RefusesCapture, ErrStreamCapturing
//	                  with the capture left intact
//
// After each case every allocation is freed: Usage().Used is 0, after
// Release Usage().Reserved is 0, and on the simulator the device's memory
// is back where it was before the resource was made.
//
// The suite names no backend: what it needs besides dev, a device whose
// streams the resources must refuse, comes from the caller
// (Options.Foreign; a simulated device will do, also when dev is a GPU).
//
// Every subtest makes a fresh resource, so a failure in one does not leak
// into the next. The suite runs on the simulator (where a missing event
// wait is a data race under -race, and device memory use is exact) and on
// the GPU (through the GPU test script, with STREAMALLOC_DEVICE=cuda).
//
// Design: each subtest checks one contract and names the exact error it
// expects (errors.Is against the mr sentinels). Kernel results are read
// back through an error counter in device memory that the check kernel
// increments, one counter per goroutine, so a corruption anywhere fails the
// test with the count of bad words.
package mrtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
)

// Factory makes a fresh resource on dev for one subtest. It may register
// cleanups on tb; it must fail tb rather than return nil.
type Factory func(tb testing.TB, dev gpu.Device) mr.Resource

// Options adapt the suite to what a resource serves.
type Options struct {
	// MinSize and MaxSize bound the sizes of the random allocations
	// (defaults 1 and 4 MiB); sizes are drawn log-uniformly between them.
	// The alignment test uses sizes up to MaxSize too.
	MinSize, MaxSize int
	// OOMSize is a request the resource must refuse with an error
	// matching mr.ErrOutOfMemory (default 1<<46, more than any device).
	OOMSize int
	// DetectsDoubleFree: the resource reports a second free of a pointer
	// as mr.ErrDoubleFree. When false, mr.ErrUnknownPointer is accepted
	// too (the contract says ErrDoubleFree "where it can tell").
	DetectsDoubleFree bool
	// NoKernels: the memory is not device memory that kernels can touch
	// (pinned host memory); the data tests then check the contracts
	// without writing patterns.
	NoKernels bool
	// Foreign is a device that the resources under test do not belong
	// to, of another backend or not: BadInput checks that a stream of it
	// is refused with gpu.ErrWrongDevice. Required.
	Foreign gpu.Device
	// RefusesCapture: the resource cannot serve a capturing stream (Direct,
	// Managed) and must refuse with mr.ErrStreamCapturing; otherwise the
	// capture tests check that it serves captures safely.
	RefusesCapture bool
	// Goroutines is the number of goroutines (each on its own stream) of
	// the concurrency test (default 8); Iterations the operations per
	// goroutine or sequence (default 200; a quarter under -short).
	Goroutines, Iterations int
}

func (o *Options) defaults() {
	if o.MinSize <= 0 {
		o.MinSize = 1
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 4 << 20
	}
	o.MaxSize = max(o.MaxSize, o.MinSize)
	if o.OOMSize <= 0 {
		o.OOMSize = 1 << 46
	}
	if o.Goroutines <= 0 {
		o.Goroutines = 8
	}
	if o.Iterations <= 0 {
		o.Iterations = 200
		if testing.Short() {
			o.Iterations = 50
		}
	}
}

// Run runs the conformance suite against resources made by newResource on
// dev. Subtests run one after another (they measure the device's memory).
func Run(t *testing.T, newResource Factory, dev gpu.Device, opts Options) {
	t.Helper()
	if opts.Foreign == nil || opts.Foreign == dev {
		t.Fatal("mrtest: Options.Foreign must be a device other than dev, to check that its streams are refused (a simulated device will do)")
	}
	opts.defaults()
	for _, tc := range []struct {
		name string
		f    func(*env)
	}{
		{"ZeroSize", testZeroSize},
		{"Alignment", testAlignment},
		{"BadInput", testBadInput},
		{"Pattern", testPattern},
		{"Goroutines", testGoroutines},
		{"CrossStream", testCrossStream},
		{"CrossStreamReuse", testCrossStreamReuse},
		{"OutOfMemory", testOutOfMemory},
		{"ReleaseAll", testReleaseAll},
		{"Capture", testCapture},
		{"AdoptedStreams", testAdoptedStreams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, dev, newResource, opts)
			tc.f(e)
			e.finish()
		})
	}
}

// env is one subtest's resource, streams and device counters.
type env struct {
	t        *testing.T
	dev      gpu.Device
	r        mr.Resource
	opts     Options
	k        *kernels.Kernels
	baseline uint64 // device bytes in use before the resource existed
	counters gpu.DevicePtr
	nCount   int
	streams  []gpu.Stream
}

const maxCounters = 64

func newEnv(t *testing.T, dev gpu.Device, newResource Factory, opts Options) *env {
	e := &env{t: t, dev: dev, opts: opts, nCount: maxCounters}
	var err error
	if !opts.NoKernels {
		if e.k, err = kernels.Load(dev); err != nil {
			t.Fatalf("load kernels: %v", err)
		}
	}
	if e.counters, err = dev.Malloc(4 * maxCounters); err != nil {
		t.Fatalf("error counters: %v", err)
	}
	t.Cleanup(func() {
		dev.Synchronize()
		dev.Free(e.counters)
	})
	s := e.stream()
	if err := dev.MemsetD8Async(e.counters, 0, 4*maxCounters, s); err != nil {
		t.Fatalf("clear counters: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	e.baseline = e.deviceUsed()
	e.r = newResource(t, dev)
	if e.r == nil {
		t.Fatal("mrtest: factory returned nil")
	}
	if e.r.Device() != dev {
		t.Fatalf("resource's Device() = %v, want the device it was made on", e.r.Device())
	}
	return e
}

// stream returns a new stream, destroyed (after its work) at the end of the
// subtest.
func (e *env) stream() gpu.Stream {
	s, err := e.dev.NewStream()
	if err != nil {
		e.t.Fatalf("new stream: %v", err)
	}
	e.streams = append(e.streams, s)
	e.t.Cleanup(func() {
		s.Synchronize()
		s.Destroy()
	})
	return s
}

// deviceUsed is the device memory in use, on the simulator (where it is
// exact); 0 on a real GPU, where other contexts and the driver move it.
func (e *env) deviceUsed() uint64 {
	if !e.dev.Properties().Simulated {
		return 0
	}
	free, total, err := e.dev.MemGetInfo()
	if err != nil {
		e.t.Fatalf("MemGetInfo: %v", err)
	}
	return total - free
}

func (e *env) usage() (mr.Usage, bool) {
	if u, ok := e.r.(mr.UsageReporter); ok {
		return u.Usage(), true
	}
	return mr.Usage{}, false
}

// finish checks that, with every allocation of the subtest freed, the
// resource uses nothing, and once released holds nothing upstream: its
// Usage says so, and on the simulator the device's memory is back where it
// was before the resource was made.
func (e *env) finish() {
	t := e.t
	if t.Failed() {
		return
	}
	if err := e.dev.Synchronize(); err != nil {
		t.Fatalf("synchronize: %v", err)
	}
	if u, ok := e.usage(); ok && u.Used != 0 {
		t.Errorf("after every allocation was freed: Usage().Used = %d", u.Used)
	}
	if rel, ok := e.r.(mr.Releaser); ok {
		if err := rel.Release(); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if u, ok := e.usage(); ok && u.Reserved != 0 {
			t.Errorf("after Release: Usage().Reserved = %d, want 0", u.Reserved)
		}
	}
	if err := e.dev.Synchronize(); err != nil {
		t.Fatalf("synchronize: %v", err)
	}
	if used := e.deviceUsed(); used != e.baseline {
		t.Errorf("device memory in use: %d bytes, %d before the resource was made: the resource holds %d bytes upstream",
			used, e.baseline, int64(used)-int64(e.baseline))
	}
}

// counter returns the i-th error counter's address.
func (e *env) counter(i int) gpu.DevicePtr { return e.counters + gpu.DevicePtr(4*(i%e.nCount)) }

// readCounter synchronizes s and returns counter i.
func (e *env) readCounter(i int, s gpu.Stream) uint32 {
	var b [4]byte
	if err := e.dev.CopyDtoHAsync(b[:], e.counter(i), s); err != nil {
		e.t.Fatalf("read counter: %v", err)
	}
	if err := s.Synchronize(); err != nil {
		e.t.Fatalf("synchronize: %v", err)
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// fill writes the pattern of seed over the n bytes at p, on s.
func (e *env) fill(s gpu.Stream, p gpu.DevicePtr, n int, seed uint32) {
	if e.k == nil || n < 4 {
		return
	}
	if err := e.k.Fill(s, p, n/4, seed); err != nil {
		e.t.Fatalf("fill %#x (%d bytes): %v", uint64(p), n, err)
	}
}

// check enqueues on s a comparison of the n bytes at p with seed's
// pattern, counting mismatches in counter i.
func (e *env) check(s gpu.Stream, p gpu.DevicePtr, n int, seed uint32, i int) {
	if e.k == nil || n < 4 {
		return
	}
	if err := e.k.Check(s, p, n/4, seed, e.counter(i)); err != nil {
		e.t.Fatalf("check %#x (%d bytes): %v", uint64(p), n, err)
	}
}

func (e *env) alloc(n int, s gpu.Stream) gpu.DevicePtr {
	e.t.Helper()
	p, err := e.r.Allocate(n, s)
	if err != nil {
		e.t.Fatalf("Allocate(%d): %v", n, err)
	}
	if n > 0 && (p == 0 || p%mr.Alignment != 0) {
		e.t.Fatalf("Allocate(%d) = %#x: not a non-null multiple of %d", n, uint64(p), mr.Alignment)
	}
	return p
}

func (e *env) free(p gpu.DevicePtr, n int, s gpu.Stream) {
	e.t.Helper()
	if err := e.r.Deallocate(p, n, s); err != nil {
		e.t.Fatalf("Deallocate(%#x, %d): %v", uint64(p), n, err)
	}
}

// randSize draws a size log-uniformly in [MinSize, MaxSize].
func (e *env) randSize(r *rand.Rand) int {
	lo, hi := float64(e.opts.MinSize), float64(e.opts.MaxSize)
	if lo == hi {
		return e.opts.MinSize
	}
	n := int(lo * math.Pow(hi/lo, r.Float64()))
	return min(max(n, e.opts.MinSize), e.opts.MaxSize)
}

type span struct {
	p gpu.DevicePtr
	n int
}

func overlaps(a, b span) bool {
	return a.p < b.p+gpu.DevicePtr(max(b.n, 1)) && b.p < a.p+gpu.DevicePtr(max(a.n, 1))
}

// --- The subtests.

func testZeroSize(e *env) {
	s := e.stream()
	before, rep := e.usage()
	p, err := e.r.Allocate(0, s)
	if p != 0 || err != nil {
		e.t.Fatalf("Allocate(0) = %#x, %v; want 0, nil", uint64(p), err)
	}
	if err := e.r.Deallocate(0, 0, s); err != nil {
		e.t.Fatalf("Deallocate(0, 0) = %v, want nil", err)
	}
	if after, _ := e.usage(); rep && after != before {
		e.t.Errorf("zero-size calls changed usage: %+v -> %+v", before, after)
	}
}

func testAlignment(e *env) {
	s := e.stream()
	var live []span
	for _, n := range []int{1, 3, 4, 255, 256, 257, 511, 1000, 4095, 4096, 4097, 65535, 1 << 20, 1<<20 + 1, 3<<20 + 17, 4 << 20} {
		if n < e.opts.MinSize || n > e.opts.MaxSize {
			continue
		}
		p := e.alloc(n, s)
		sp := span{p, n}
		for _, o := range live {
			if overlaps(sp, o) {
				e.t.Fatalf("Allocate(%d) = %#x overlaps live [%#x, +%d)", n, uint64(p), uint64(o.p), o.n)
			}
		}
		live = append(live, sp)
		e.fill(s, p, n, uint32(n))
	}
	for i, sp := range live {
		e.check(s, sp.p, sp.n, uint32(sp.n), 0)
		if i%2 == 0 {
			e.free(sp.p, sp.n, s)
		}
	}
	for i, sp := range live {
		if i%2 == 1 {
			e.free(sp.p, sp.n, s)
		}
	}
	if n := e.readCounter(0, s); n != 0 {
		e.t.Fatalf("%d words of the allocations did not hold their pattern", n)
	}
}

func testBadInput(e *env) {
	t := e.t
	s := e.stream()
	n := min(max(4096, e.opts.MinSize), e.opts.MaxSize)
	p := e.alloc(n, s)
	e.fill(s, p, n, 7)
	before, rep := e.usage()
	unchanged := func(what string) {
		t.Helper()
		if after, _ := e.usage(); rep && after != before {
			t.Errorf("%s changed usage: %+v -> %+v", what, before, after)
		}
	}

	foreign, err := e.opts.Foreign.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Destroy()

	type badCall struct {
		name string
		call func() error
		want []error
	}
	calls := []badCall{
		{"Allocate(-1)", func() error { _, err := e.r.Allocate(-1, s); return err }, []error{mr.ErrInvalidSize}},
		{"Allocate(nil stream)", func() error { _, err := e.r.Allocate(n, nil); return err }, []error{gpu.ErrInvalidHandle}},
		{"Allocate(stream of another device)", func() error { _, err := e.r.Allocate(n, foreign); return err }, []error{gpu.ErrWrongDevice}},
		{"Deallocate(size -1)", func() error { return e.r.Deallocate(p, -1, s) }, []error{mr.ErrInvalidSize}},
		{"Deallocate(nil stream)", func() error { return e.r.Deallocate(p, n, nil) }, []error{gpu.ErrInvalidHandle}},
		{"Deallocate(stream of another device)", func() error { return e.r.Deallocate(p, n, foreign) }, []error{gpu.ErrWrongDevice}},
		{"Deallocate(unknown pointer)", func() error { return e.r.Deallocate(256, n, s) }, []error{mr.ErrUnknownPointer}},
		{"Deallocate(wrong size)", func() error { return e.r.Deallocate(p, n+1, s) }, []error{mr.ErrSizeMismatch}},
		{"Deallocate(wrong smaller size)", func() error { return e.r.Deallocate(p, n-1, s) }, []error{mr.ErrSizeMismatch}},
	}
	if n > mr.Alignment {
		calls = append(calls, badCall{"Deallocate(pointer inside an allocation)",
			func() error { return e.r.Deallocate(p+mr.Alignment, n-mr.Alignment, s) }, []error{mr.ErrUnknownPointer}})
	}
	for _, tc := range calls {
		err := tc.call()
		ok := false
		for _, w := range tc.want {
			ok = ok || errors.Is(err, w)
		}
		if !ok {
			t.Errorf("%s = %v, want an error matching %v", tc.name, err, tc.want)
		}
		unchanged(tc.name)
	}

	// The allocation survived all of that: its data is intact and it
	// frees exactly once.
	e.check(s, p, n, 7, 0)
	e.free(p, n, s)
	err = e.r.Deallocate(p, n, s)
	want := []error{mr.ErrDoubleFree}
	if !e.opts.DetectsDoubleFree {
		want = append(want, mr.ErrUnknownPointer)
	}
	if !errors.Is(err, want[0]) && (len(want) == 1 || !errors.Is(err, want[1])) {
		t.Errorf("double free = %v, want an error matching %v", err, want)
	}
	if c := e.readCounter(0, s); c != 0 {
		t.Errorf("%d words of the allocation changed during the bad calls", c)
	}
	// The resource still works.
	q := e.alloc(n, s)
	e.fill(s, q, n, 8)
	e.check(s, q, n, 8, 1)
	e.free(q, n, s)
	if c := e.readCounter(1, s); c != 0 {
		t.Errorf("%d bad words in an allocation after the bad calls", c)
	}
}

// testPattern: random allocations and frees on one stream, each
// allocation filled on the stream and checked before its free.
func testPattern(e *env) {
	s := e.stream()
	r := rand.New(rand.NewPCG(1, 1))
	type live struct {
		span
		seed uint32
	}
	var ls []live
	for i := range e.opts.Iterations {
		if len(ls) > 0 && (len(ls) >= 32 || r.IntN(3) == 0) {
			j := r.IntN(len(ls))
			l := ls[j]
			e.check(s, l.p, l.n, l.seed, 0)
			e.free(l.p, l.n, s)
			ls[j] = ls[len(ls)-1]
			ls = ls[:len(ls)-1]
			continue
		}
		n := e.randSize(r)
		p := e.alloc(n, s)
		l := live{span{p, n}, uint32(i) * 7919}
		for _, o := range ls {
			if overlaps(l.span, o.span) {
				e.t.Fatalf("Allocate(%d) = %#x overlaps live [%#x, +%d)", n, uint64(p), uint64(o.p), o.n)
			}
		}
		e.fill(s, p, n, l.seed)
		ls = append(ls, l)
	}
	for _, l := range ls {
		e.check(s, l.p, l.n, l.seed, 0)
		e.free(l.p, l.n, s)
	}
	if c := e.readCounter(0, s); c != 0 {
		e.t.Fatalf("%d words did not hold their pattern until their free", c)
	}
}

// testGoroutines: Goroutines goroutines, each on its own stream, allocate,
// fill, check and free at random at once.
func testGoroutines(e *env) {
	g := e.opts.Goroutines
	streams := make([]gpu.Stream, g)
	for i := range streams {
		streams[i] = e.stream()
	}
	var wg sync.WaitGroup
	errs := make([]error, g)
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.worker(i, streams[i], e.opts.Iterations)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			e.t.Errorf("goroutine %d: %v", i, err)
		}
	}
	for i := range g {
		if c := e.readCounter(i, streams[i]); c != 0 {
			e.t.Errorf("goroutine %d: %d words did not hold their pattern", i, c)
		}
	}
}

// worker is one goroutine of testGoroutines; it reports instead of
// failing, as only the test's goroutine may call Fatal.
func (e *env) worker(id int, s gpu.Stream, iters int) error {
	r := rand.New(rand.NewPCG(uint64(id), 2))
	var ls []span
	var seeds []uint32
	for i := range iters {
		if len(ls) > 0 && (len(ls) >= 8 || r.IntN(2) == 0) {
			j := r.IntN(len(ls))
			if e.k != nil && ls[j].n >= 4 {
				if err := e.k.Check(s, ls[j].p, ls[j].n/4, seeds[j], e.counter(id)); err != nil {
					return err
				}
			}
			if err := e.r.Deallocate(ls[j].p, ls[j].n, s); err != nil {
				return fmt.Errorf("Deallocate(%#x, %d): %w", uint64(ls[j].p), ls[j].n, err)
			}
			ls[j], seeds[j] = ls[len(ls)-1], seeds[len(seeds)-1]
			ls, seeds = ls[:len(ls)-1], seeds[:len(seeds)-1]
			continue
		}
		n := e.randSize(r) / 4 // keep the total modest: g goroutines at once
		n = max(n, e.opts.MinSize)
		p, err := e.r.Allocate(n, s)
		if err != nil {
			return fmt.Errorf("Allocate(%d): %w", n, err)
		}
		if p == 0 || p%mr.Alignment != 0 {
			return fmt.Errorf("Allocate(%d) = %#x, misaligned", n, uint64(p))
		}
		seed := uint32(id<<20 + i)
		if e.k != nil && n >= 4 {
			if err := e.k.Fill(s, p, n/4, seed); err != nil {
				return err
			}
		}
		ls, seeds = append(ls, span{p, n}), append(seeds, seed)
	}
	for j := range ls {
		if e.k != nil && ls[j].n >= 4 {
			if err := e.k.Check(s, ls[j].p, ls[j].n/4, seeds[j], e.counter(id)); err != nil {
				return err
			}
		}
		if err := e.r.Deallocate(ls[j].p, ls[j].n, s); err != nil {
			return err
		}
	}
	return nil
}

// testCrossStream: memory allocated and written on S1 is read and freed on
// S2 (ordered by an event, as the contract requires of the caller), while
// S1 at once allocates again and writes. If the resource handed S1 the
// memory S2 still reads without ordering S1 after S2's free, the check on
// S2 sees S1's new pattern (and -race on the simulator reports the race).
func testCrossStream(e *env) {
	s1, s2 := e.stream(), e.stream()
	ev, err := e.dev.NewEvent(false)
	if err != nil {
		e.t.Fatal(err)
	}
	defer ev.Destroy()
	n := min(max(1<<20, e.opts.MinSize), e.opts.MaxSize)
	var held []span
	for i := range e.opts.Iterations / 4 {
		p := e.alloc(n, s1)
		e.fill(s1, p, n, uint32(i))
		if err := ev.Record(s1); err != nil {
			e.t.Fatal(err)
		}
		if err := s2.WaitEvent(ev); err != nil {
			e.t.Fatal(err)
		}
		if e.k != nil {
			// Keep S2 busy so that S2's check would run after any
			// unordered write of S1.
			if err := e.k.Spin(s2, 50*time.Microsecond); err != nil {
				e.t.Fatal(err)
			}
		}
		e.check(s2, p, n, uint32(i), 0)
		e.free(p, n, s2)
		// S1 allocates again at once, and overwrites what it got.
		q := e.alloc(n, s1)
		e.fill(s1, q, n, ^uint32(i))
		held = append(held, span{q, n})
		if len(held) > 2 {
			h := held[0]
			e.check(s1, h.p, h.n, ^uint32(i-2), 1)
			e.free(h.p, h.n, s1)
			held = held[1:]
		}
	}
	for _, h := range held {
		e.free(h.p, h.n, s1)
	}
	if c := e.readCounter(0, s2); c != 0 {
		e.t.Errorf("%d words read on S2 were overwritten before S2's free", c)
	}
	if c := e.readCounter(1, s1); c != 0 {
		e.t.Errorf("%d words of S1's allocations changed", c)
	}
}

// testCrossStreamReuse: memory allocated on S1 and freed on S2, over and
// over, is reused: it neither stays stranded in S1's free list nor is held
// until the resource is released.
func testCrossStreamReuse(e *env) {
	s1, s2 := e.stream(), e.stream()
	n := min(max(1<<20, e.opts.MinSize), e.opts.MaxSize)
	iters := max(64, e.opts.Iterations/2)
	start := e.deviceUsed()
	for i := range iters {
		p := e.alloc(n, s1)
		e.fill(s1, p, n, uint32(i))
		// The caller orders S2's use after S1's write.
		ev, err := e.dev.NewEvent(false)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := ev.Record(s1); err != nil {
			e.t.Fatal(err)
		}
		if err := s2.WaitEvent(ev); err != nil {
			e.t.Fatal(err)
		}
		ev.Destroy()
		e.check(s2, p, n, uint32(i), 0)
		e.free(p, n, s2)
	}
	// Memory in use may grow by some chunks, never by one block per
	// iteration.
	bound := uint64(max(16*n, 64<<20))
	if u, ok := e.usage(); ok && u.PeakReserved > bound {
		e.t.Errorf("%d allocations of %d bytes freed on another stream: peak reserved %d bytes, above %d: freed memory was not reused",
			iters, n, u.PeakReserved, bound)
	}
	if grew := e.deviceUsed() - start; grew > bound {
		e.t.Errorf("%d allocations of %d bytes freed on another stream: the device lost %d bytes, above %d: freed memory was not reused",
			iters, n, grew, bound)
	}
	if c := e.readCounter(0, s2); c != 0 {
		e.t.Errorf("%d bad words", c)
	}
}

func testOutOfMemory(e *env) {
	s := e.stream()
	// OOMSize, then sizes no arithmetic on them may overflow: where
	// rounding up to the alignment or to a chunk would pass 2^63.
	for _, n := range []int{e.opts.OOMSize, 1 << 62, math.MaxInt - 2<<20 + 1, math.MaxInt - (mr.Alignment - 1),
		math.MaxInt - (mr.Alignment - 2), math.MaxInt} {
		before, _ := e.usage()
		p, err := e.r.Allocate(n, s)
		if err == nil {
			e.r.Deallocate(p, n, s)
			e.t.Fatalf("Allocate(%d) succeeded, want an error matching ErrOutOfMemory", n)
		}
		if !errors.Is(err, mr.ErrOutOfMemory) {
			e.t.Fatalf("Allocate(%d) = %v, want an error matching ErrOutOfMemory", n, err)
		}
		var oom *mr.OutOfMemoryError
		if !errors.As(err, &oom) {
			e.t.Fatalf("Allocate(%d) = %v (%T), want an *mr.OutOfMemoryError", n, err, err)
		}
		if oom.Requested != n || oom.Resource == "" || oom.Stream != s.ID() {
			e.t.Errorf("OutOfMemoryError %+v: want Requested %d, a Resource name and Stream %d", *oom, n, s.ID())
		}
		if u, ok := e.usage(); ok && (u.Used != 0 || u.Reserved != before.Reserved) {
			e.t.Errorf("after refusing %d bytes: usage %+v, was %+v", n, u, before)
		}
	}
	// It works afterwards.
	m := min(max(1<<16, e.opts.MinSize), e.opts.MaxSize)
	q := e.alloc(m, s)
	e.fill(s, q, m, 3)
	e.check(s, q, m, 3, 0)
	e.free(q, m, s)
	if c := e.readCounter(0, s); c != 0 {
		e.t.Errorf("%d bad words after out of memory", c)
	}
}

// testReleaseAll: blocks allocated on several streams and freed on others;
// then finish checks that nothing stays reserved after Release.
func testReleaseAll(e *env) {
	ss := []gpu.Stream{e.stream(), e.stream(), e.stream()}
	r := rand.New(rand.NewPCG(5, 5))
	var ls []span
	var on []int
	for range e.opts.Iterations / 2 {
		i := r.IntN(len(ss))
		n := e.randSize(r)
		p := e.alloc(n, ss[i])
		ls, on = append(ls, span{p, n}), append(on, i)
	}
	if u, ok := e.usage(); ok {
		sum := uint64(0)
		for _, l := range ls {
			sum += uint64(l.n)
		}
		if u.Used < sum || u.Reserved < u.Used || u.PeakUsed < u.Used || u.PeakReserved < u.Reserved {
			e.t.Errorf("with %d bytes live: usage %+v", sum, u)
		}
	}
	// Free each on the next stream, after the allocation's stream.
	ev, err := e.dev.NewEvent(false)
	if err != nil {
		e.t.Fatal(err)
	}
	defer ev.Destroy()
	for j, l := range ls {
		from, to := ss[on[j]], ss[(on[j]+1)%len(ss)]
		if err := ev.Record(from); err != nil {
			e.t.Fatal(err)
		}
		if err := to.WaitEvent(ev); err != nil {
			e.t.Fatal(err)
		}
		e.free(l.p, l.n, to)
	}
}
