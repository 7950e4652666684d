//go:build unix

package ipc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	must(t, err)
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		must(t, err)
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// processes are the same simulated GPU as an exporting and an importing
// process see it: a device of each of two Backends, offering POSIX
// descriptors and fabric handles as the H100 does (with an IMEX channel,
// which the H100's machine lacks: TestFabricWithoutIMEX).
func processes(t testing.TB) (exp, imp gpu.Device) {
	t.Helper()
	cfg := sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric}
	exp, _ = sim.New(cfg).Device(0)
	imp, _ = sim.New(cfg).Device(0)
	return exp, imp
}

// handleTypes are the handle types the protocol's tests run with, each as
// a subtest of its name: a descriptor over the socket, and a fabric
// handle as 64 bytes of the frames.
var handleTypes = []struct {
	name string
	t    gpu.HandleType
}{
	{"POSIX", gpu.HandlePOSIX},
	{"Fabric", gpu.HandleFabric},
}

// eachHandleType runs f as a subtest for each of handleTypes.
func eachHandleType(t *testing.T, f func(t *testing.T, ht gpu.HandleType)) {
	t.Helper()
	for _, h := range handleTypes {
		t.Run(h.name, func(t *testing.T) { f(t, h.t) })
	}
}

// pair connects a new exporter on exp, exporting its pool as ht, and an
// importer on imp.
func pair(t testing.TB, exp, imp gpu.Device, ht gpu.HandleType) (*ipc.Exporter, *ipc.Link, *ipc.Importer) {
	e, l, im, _, _ := pairConns(t, exp, imp, ht)
	return e, l, im
}

// pairConns is pair, with the exporter's and the importer's sockets.
func pairConns(t testing.TB, exp, imp gpu.Device, ht gpu.HandleType) (*ipc.Exporter, *ipc.Link, *ipc.Importer, *net.UnixConn, *net.UnixConn) {
	t.Helper()
	e, err := ipc.NewExporter(exp, ipc.ExporterOptions{Handle: ht})
	must(t, err)
	l, im, ce, ci := connect(t, e, imp)
	return e, l, im, ce, ci
}

// connect serves e at one end of a socket pair and accepts at the other
// on imp, within 10 s: the link, the importer, and the exporter's and the
// importer's sockets.
func connect(t testing.TB, e *ipc.Exporter, imp gpu.Device) (*ipc.Link, *ipc.Importer, *net.UnixConn, *net.UnixConn) {
	t.Helper()
	ce, ci := socketPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var im *ipc.Importer
	var ierr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		im, ierr = ipc.Accept(ctx, imp, ci)
	}()
	l, err := e.Serve(ctx, ce)
	wg.Wait()
	must(t, err)
	must(t, ierr)
	return l, im, ce, ci
}

// closeEmpty checks, once the exporter's stream se has run, that the
// exporter's pool has nothing in use and no loan is out on either side,
// then closes the importer and the exporter.
func closeEmpty(t testing.TB, e *ipc.Exporter, l *ipc.Link, im *ipc.Importer, se gpu.Stream) {
	t.Helper()
	must(t, se.Synchronize())
	if u := e.Async().Usage(); u.Used != 0 {
		t.Errorf("pool used %d bytes after every free", u.Used)
	}
	if l.Outstanding() != 0 || im.Outstanding() != 0 {
		t.Errorf("outstanding: link %d, importer %d", l.Outstanding(), im.Outstanding())
	}
	must(t, im.Close())
	<-l.Done()
	must(t, e.Close())
}

// mismatches runs a check kernel of pattern seed over n words at p on s
// and returns the count.
func mismatches(t testing.TB, dev gpu.Device, k *kernels.Kernels, s gpu.Stream, p gpu.DevicePtr, n int, seed uint32) uint32 {
	t.Helper()
	c, err := dev.Malloc(4)
	must(t, err)
	defer dev.Free(c)
	must(t, dev.MemsetD8Async(c, 0, 4, s))
	must(t, k.Check(s, p, n, seed, c))
	var b [4]byte
	must(t, dev.CopyDtoHAsync(b[:], c, s))
	must(t, s.Synchronize())
	return binary.LittleEndian.Uint32(b[:])
}

// TestLendRoundTrip: the exporter fills allocations and lends them; the
// importer, another (simulated) process, checks each and writes its own
// words, then gives it back; the exporter finds the importer's words. No
// mismatch, no data race under -race (the events order the two
// processes), and the pool holds nothing once all is freed.
//
// It runs with each handle type of handleTypes.
func TestLendRoundTrip(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im := pair(t, exp, imp, ht)
		ke, _ := kernels.Load(exp)
		ki, _ := kernels.Load(imp)
		se, _ := exp.NewStream()
		const pieces, words = 8, 1 << 14

		var bad uint32
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the importing process
			defer wg.Done()
			si, _ := imp.NewStream()
			for i := 0; i < pieces; i++ {
				x, err := im.Receive(context.Background(), si)
				if err != nil {
					t.Error(err)
					return
				}
				if x.Size() != 4*words {
					t.Errorf("import of %d bytes, want %d", x.Size(), 4*words)
				}
				bad += mismatches(t, imp, ki, si, x.Ptr(), words, uint32(i))
				if err := ki.Fill(si, x.Ptr(), words, uint32(1000+i)); err != nil {
					t.Error(err)
				}
				if err := x.Release(si); err != nil {
					t.Error(err)
				}
				if err := x.Release(si); !errors.Is(err, ipc.ErrReleased) {
					t.Errorf("a second Release: %v, want ipc.ErrReleased", err)
				}
			}
		}()
		ptrs := make([]gpu.DevicePtr, pieces)
		loans := make([]*ipc.Loan, pieces)
		for i := range ptrs {
			p, err := e.Allocate(4*words, se)
			must(t, err)
			ptrs[i] = p
			must(t, ke.Fill(se, p, words, uint32(i)))
			loans[i], err = l.Lend(context.Background(), p, 4*words, se)
			must(t, err)
		}
		wg.Wait()
		if bad != 0 {
			t.Fatalf("the importer read the exporter's words with %d mismatches", bad)
		}
		for i, ln := range loans {
			must(t, ln.Wait(context.Background()))
			if got := mismatches(t, exp, ke, se, ptrs[i], words, uint32(1000+i)); got != 0 {
				t.Fatalf("piece %d: the exporter read the importer's words with %d mismatches", i, got)
			}
			must(t, e.Deallocate(ptrs[i], 4*words, se))
		}
		closeEmpty(t, e, l, im, se)
	})
}

// TestLentRefusals: what the exporter cannot do with a lent allocation,
// and lends that are no loans; each refusal changes nothing.
//
// It runs with each handle type of handleTypes.
func TestLentRefusals(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im := pair(t, exp, imp, ht)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		p, err := e.Allocate(4096, se)
		must(t, err)
		ln, err := l.Lend(context.Background(), p, 4096, se)
		must(t, err)
		q := checkLentRefusals(t, e, l, p, 4096, se)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if err := ln.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting on a loan still out: %v, want the context's error", err)
		}
		cancel()
		must(t, x.Release(si))
		must(t, ln.Wait(context.Background()))
		must(t, e.Deallocate(p, 4096, se))
		must(t, e.Deallocate(q, 512, se))
		must(t, im.Close())
		must(t, e.Close())
	})
}

// TestBrokenProtocol shows what the exporter's refusal prevents: freed
// while an importer still maps it (here by going around the Exporter, to
// its Async), the block goes to the exporter's next allocation, and the
// importer's write lands in it. The driver leaves this undefined; the
// simulator shows it as the card would.
//
// It runs with each handle type of handleTypes.
func TestBrokenProtocol(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im := pair(t, exp, imp, ht)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		ki, _ := kernels.Load(imp)
		ke, _ := kernels.Load(exp)
		const words = 1024
		p, err := e.Allocate(4*words, se)
		must(t, err)
		_, err = l.Lend(context.Background(), p, 4*words, se)
		must(t, err)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		must(t, si.Synchronize())
		// The broken free: the exporter's pool takes the block back while
		// the importer maps it, and hands it to the next request.
		must(t, e.Async().Deallocate(p, 4*words, se))
		q, err := e.Async().Allocate(4*words, se)
		must(t, err)
		if q != p {
			t.Skipf("the pool gave %#x, not the freed %#x: nothing to show", uint64(q), uint64(p))
		}
		must(t, ke.Fill(se, q, words, 1))
		must(t, se.Synchronize())
		must(t, ki.Fill(si, x.Ptr(), words, 2)) // the importer writes its import
		must(t, si.Synchronize())
		if got := mismatches(t, exp, ke, se, q, words, 1); got != words {
			t.Fatalf("the exporter's new allocation has %d words not its own, want all %d (the importer's)", got, words)
		}
		must(t, x.Release(si))
		must(t, e.Async().Deallocate(q, 4*words, se))
		must(t, se.Synchronize())
		im.Close()
		<-l.Done()
	})
}

// TestLostImporter: an importer that vanishes with loans out (its
// connection closed, nothing given back) leaves nothing stranded: the
// loans come back with ipc.ErrPeerLost, the exporter frees them, and its
// pool gives every byte back.
//
// It runs with each handle type of handleTypes.
func TestLostImporter(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im, _, ci := pairConns(t, exp, imp, ht)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		const n, size = 6, 3 << 20
		loans := make([]*ipc.Loan, n)
		for i := range loans {
			p, err := e.Allocate(size, se)
			must(t, err)
			loans[i], err = l.Lend(context.Background(), p, size, se)
			must(t, err)
		}
		for i := 0; i < n/2; i++ { // it received half, then died
			_, err := im.Receive(context.Background(), si)
			must(t, err)
		}
		if err := l.Close(); !errors.Is(err, ipc.ErrLent) {
			t.Fatalf("closing a link with loans out: %v, want ipc.ErrLent", err)
		}
		ci.Close() // the importer's process is gone: no Close, no word
		for _, ln := range loans {
			if err := ln.Wait(context.Background()); !errors.Is(err, ipc.ErrPeerLost) {
				t.Fatalf("a loan of a lost importer: %v, want ipc.ErrPeerLost", err)
			}
			must(t, e.Deallocate(ln.Ptr(), ln.Size(), se))
		}
		<-l.Done()
		if !errors.Is(l.Err(), ipc.ErrPeerLost) {
			t.Errorf("link error %v, want ipc.ErrPeerLost", l.Err())
		}
		if _, err := l.Lend(context.Background(), 0, 0, se); err == nil {
			t.Error("lending through a lost link succeeded")
		}
		must(t, se.Synchronize())
		must(t, e.Async().Trim(0))
		if u := e.Async().Usage(); u.Used != 0 || u.Reserved != 0 {
			t.Errorf("after the lost importer: pool used %d, reserved %d; want 0, 0", u.Used, u.Reserved)
		}
		must(t, e.Close())
	})
}

// TestLostExporter: an importer whose exporter vanishes keeps its imports
// until it releases them, which unmaps them (the error says the peer is
// lost); Receive says ErrPeerLost.
//
// It runs with each handle type of handleTypes.
func TestLostExporter(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im, ce, _ := pairConns(t, exp, imp, ht)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		p, err := e.Allocate(1<<20, se)
		must(t, err)
		_, err = l.Lend(context.Background(), p, 1<<20, se)
		must(t, err)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		freeBefore, _, _ := imp.MemGetInfo()
		ce.Close() // the exporter's process is gone
		if _, err := im.Receive(context.Background(), si); !errors.Is(err, ipc.ErrPeerLost) {
			t.Errorf("Receive after the exporter left: %v, want ipc.ErrPeerLost", err)
		}
		if err := x.Release(si); !errors.Is(err, ipc.ErrPeerLost) {
			t.Errorf("Release after the exporter left: %v, want ipc.ErrPeerLost", err)
		}
		if im.Outstanding() != 0 {
			t.Errorf("%d imports still held after Release", im.Outstanding())
		}
		must(t, si.Synchronize())
		if free, _, _ := imp.MemGetInfo(); free != freeBefore {
			t.Errorf("the importer's free memory changed from %d to %d", freeBefore, free)
		}
		must(t, im.Close())
		<-l.Done()
		_ = e
	})
}

// TestLendBuffer: a buf.Buffer written on one stream and read on another
// after the loan: the importer sees the exporter's last write (made on a
// stream other than the buffer's), and the exporter's reader on a third
// stream sees the importer's, ordered by the buffer's tracking alone (no
// data race under -race).
//
// It runs with each handle type of handleTypes.
func TestLendBuffer(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		e, l, im := pair(t, exp, imp, ht)
		ke, _ := kernels.Load(exp)
		ki, _ := kernels.Load(imp)
		s1, _ := exp.NewStream()
		s2, _ := exp.NewStream()
		s3, _ := exp.NewStream()
		const words = 1 << 15
		b, err := buf.New(e, 4*words, s1)
		must(t, err)
		must(t, b.Use(s2, buf.Write, func() error { return ke.Fill(s2, b.Ptr(), words, 5) }))
		ln, err := l.LendBuffer(context.Background(), b)
		must(t, err)
		si, _ := imp.NewStream()
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		if got := mismatches(t, imp, ki, si, x.Ptr(), words, 5); got != 0 {
			t.Fatalf("the importer read the buffer's last write with %d mismatches", got)
		}
		must(t, ki.Fill(si, x.Ptr(), words, 6))
		must(t, x.Release(si))
		must(t, ln.Wait(context.Background()))
		cnt, _ := exp.Malloc(4)
		must(t, exp.MemsetD8Async(cnt, 0, 4, s3))
		must(t, b.Use(s3, buf.Read, func() error { return ke.Check(s3, b.Ptr(), words, 6, cnt) }))
		var got [4]byte
		must(t, exp.CopyDtoHAsync(got[:], cnt, s3))
		must(t, s3.Synchronize())
		if n := binary.LittleEndian.Uint32(got[:]); n != 0 {
			t.Fatalf("the exporter read the importer's words with %d mismatches", n)
		}
		must(t, b.Close())
		other, err := buf.New(mr.NewDirect(exp), 256, s1)
		must(t, err)
		defer other.Close()
		if _, err := l.LendBuffer(context.Background(), other); !errors.Is(err, ipc.ErrNotLendable) {
			t.Errorf("lending a buffer of another resource: %v, want ipc.ErrNotLendable", err)
		}
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
	})
}

// TestReleaseRace: of two Releases of one import racing, exactly one
// unmaps it and gives it back, and the other is ErrReleased; every loan
// comes back once and the pool ends empty.
func TestReleaseRace(t *testing.T) {
	exp, imp := processes(t)
	e, l, im := pair(t, exp, imp, gpu.HandlePOSIX)
	se, _ := exp.NewStream()
	si, _ := imp.NewStream()
	si2, _ := imp.NewStream()
	const rounds, size = 50, 4096
	for r := 0; r < rounds; r++ {
		p, err := e.Allocate(size, se)
		must(t, err)
		ln, err := l.Lend(context.Background(), p, size, se)
		must(t, err)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, s := range []gpu.Stream{si, si2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = x.Release(s)
			}()
		}
		wg.Wait()
		ok, released := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ipc.ErrReleased):
				released++
			default:
				t.Fatalf("round %d: Release: %v", r, err)
			}
		}
		if ok != 1 || released != 1 {
			t.Fatalf("round %d: two Releases: %v; want one nil and one ipc.ErrReleased", r, errs)
		}
		must(t, ln.Wait(context.Background()))
		must(t, e.Deallocate(p, size, se))
	}
	closeEmpty(t, e, l, im, se)
}

// TestReceiveDuringClose: a Receive waiting when the importer's Close
// begins, with a lend arriving meanwhile, either returns ErrClosed (or the
// lost link) or an import that Close then releases; no import outlives
// Close, and a loan made comes back to the exporter, which frees it.
func TestReceiveDuringClose(t *testing.T) {
	for r := 0; r < 30; r++ {
		exp, imp := processes(t)
		e, l, im := pair(t, exp, imp, gpu.HandlePOSIX)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		const size = 4096
		p, err := e.Allocate(size, se)
		must(t, err)
		var x *ipc.Import
		var rerr, cerr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			x, rerr = im.Receive(context.Background(), si)
		}()
		time.Sleep(time.Millisecond) // Receive waits for a frame
		go func() {
			defer wg.Done()
			cerr = im.Close()
		}()
		ln, lerr := l.Lend(context.Background(), p, size, se) // while Close runs
		if lerr != nil && !errors.Is(lerr, ipc.ErrClosed) && !errors.Is(lerr, ipc.ErrPeerLost) {
			t.Fatalf("round %d: Lend during the importer's Close: %v", r, lerr)
		}
		wg.Wait()
		must(t, cerr)
		if im.Outstanding() != 0 {
			t.Fatalf("round %d: %d imports outlive Close", r, im.Outstanding())
		}
		switch {
		case rerr == nil:
			if err := x.Release(si); !errors.Is(err, ipc.ErrReleased) {
				t.Fatalf("round %d: Release of an import Close released: %v, want ipc.ErrReleased", r, err)
			}
		case !errors.Is(rerr, ipc.ErrClosed) && !errors.Is(rerr, ipc.ErrPeerLost):
			t.Fatalf("round %d: Receive during Close: %v, want ipc.ErrClosed or ipc.ErrPeerLost", r, rerr)
		}
		if lerr == nil {
			must(t, ln.Wait(context.Background()))
		}
		must(t, e.Deallocate(p, size, se))
		<-l.Done()
		must(t, e.Close())
	}
}

// checkLentRefusals checks, with p of n bytes lent on l, that freeing and
// lending p again and closing e or l are refused with ipc.ErrLent, and
// that a lend of an address inside p, of the null pointer, of a wrong size
// and on a nil stream each fail with its exact error. It returns q, a
// 512-byte allocation of e on se made for the last two, for the caller to
// free.
func checkLentRefusals(t *testing.T, e *ipc.Exporter, l *ipc.Link, p gpu.DevicePtr, n int, se gpu.Stream) gpu.DevicePtr {
	t.Helper()
	if err := e.Deallocate(p, n, se); !errors.Is(err, ipc.ErrLent) {
		t.Errorf("freeing a lent allocation: %v, want ipc.ErrLent", err)
	}
	if _, err := l.Lend(context.Background(), p, n, se); !errors.Is(err, ipc.ErrLent) {
		t.Errorf("lending it twice: %v, want ipc.ErrLent", err)
	}
	if err := e.Close(); !errors.Is(err, ipc.ErrLent) {
		t.Errorf("closing the exporter with a loan out: %v, want ipc.ErrLent", err)
	}
	if err := l.Close(); !errors.Is(err, ipc.ErrLent) {
		t.Errorf("closing the link with a loan out: %v, want ipc.ErrLent", err)
	}
	q, err := e.Allocate(512, se)
	must(t, err)
	for _, c := range []struct {
		what string
		p    gpu.DevicePtr
		n    int
		s    gpu.Stream
		want error
	}{
		{"an address inside an allocation", p + 256, 256, se, ipc.ErrNotLendable},
		{"the null pointer", 0, 0, se, ipc.ErrNotLendable},
		{"a wrong size", q, 256, se, mr.ErrSizeMismatch},
		{"a nil stream", q, 512, nil, gpu.ErrInvalidHandle},
	} {
		if _, err := l.Lend(context.Background(), c.p, c.n, c.s); !errors.Is(err, c.want) {
			t.Errorf("lending %s: %v, want %v", c.what, err, c.want)
		}
	}
	return q
}
