package sim_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// stepPTX declares test_step(p, want): the kernel checks that the uint32
// at p is want and stores want+1, with plain (race-checked) accesses.
const stepPTX = `
.version 7.0
.target sm_70
.address_size 64
.visible .entry test_step(.param .u64 p, .param .u32 want) { ret; }
`

func init() {
	sim.RegisterKernel("test_step", func(l *sim.Launch) error {
		p, err := l.ArgPtr(0)
		if err != nil {
			return err
		}
		want, err := l.ArgUint32(1)
		if err != nil {
			return err
		}
		b, err := l.Bytes(p, 4)
		if err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint32(b); got != want {
			return fmt.Errorf("step %d ran after step %d: stream order broken", want, got)
		}
		binary.LittleEndian.PutUint32(b, want+1)
		return nil
	})
}

// TestStreamHandoffStress hammers the hand-off between a stream's worker
// goroutines. A worker exists only while its stream has work, so every
// enqueue that finds the stream idle, or that races with the worker
// finding it empty, is a hand-off. Several goroutines per stream enqueue
// numbered steps (each checks, in the kernel, that it runs right after the
// previous one: exactly once, in order, never two at a time) and wait for
// them in all the ways the host can: stream Synchronize, event
// Synchronize, Query polling, or not at all, so workers keep exiting and
// restarting under load.
//
// What it catches: work enqueued just as the worker exits and then never
// run (a Synchronize that hangs with no worker alive: the watchdog fails
// the test), a waiter not woken by the completion it waits for (same
// symptom), two workers on one stream (the race detector under -race, and
// the step check), and bookkeeping of the hand-off that the race detector
// reports as a DATA RACE between two workers of one stream.
func TestStreamHandoffStress(t *testing.T) {
	const streams, producers = 2, 3
	iters := 1500
	if testing.Short() {
		iters = 300
	}
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dev.LoadModule(stepPTX)
	if err != nil {
		t.Fatal(err)
	}
	step, err := m.Function("test_step")
	if err != nil {
		t.Fatal(err)
	}
	counters, err := dev.Malloc(4 * streams) // new memory reads as zeros
	if err != nil {
		t.Fatal(err)
	}
	one := gpu.Dim3{X: 1}

	type lane struct {
		s    gpu.Stream
		p    gpu.DevicePtr
		mu   sync.Mutex // makes "take a step number, enqueue it" atomic
		next uint32
	}
	lanes := make([]*lane, streams)
	for i := range lanes {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		lanes[i] = &lane{s: s, p: counters + gpu.DevicePtr(4*i)}
	}
	enqueue := func(l *lane) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err := dev.Launch(step, one, one, 0, l.s, l.p, l.next); err != nil {
			return err
		}
		l.next++
		return nil
	}

	var wg sync.WaitGroup
	errs := make(chan error, streams*producers)
	for _, l := range lanes {
		for g := range producers {
			wg.Go(func() {
				e, err := dev.NewEvent(false)
				if err != nil {
					errs <- err
					return
				}
				for i := range iters {
					if err := enqueue(l); err != nil {
						errs <- err
						return
					}
					switch (i + g) % 4 {
					case 0:
						err = l.s.Synchronize()
					case 1:
						if err = e.Record(l.s); err == nil {
							err = e.Synchronize()
						}
					case 2:
						for err = l.s.Query(); errors.Is(err, gpu.ErrNotReady); err = l.s.Query() {
							runtime.Gosched()
						}
					case 3: // leave it running
					}
					if err != nil {
						errs <- fmt.Errorf("producer %d, iteration %d: %w", g, i, err)
						return
					}
				}
			})
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	// Each iteration is a few microseconds; minutes mean work that nobody
	// runs or a waiter nobody wakes.
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("producers still waiting after 2 minutes: enqueued work never ran or a waiter was never woken\n%s", buf)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*streams)
	if err := dev.CopyDtoHAsync(got, counters, lanes[0].s); err != nil {
		t.Fatal(err)
	}
	if err := lanes[0].s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, l := range lanes {
		if n := binary.LittleEndian.Uint32(got[4*i:]); n != l.next {
			t.Errorf("stream %d ran %d steps, %d enqueued", i, n, l.next)
		}
	}
}

// TestKernelGoexit: a kernel that ends its goroutine (t.FailNow called
// from kernel code, say) fails its stream like a panicking kernel, and the
// stream goes on running: Synchronize reports the failure instead of
// waiting forever for a worker that is gone.
func TestKernelGoexit(t *testing.T) {
	sim.RegisterKernel("test_goexit", func(l *sim.Launch) error {
		runtime.Goexit()
		return nil
	})
	const ptx = `
.version 7.0
.target sm_70
.address_size 64
.visible .entry test_goexit() { ret; }
`
	f := newFixture(t, sim.Config{})
	m, err := f.dev.LoadModule(ptx)
	f.must(err)
	fn, err := m.Function("test_goexit")
	f.must(err)
	one := gpu.Dim3{X: 1}
	s := f.stream()
	e := f.event(false)
	release := f.sd.Hold(s) // queue work behind the kernel before it runs
	f.must(f.dev.Launch(fn, one, one, 0, s))
	f.must(e.Record(s))
	release()

	done := make(chan error, 2)
	go func() { done <- e.Synchronize(); done <- s.Synchronize() }()
	for _, what := range []string{"event Synchronize after the kernel", "stream Synchronize"} {
		select {
		case err := <-done:
			wantErr(t, what, err, gpu.ErrLaunchFailed)
		case <-time.After(time.Minute):
			t.Fatalf("%s still waiting after a minute: the stream lost its worker", what)
		}
	}
	// Work enqueued after the failure still runs (and reports it).
	f.must(e.Record(s))
	wantErr(t, "event recorded after the failure", e.Synchronize(), gpu.ErrLaunchFailed)
}
