// Package soak runs the recommended stack under load for a set time and
// reports whether it kept every byte: the long-running check that unit
// tests and benchmarks are too short to be.
//
// Run drives a Pool over an Async resource with its own driver pool,
// under a Stats adaptor, from Options.Goroutines goroutines, each on a
// stream of its own, until Options.Duration has passed or the context is
// done. Each goroutine, step after step, picks a random size (log-uniform
// between Options.MinSize and Options.MaxSize) and one of three paths:
//
//   - raw: allocate from the stack on its stream, fill the memory with a
//     pattern by a kernel, check it with a kernel, free it on its stream;
//   - handed off: allocate and fill on its stream, record an event, pass
//     the pointer to another goroutine, which makes its own stream wait on
//     the event, checks the memory there and frees it on its own stream
//     (a cross-stream free);
//   - buffer: a buf.Vector allocated and filled on its stream, passed to
//     another goroutine, which reads and checks it on its stream and
//     closes it there (buf inserts the waits).
//
// Every check kernel adds the words that differ from the pattern to a
// counter in device memory, one per goroutine. Each goroutine keeps a few
// allocations live and frees the oldest at random, so the pool reuses
// memory across sizes and streams. Every Options.Interval, Run samples the
// host's memory (Go heap, resident set) and the stack's counters, and
// writes a line to Options.Log.
//
// Before the load, a warm-up does once on every stream what the run does
// (a stack built, an allocation filled, checked on another stream behind
// an event and freed, the stack closed) and waits for the device; only
// then is the device's free memory taken as the baseline, so that what
// the driver keeps from a context's first use is not counted against the
// stack. At the end everything is freed and the streams synchronized; the
// result says how many words were corrupted, how many bytes the stack
// still counts as used or reserved after a release, how much device
// memory did not come back against the baseline after the pool was
// closed (no difference is allowed), and whether the counters of the
// Stats adaptor and of the Pool agree with the operations made. OK
// reports the verdict.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
)

// Options configure Run. Zero fields take the defaults.
type Options struct {
	// Duration is how long the load runs (default 10 s).
	Duration time.Duration
	// Goroutines is the number of goroutines, each on its own stream
	// (default 16).
	Goroutines int
	// MinSize and MaxSize bound the sizes of allocations (default 256 B
	// and 4 MiB), drawn log-uniformly, rounded to whole 4-byte words.
	MinSize, MaxSize int
	// Live is how many allocations each goroutine keeps (default 4).
	Live int
	// Interval is the time between progress samples (default Duration/10,
	// at least 100 ms).
	Interval time.Duration
	// Log receives a line per sample and a summary; nil discards them.
	Log io.Writer
	// Seed seeds the goroutines' random choices (0: a fixed seed).
	Seed uint64
	// Stack, if set, builds the resource to soak instead of the
	// recommended stack, and returns it with a function that closes it
	// (tests give it a broken one, to see the soak fail).
	Stack func(dev gpu.Device) (mr.Resource, func() error, error)
}

func (o *Options) defaults() error {
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Goroutines <= 0 {
		o.Goroutines = 16
	}
	if o.MinSize <= 0 {
		o.MinSize = 256
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 4 << 20
	}
	if o.MinSize > o.MaxSize {
		return fmt.Errorf("soak: MinSize %d above MaxSize %d: %w", o.MinSize, o.MaxSize, gpu.ErrInvalidValue)
	}
	if o.Live <= 0 {
		o.Live = 4
	}
	if o.Interval <= 0 {
		o.Interval = max(o.Duration/10, 100*time.Millisecond)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return nil
}

// Sample is the state at one moment of the run.
type Sample struct {
	Elapsed        time.Duration
	Operations     uint64 // allocations made so far, all paths
	HeapBytes      uint64 // live Go heap (runtime.MemStats.HeapAlloc after a collection)
	ResidentBytes  uint64 // the process's resident set (0 where unknown)
	UsedBytes      uint64 // what the stack counts as handed out
	ReservedBytes  uint64 // what the pool holds from the driver
	CorruptedWords uint64 // mismatches the check kernels counted so far
}

// Result is what a run did and found.
type Result struct {
	Device     string
	Goroutines int
	Duration   time.Duration
	// Operations per path, and in all.
	Raw, HandedOff, Buffers, Operations uint64
	// CorruptedWords is the number of words a check kernel found not to
	// hold the pattern they were filled with.
	CorruptedWords uint64
	// LeakedBytes is what the stack still counted as used after every
	// allocation was freed, plus what the pool still reserved after a
	// release; DeviceBytesNotReturned is the device memory missing after
	// the pool and its driver pool were closed, against the baseline
	// taken after the warm-up.
	LeakedBytes, DeviceBytesNotReturned uint64
	// Stats and Pool are the counters at the end.
	Stats mr.StatsSnapshot
	Pool  mr.PoolStats
	// CountersAgree says whether those counters match the operations
	// made: every allocation counted once, freed once, none failed.
	CountersAgree bool
	// Samples are the progress samples, the last one at the end.
	Samples []Sample
	// HeapGrowth is the live Go heap of the last sample less that of the
	// sample half-way through the run, in bytes (it may be negative): what
	// the second half added, once the stack has warmed up. (On the
	// simulator, device memory is host memory, committed as it is first
	// touched.)
	HeapGrowth int64
}

// OK reports whether the run kept every byte: nothing corrupted, nothing
// leaked, the counters consistent.
func (r *Result) OK() bool {
	return r.CorruptedWords == 0 && r.LeakedBytes == 0 && r.DeviceBytesNotReturned == 0 && r.CountersAgree
}

// handoff is an allocation passed from one goroutine to another.
type handoff struct {
	p     gpu.DevicePtr // raw path
	words int
	seed  uint32
	ready gpu.Event // recorded after the fill (raw path)
	v     *buf.Vector[uint32]
}

// Run runs the soak on dev; see the package comment. Errors are the
// stack's or the device's failures (which stop the run); corruption and
// leaks are in the Result.
func Run(ctx context.Context, dev gpu.Device, opts Options) (res *Result, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	build := opts.Stack
	if build == nil {
		build = recommended
	}
	k, err := kernels.Load(dev)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	// The streams and the error counters live from before the baseline of
	// device memory until after the measure against it, so that both
	// measures see them and the difference is the stack's alone.
	streams := make([]gpu.Stream, 0, opts.Goroutines)
	defer func() {
		for _, s := range streams {
			err = errors.Join(err, s.Destroy())
		}
	}()
	for range opts.Goroutines {
		s, err := dev.NewStream()
		if err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
		streams = append(streams, s)
	}
	counters, err := dev.Malloc(4 * opts.Goroutines)
	if err != nil {
		return nil, fmt.Errorf("soak: error counters: %w", err)
	}
	defer func() { err = errors.Join(err, dev.Free(counters)) }()
	r := &runner{opts: opts, dev: dev, k: k, streams: streams, counters: counters,
		inbox: make([]chan handoff, opts.Goroutines)}
	for i := range r.inbox {
		r.inbox[i] = make(chan handoff, 2*opts.Live)
	}
	warmCorrupted, err := r.warmUp(build)
	if err != nil {
		return nil, err
	}
	freeBefore, _, err := dev.MemGetInfo()
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	res0, closeRes, err := build(dev)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	stats := mr.NewStats(res0, mr.StatsOptions{})
	r.top = stats
	var pool *mr.Pool
	for _, x := range mr.Chain(res0) {
		if p, ok := x.(*mr.Pool); ok {
			pool = p
		}
	}
	res = &Result{Device: dev.Properties().Name, Goroutines: opts.Goroutines}
	runErr := r.run(ctx)
	res.Raw, res.HandedOff, res.Buffers = r.raw.Load(), r.handed.Load(), r.bufs.Load()
	res.Operations = res.Raw + res.HandedOff + res.Buffers
	res.Duration = r.elapsed
	res.Samples = r.samples
	if n := len(r.samples); n >= 2 {
		res.HeapGrowth = int64(r.samples[n-1].HeapBytes) - int64(r.samples[n/2].HeapBytes)
	}
	words, cerr := r.corrupted()
	res.CorruptedWords = warmCorrupted + words
	res.Stats = stats.Snapshot()
	res.LeakedBytes = usage(res0).Used
	_, relErr := mr.Reclaim(res0, true)
	res.LeakedBytes += usage(res0).Reserved
	res.CountersAgree = res.Stats.Allocations.Total == res.Operations && res.Stats.Allocations.Current == 0 &&
		res.Stats.Failures == 0
	if pool != nil {
		res.Pool = pool.Stats()
		res.CountersAgree = res.CountersAgree && res.Pool.Allocations == res.Operations && res.Pool.Frees == res.Operations
	}
	closeErr := errors.Join(closeRes(), dev.Synchronize())
	// The check allows no difference. cuMemGetInfo counts the device's
	// memory as the driver maps and unmaps it, in pages of its allocation
	// granularity (2 MiB on current GPUs), so any memory the stack still
	// holds, however small, shows as at least a page; and once the
	// warm-up has made the driver take what it keeps for a context's
	// first use (the module's code, a launch's local memory, the state of
	// memory pools, streams and events), nothing else on the device
	// changes between the two measures.
	freeAfter, _, merr := dev.MemGetInfo()
	if merr == nil && freeAfter < freeBefore {
		res.DeviceBytesNotReturned = freeBefore - freeAfter
	}
	r.summary(res)
	return res, errors.Join(runErr, cerr, relErr, closeErr, merr)
}

// warmUp makes the driver take, before the baseline of device memory,
// what it keeps from a context's first use of each thing the run does:
// it builds a stack like the run's and, on every stream, allocates from
// it, fills and checks the memory by the kernels, hands it to the next
// stream behind an event and frees it there; then it closes the stack,
// reads the error counters (returning what they found) and waits for the
// device. Without it, memory the driver keeps after the first kernel
// launch (8 MiB on an H100) reads as memory the stack did not return.
func (r *runner) warmUp(build func(gpu.Device) (mr.Resource, func() error, error)) (uint64, error) {
	n := len(r.streams)
	if err := r.dev.MemsetD8Async(r.counters, 0, 4*n, r.streams[0]); err != nil {
		return 0, fmt.Errorf("soak: warm-up: %w", err)
	}
	if err := r.streams[0].Synchronize(); err != nil {
		return 0, fmt.Errorf("soak: warm-up: %w", err)
	}
	stack, closeStack, err := build(r.dev)
	if err != nil {
		return 0, fmt.Errorf("soak: warm-up: %w", err)
	}
	const words = 1024
	var werr error
	for i, s := range r.streams {
		next := r.streams[(i+1)%n]
		if werr = r.warmStream(stack, s, next, r.counters+gpu.DevicePtr(4*i), words, uint32(i)); werr != nil {
			break
		}
	}
	werr = errors.Join(werr, closeStack(), r.dev.Synchronize())
	if werr != nil {
		return 0, fmt.Errorf("soak: warm-up: %w", werr)
	}
	words0, err := r.corrupted()
	if err != nil {
		return 0, fmt.Errorf("soak: warm-up: %w", err)
	}
	return words0, nil
}

// warmStream is warmUp's work on stream s, handing off to next.
func (r *runner) warmStream(stack mr.Resource, s, next gpu.Stream, counter gpu.DevicePtr, words int, seed uint32) error {
	p, err := stack.Allocate(4*words, s)
	if err != nil {
		return err
	}
	e, err := r.dev.NewEvent(false)
	if err != nil {
		return errors.Join(err, stack.Deallocate(p, 4*words, s))
	}
	err = r.k.Fill(s, p, words, seed)
	if err == nil {
		err = e.Record(s)
	}
	if err != nil {
		return errors.Join(err, e.Destroy(), stack.Deallocate(p, 4*words, s))
	}
	err = next.WaitEvent(e)
	if err == nil {
		err = r.k.Check(next, p, words, seed, counter)
	}
	return errors.Join(err, e.Destroy(), stack.Deallocate(p, 4*words, next))
}

// runner is one run's shared state.
type runner struct {
	opts     Options
	dev      gpu.Device
	k        *kernels.Kernels
	top      mr.Resource
	streams  []gpu.Stream // one per goroutine
	counters gpu.DevicePtr
	inbox    []chan handoff

	raw, handed, bufs atomic.Uint64
	start             time.Time
	elapsed           time.Duration
	samples           []Sample
}

func (r *runner) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Duration)
	defer cancel()
	r.start = time.Now()
	streams := r.streams
	if err := r.dev.MemsetD8Async(r.counters, 0, 4*r.opts.Goroutines, streams[0]); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	if err := streams[0].Synchronize(); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	r.sample()
	var wg sync.WaitGroup
	errs := make([]error, r.opts.Goroutines)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(r.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				r.sample()
			}
		}
	}()
	for i := range r.opts.Goroutines {
		wg.Go(func() { errs[i] = r.worker(ctx, i, streams[i]) })
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	// What is still in the inboxes was handed off and not taken: its
	// receivers free it.
	for i, in := range r.inbox {
		close(in)
		for h := range in {
			if err := r.finish(h, i, streams[i]); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}
	}
	var serr []error
	for _, s := range streams {
		serr = append(serr, s.Synchronize())
	}
	r.elapsed = time.Since(r.start)
	r.sample()
	return errors.Join(append(errs, serr...)...)
}

// worker is goroutine id on stream s.
func (r *runner) worker(ctx context.Context, id int, s gpu.Stream) (err error) {
	rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(id)+1))
	type own struct {
		p     gpu.DevicePtr
		words int
		seed  uint32
	}
	var live []own
	counter := r.counters + gpu.DevicePtr(4*id)
	defer func() {
		// What is still live is checked and freed too.
		for _, o := range live {
			err = errors.Join(err, r.k.Check(s, o.p, o.words, o.seed, counter), r.top.Deallocate(o.p, 4*o.words, s))
		}
	}()
	// The host waits for the stream to finish the window of steps before
	// the last one (an event every window steps), as a program that uses
	// its results does: without it the host would enqueue faster than the
	// device runs, and the queues, not the allocator, would fill memory.
	var marks [2]gpu.Event
	for i := range marks {
		e, err := r.dev.NewEvent(false)
		if err != nil {
			return err
		}
		defer e.Destroy()
		marks[i] = e
	}
	const window = 32
	for step := uint32(0); ctx.Err() == nil; step++ {
		if step%window == 0 {
			cur := marks[(step/window)%2]
			if err := cur.Synchronize(); err != nil { // the mark of two windows ago
				return fmt.Errorf("soak: goroutine %d: %w", id, err)
			}
			if err := cur.Record(s); err != nil {
				return fmt.Errorf("soak: goroutine %d: %w", id, err)
			}
		}
		// Take what others handed over first, so inboxes drain.
		select {
		case h := <-r.inbox[id]:
			if err := r.finish(h, id, s); err != nil {
				return err
			}
			continue
		default:
		}
		words := r.size(rng) / 4
		seed := uint32(id)<<24 ^ step*2654435761
		to := rng.IntN(r.opts.Goroutines)
		switch path := rng.IntN(3); {
		case path == 0 || to == id: // raw, kept live for a while
			p, err := r.top.Allocate(4*words, s)
			if err != nil {
				return fmt.Errorf("soak: goroutine %d: %w", id, err)
			}
			r.raw.Add(1)
			if err := r.k.Fill(s, p, words, seed); err != nil {
				return err
			}
			live = append(live, own{p, words, seed})
			if len(live) > r.opts.Live {
				j := rng.IntN(len(live))
				o := live[j]
				live = append(live[:j], live[j+1:]...)
				if err := r.k.Check(s, o.p, o.words, o.seed, counter); err != nil {
					return err
				}
				if err := r.top.Deallocate(o.p, 4*o.words, s); err != nil {
					return fmt.Errorf("soak: goroutine %d: %w", id, err)
				}
			}
		case path == 1: // raw, handed off behind an event
			p, err := r.top.Allocate(4*words, s)
			if err != nil {
				return fmt.Errorf("soak: goroutine %d: %w", id, err)
			}
			r.handed.Add(1)
			if err := r.k.Fill(s, p, words, seed); err != nil {
				return err
			}
			e, err := r.dev.NewEvent(false)
			if err != nil {
				return err
			}
			if err := e.Record(s); err != nil {
				return err
			}
			if err := r.send(ctx, to, handoff{p: p, words: words, seed: seed, ready: e}, id, s); err != nil {
				return err
			}
		default: // a buffer, handed off
			v, err := buf.NewVector[uint32](r.top, words, s)
			if err != nil {
				return fmt.Errorf("soak: goroutine %d: %w", id, err)
			}
			r.bufs.Add(1)
			if err := v.Use(s, buf.Write, func() error { return r.k.Fill(s, v.Ptr(), words, seed) }); err != nil {
				return err
			}
			if err := r.send(ctx, to, handoff{v: v, words: words, seed: seed}, id, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// send hands h to goroutine to. While to's inbox is full, the sender
// finishes what others hand it (so that two goroutines sending to each
// other never wait on each other); if the run ends first, it finishes h
// itself.
func (r *runner) send(ctx context.Context, to int, h handoff, id int, s gpu.Stream) error {
	for {
		select {
		case r.inbox[to] <- h:
			return nil
		case g := <-r.inbox[id]:
			if err := r.finish(g, id, s); err != nil {
				return errors.Join(err, r.finish(h, id, s))
			}
		case <-ctx.Done():
			return r.finish(h, id, s)
		}
	}
}

// finish checks a handed-off allocation on s (goroutine id's stream) and
// frees it there.
func (r *runner) finish(h handoff, id int, s gpu.Stream) error {
	counter := r.counters + gpu.DevicePtr(4*id)
	if h.v != nil {
		err := buf.UseAll(s, []buf.Operand{{Buf: h.v.Buffer(), Access: buf.Read}},
			func() error { return r.k.Check(s, h.v.Ptr(), h.words, h.seed, counter) })
		return errors.Join(err, h.v.CloseOn(s))
	}
	err := s.WaitEvent(h.ready)
	if err == nil {
		err = r.k.Check(s, h.p, h.words, h.seed, counter)
	}
	return errors.Join(err, h.ready.Destroy(), r.top.Deallocate(h.p, 4*h.words, s))
}

// size draws an allocation size, log-uniform between the bounds, in whole
// words.
func (r *runner) size(rng *rand.Rand) int {
	lo, hi := math.Log(float64(r.opts.MinSize)), math.Log(float64(r.opts.MaxSize))
	n := int(math.Exp(lo + rng.Float64()*(hi-lo)))
	return max(4, n&^3)
}

// corrupted reads the goroutines' error counters.
func (r *runner) corrupted() (uint64, error) {
	out := make([]byte, 4*r.opts.Goroutines)
	s := r.streams[0]
	if err := r.dev.CopyDtoHAsync(out, r.counters, s); err != nil {
		return 0, err
	}
	if err := s.Synchronize(); err != nil {
		return 0, err
	}
	var n uint64
	for i := 0; i < len(out); i += 4 {
		n += uint64(out[i]) | uint64(out[i+1])<<8 | uint64(out[i+2])<<16 | uint64(out[i+3])<<24
	}
	return n, nil
}

// sample records the state now and writes it to the log. The heap is
// measured after a collection, so that it is what is live, not what the
// collector has yet to find.
func (r *runner) sample() {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	u := usage(r.top)
	sm := Sample{
		Elapsed:       time.Since(r.start).Round(time.Millisecond),
		Operations:    r.raw.Load() + r.handed.Load() + r.bufs.Load(),
		HeapBytes:     ms.HeapAlloc,
		ResidentBytes: residentBytes(),
		UsedBytes:     u.Used,
		ReservedBytes: u.Reserved,
	}
	r.samples = append(r.samples, sm)
	fmt.Fprintf(r.opts.Log, "%9v  %10d ops  %8.0f ops/s  used %s  reserved %s  heap %s  rss %s\n",
		sm.Elapsed, sm.Operations, float64(sm.Operations)/max(sm.Elapsed.Seconds(), 1e-9),
		mib(sm.UsedBytes), mib(sm.ReservedBytes), mib(sm.HeapBytes), mib(sm.ResidentBytes))
}

func (r *runner) summary(res *Result) {
	fmt.Fprintf(r.opts.Log, "device %s, %d goroutines, %v: %d operations (%d raw, %d handed off, %d buffers), %.0f/s\n",
		res.Device, res.Goroutines, res.Duration.Round(time.Millisecond), res.Operations, res.Raw, res.HandedOff, res.Buffers,
		float64(res.Operations)/max(res.Duration.Seconds(), 1e-9))
	fmt.Fprintf(r.opts.Log, "corrupted words %d, leaked bytes %d, device bytes not returned %d, heap growth %d bytes\n",
		res.CorruptedWords, res.LeakedBytes, res.DeviceBytesNotReturned, res.HeapGrowth)
	fmt.Fprintf(r.opts.Log, "stats: %d allocations, %d failures, %d current; pool: %d allocations, %d frees (%d cross-stream), %d quick hits, %d waits, %d steals, %d growths, %d releases\n",
		res.Stats.Allocations.Total, res.Stats.Failures, res.Stats.Allocations.Current,
		res.Pool.Allocations, res.Pool.Frees, res.Pool.CrossStreamFrees, res.Pool.QuickHits, res.Pool.Waits,
		res.Pool.Steals, res.Pool.Growths, res.Pool.Releases)
	verdict := "OK"
	if !res.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(r.opts.Log, "counters agree: %v; verdict: %s\n", res.CountersAgree, verdict)
}

// recommended builds the stack the README recommends: a Pool over an
// Async resource, here with a driver pool of its own so that closing it
// gives the device all its memory back.
func recommended(dev gpu.Device) (mr.Resource, func() error, error) {
	async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		return nil, nil, err
	}
	pool, err := mr.NewPool(async, mr.PoolOptions{})
	if err != nil {
		async.Close()
		return nil, nil, err
	}
	return pool, func() error { return errors.Join(pool.Close(), async.Close()) }, nil
}

// usage is r's Usage, or the zero Usage if it reports none.
func usage(r mr.Resource) mr.Usage {
	if u, ok := r.(mr.UsageReporter); ok {
		return u.Usage()
	}
	return mr.Usage{}
}

func mib(b uint64) string { return fmt.Sprintf("%7.1f MiB", float64(b)/(1<<20)) }

// residentBytes is the process's resident set from /proc/self/statm, or 0
// where there is none.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
