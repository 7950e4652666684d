package buf_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// useOp runs a use of b on s that enqueues one memset (a write) or copy
// to the host (a read), and returns that operation.
func useOp(t *testing.T, e *env, b *buf.Buffer, s gpu.Stream, a buf.Access) sim.OpID {
	t.Helper()
	var op sim.OpID
	must(t, b.Use(s, a, func() error {
		if !b.Tracked() {
			// Untracked uses would race for real under -race: enqueue
			// an operation that touches no memory instead.
			e.sd.Hold(s)()
			op = e.sd.LastOp(s)
			return nil
		}
		defer func() {
			if e.sd != nil {
				op = e.sd.LastOp(s)
			}
		}()
		// A read is modelled by a copy to the host; a write by a memset.
		var err error
		if a.Writes() {
			err = e.dev.MemsetD8Async(b.Ptr(), 7, b.Size(), s)
		} else {
			err = e.dev.CopyDtoHAsync(make([]byte, b.Size()), b.Ptr(), s)
		}
		return err
	}))
	return op
}

// TestTrackingOrders checks the waits of the tracking rules in the
// simulator's happens-before relation, and that untracked buffers get none.
func TestTrackingOrders(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracked=%v", tracked), func(t *testing.T) {
			e := newEnv(t)
			e.needSim()
			s1, s2, s3, s4 := e.stream(), e.stream(), e.stream(), e.stream()
			var opts []buf.Option
			if !tracked {
				opts = append(opts, buf.Untracked())
			}
			hb := func(what string, a, b sim.OpID) {
				t.Helper()
				if got := e.sd.HappensBefore(a, b); got != tracked {
					t.Errorf("%s: ordered = %v, want %v", what, got, tracked)
				}
			}
			// Hold every stream so nothing completes early and every
			// ordering must come from a wait.
			for _, s := range []gpu.Stream{s1, s2, s3, s4} {
				defer e.sd.Hold(s)()
			}

			b := e.buffer(4096, s1, opts...)
			alloc := e.sd.LastOp(s1)
			r2 := useOp(t, e, b, s2, buf.Read)
			hb("allocation before read on s2", alloc, r2)
			w1 := useOp(t, e, b, s1, buf.Write)
			hb("read on s2 before write on s1", r2, w1)
			r2 = useOp(t, e, b, s2, buf.Read)
			r3 := useOp(t, e, b, s3, buf.Read)
			hb("write on s1 before read on s2", w1, r2)
			hb("write on s1 before read on s3", w1, r3)
			if e.sd.HappensBefore(r2, r3) {
				t.Errorf("a read waited on another read")
			}
			w4 := useOp(t, e, b, s4, buf.ReadWrite)
			hb("read on s2 before write on s4", r2, w4)
			hb("read on s3 before write on s4", r3, w4)

			// Close on a fifth stream: the free comes after everything.
			s5 := e.stream()
			defer e.sd.Hold(s5)()
			r2 = useOp(t, e, b, s2, buf.Read)
			must(t, b.CloseOn(s5))
			free := e.sd.LastOp(s5)
			hb("write on s4 before the free", w4, free)
			hb("read on s2 before the free", r2, free)
		})
	}
}

// TestSameStreamNoWaits: uses on one stream enqueue no wait, and the
// steady state creates no event per use.
func TestSameStreamNoWaits(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	var c counter
	b := e.buffer(1024, s, buf.WithObserver(&c))
	for range 100 {
		useOp(t, e, b, s, buf.Write)
		useOp(t, e, b, s, buf.Read)
	}
	must(t, b.Close())
	if c.wait != 0 {
		t.Errorf("%d waits on a single stream", c.wait)
	}
	if c.uses != 200 {
		t.Errorf("observer saw %d uses, want 200", c.uses)
	}
	if len(c.events) > 2 {
		t.Errorf("%d distinct events for 200 uses on one stream", len(c.events))
	}
}

// TestEventCacheSteadyState: uses across three streams recycle a bounded
// set of events.
func TestEventCacheSteadyState(t *testing.T) {
	e := newEnv(t)
	s1, s2, s3 := e.stream(), e.stream(), e.stream()
	var c counter
	b := e.buffer(1024, s1, buf.WithObserver(&c))
	for range 300 {
		useOp(t, e, b, s1, buf.Write)
		useOp(t, e, b, s2, buf.Read)
		useOp(t, e, b, s3, buf.Read)
	}
	must(t, b.Close())
	if c.records < 900 {
		t.Errorf("%d records for 900 uses", c.records)
	}
	if len(c.events) > 6 {
		t.Errorf("%d distinct events for 900 uses: the cache does not recycle", len(c.events))
	}
}

// TestCloseAfterUsesOnOtherStreams: allocated on S1, written on S2, read
// on S3 while both are held, freed on S4. The free must wait: the bytes
// read are the bytes written, and the memory is not stranded (the env
// checks that nothing is live at the end).
func TestCloseAfterUsesOnOtherStreams(t *testing.T) {
	e := newEnv(t)
	s1, s2, s3, s4 := e.stream(), e.stream(), e.stream(), e.stream()
	b := e.buffer(1<<16, s1)
	release2 := e.hold(s2)
	want := pattern(1<<16, 5)
	must(t, b.SetStream(s2))
	must(t, b.CopyFromHost(want)) // waits behind the hold on s2
	release3 := e.hold(s3)
	got := make([]byte, 1<<16)
	must(t, b.Use(s3, buf.Read, func() error { return e.dev.CopyDtoHAsync(got, b.Ptr(), s3) }))
	must(t, b.CloseOn(s4))
	// A new buffer on S4 gets the memory at once (stream order) and
	// overwrites it; tracking must keep that after the read.
	c := e.buffer(1<<16, s4)
	must(t, c.Memset(0xaa))
	time.Sleep(10 * time.Millisecond) // give a missing wait the chance to show
	release2()
	release3()
	e.sync(s3)
	if !bytes.Equal(got, want) {
		t.Fatalf("read on S3 saw other bytes than the write on S2")
	}
	must(t, c.Close())
}

// TestFailedRecordKeepsOrder: when recording the event after a use fails,
// the use is still ordered before later uses on other streams.
func TestFailedRecordKeepsOrder(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	s1, s2 := e.stream(), e.stream()
	defer e.sd.Hold(s1)()
	defer e.sd.Hold(s2)()
	b := e.buffer(256, s1)
	e.sd.FailNext(sim.OpEventRecord, 1, gpu.ErrLaunchFailed)
	w := useOp(t, e, b, s1, buf.Write)
	r := useOp(t, e, b, s2, buf.Read)
	if !e.sd.HappensBefore(w, r) {
		t.Fatalf("write not ordered before read after a failed record")
	}
	must(t, b.Close())
}

// TestFailedWaitRefusesUse: a wait that fails makes the use fail without
// running it.
func TestFailedWaitRefusesUse(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	s1, s2 := e.stream(), e.stream()
	b := e.buffer(256, s1)
	must(t, b.Memset(1))
	e.sd.FailNext(sim.OpStreamWaitEvent, 1, gpu.ErrLaunchFailed)
	ran := false
	err := b.Use(s2, buf.Read, func() error { ran = true; return nil })
	if !errors.Is(err, gpu.ErrLaunchFailed) || ran {
		t.Fatalf("use after failed wait: %v, ran %v", err, ran)
	}
	// And Close through a failing wait leaves the buffer open.
	useOp(t, e, b, s2, buf.Read)
	e.sd.FailNext(sim.OpStreamWaitEvent, 1, gpu.ErrLaunchFailed)
	if err := b.CloseOn(s1); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("close: %v", err)
	}
	if b.Ptr() == 0 {
		t.Fatalf("failed close closed the buffer")
	}
	must(t, b.CloseOn(s1))
}

// TestFailedFreeKeepsBuffer: a free the resource refuses leaves the buffer
// open and usable.
func TestFailedFreeKeepsBuffer(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	s := e.stream()
	b := e.buffer(256, s)
	e.sd.FailNext(sim.OpFreeAsync, 1, gpu.ErrLaunchFailed)
	if err := b.Close(); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("close: %v", err)
	}
	must(t, b.Memset(3))
	e.sd.FailNext(sim.OpMallocFromPoolAsync, 1, gpu.ErrOutOfMemory)
	if err := b.Resize(512); !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Fatalf("resize: %v", err)
	}
	if b.Size() != 256 {
		t.Fatalf("failed resize changed the size to %d", b.Size())
	}
	e.sd.FailNext(sim.OpCopy, 1, gpu.ErrLaunchFailed)
	if err := b.Resize(512); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("resize with failing copy: %v", err)
	}
	got := make([]byte, 256)
	must(t, b.CopyToHost(got))
	e.sync(s)
	if !bytes.Equal(got, bytes.Repeat([]byte{3}, 256)) {
		t.Fatalf("failed resize changed the bytes")
	}
	must(t, b.Close())
}

// TestObserverRefusal: a refused use enqueues nothing.
func TestObserverRefusal(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	c := &counter{}
	b := e.buffer(256, s, buf.WithObserver(c))
	must(t, b.Memset(1))
	no := errors.New("refused")
	c.refuse = no
	ran := false
	if err := b.Use(s, buf.Write, func() error { ran = true; return nil }); !errors.Is(err, no) || ran {
		t.Fatalf("refused use: %v, ran %v", err, ran)
	}
	if err := b.Memset(2); !errors.Is(err, no) {
		t.Fatalf("refused memset: %v", err)
	}
	c.refuse = nil
	got := make([]byte, 256)
	must(t, b.CopyToHost(got))
	e.sync(s)
	if got[0] != 1 {
		t.Fatalf("refused memset wrote %d", got[0])
	}
	must(t, b.Close())
}

// TestConcurrentUses: goroutines on their own streams write and read
// shared buffers through tracking only. Under -race the simulator reports
// any missing wait as a data race; each write covers a whole buffer, so
// every buffer must end uniform.
func TestConcurrentUses(t *testing.T) {
	e := newEnv(t)
	owner := e.stream()
	bufs := make([]*buf.Buffer, 3)
	for i := range bufs {
		bufs[i] = e.buffer(4096, owner)
		must(t, bufs[i].Memset(0))
	}
	const workers = 6
	rounds := 60
	if testing.Short() {
		rounds = 20
	}
	var wg sync.WaitGroup
	for w := range workers {
		s := e.stream()
		wg.Go(func() {
			host := make([]byte, 4096)
			for i := range rounds {
				b := bufs[(w+i)%len(bufs)]
				var err error
				switch i % 3 {
				case 0:
					err = b.Use(s, buf.Write, func() error {
						return e.dev.MemsetD8Async(b.Ptr(), byte(w+1), b.Size(), s)
					})
				case 1:
					err = b.Use(s, buf.Read, func() error { return e.dev.CopyDtoHAsync(host, b.Ptr(), s) })
				case 2:
					other := bufs[(w+i+1)%len(bufs)]
					err = buf.UseAll(s, []buf.Operand{{Buf: b, Access: buf.Write}, {Buf: other, Access: buf.Read}},
						func() error { return e.dev.CopyDtoDAsync(b.Ptr(), other.Ptr(), b.Size(), s) })
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			if err := s.Synchronize(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, b := range bufs {
		got := make([]byte, 4096)
		must(t, b.CopyToHost(got))
		e.sync(owner)
		for _, v := range got {
			if v != got[0] {
				t.Fatalf("buffer not uniform: %d and %d", got[0], v)
			}
		}
		must(t, b.Close())
	}
}

// TestDestroyedStreamLazyMark: a use whose event could not be recorded
// leaves a lazy mark; if its stream is then destroyed, a later waiter
// synchronizes the device instead, and the state stays usable.
func TestDestroyedStreamLazyMark(t *testing.T) {
	e := newEnv(t)
	e.needSim()
	s1, s3 := e.stream(), e.stream()
	s2, err := e.dev.NewStream()
	must(t, err)
	b := e.buffer(256, s1)
	must(t, b.Memset(1))
	e.sd.FailNext(sim.OpEventRecord, 1, gpu.ErrLaunchFailed)
	useOp(t, e, b, s2, buf.Read) // lazy read mark on s2
	must(t, s2.Destroy())
	useOp(t, e, b, s3, buf.Write) // waits on the mark: device sync
	useOp(t, e, b, s1, buf.Read)
	useOp(t, e, b, s3, buf.Read)
	useOp(t, e, b, s1, buf.Write)
	must(t, b.CloseOn(s3))
}

// TestDroppedBufferCollected: a buffer dropped while open, with a write
// still held on another stream, is freed by the garbage collector's
// cleanup, and that free is tracked like Close: the next owner of the
// memory does not see the late write.
func TestDroppedBufferCollected(t *testing.T) {
	e := newEnv(t)
	s1, s2 := e.stream(), e.stream()
	release := e.hold(s2)
	var old gpu.DevicePtr
	var write sim.OpID
	func() {
		b := e.buffer(1<<16, s1)
		old = b.Ptr()
		must(t, b.Use(s2, buf.Write, func() error {
			err := e.dev.MemsetD8Async(b.Ptr(), 0x11, b.Size(), s2)
			if e.sd != nil {
				write = e.sd.LastOp(s2)
			}
			return err
		}))
	}()
	for i := 0; i < 500; i++ {
		runtime.GC()
		if n, _ := e.res.Live(); n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n, _ := e.res.Live(); n != 0 {
		t.Fatalf("dropped buffer not collected: %d live", n)
	}
	if e.sd != nil {
		// The free is the last operation on s1.
		if free := e.sd.LastOp(s1); !e.sd.HappensBefore(write, free) {
			t.Fatalf("the collected buffer's free (%v) is not ordered after its write (%v)", free, write)
		}
	}
	c := e.buffer(1<<16, s1)
	if c.Ptr() != old {
		t.Logf("memory not reused (%#x, then %#x)", uint64(old), uint64(c.Ptr()))
	}
	must(t, c.Memset(0xaa))
	release()
	must(t, s2.Synchronize()) // the held write is done, wherever it went
	got := make([]byte, 1<<16)
	must(t, c.CopyToHost(got))
	e.sync(s1)
	for i, v := range got {
		if v != 0xaa {
			t.Fatalf("byte %d = %#x: the collected buffer's free did not wait for its use", i, v)
		}
	}
	must(t, c.Close())
}

// TestSetStreamOrdersOldStream: after SetStream, the buffer's operations
// on the new stream come after everything enqueued on the old one,
// including work the caller enqueued there by hand without declaring it;
// an Untracked buffer adds no such order. A wait that fails leaves the
// buffer on the old stream.
func TestSetStreamOrdersOldStream(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracked=%v", tracked), func(t *testing.T) {
			e := newEnv(t)
			e.needSim()
			s1, s2 := e.stream(), e.stream()
			defer e.sd.Hold(s1)()
			defer e.sd.Hold(s2)()
			var opts []buf.Option
			if !tracked {
				opts = append(opts, buf.Untracked())
			}
			b := e.buffer(256, s1, opts...)
			if tracked {
				useOp(t, e, b, s1, buf.Write) // a declared use first
			}
			// Undeclared work on the buffer's own stream, which New
			// allows. It touches no memory so that the untracked half is
			// no data race under -race.
			e.sd.Hold(s1)()
			raw := e.sd.LastOp(s1)
			must(t, b.SetStream(s2))
			must(t, b.Memset(1))
			set := e.sd.LastOp(s2)
			if got := e.sd.HappensBefore(raw, set); got != tracked {
				t.Errorf("undeclared work on the old stream before the memset on the new one: %v, want %v", got, tracked)
			}
			if tracked {
				e.sd.FailNext(sim.OpStreamWaitEvent, 1, gpu.ErrLaunchFailed)
				if err := b.SetStream(s1); !errors.Is(err, gpu.ErrLaunchFailed) {
					t.Errorf("set stream through a failing wait: %v", err)
				}
				if b.Stream() != s2 {
					t.Errorf("a failed SetStream moved the buffer")
				}
			}
			must(t, b.Close())
		})
	}
}
