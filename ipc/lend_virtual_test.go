//go:build unix

package ipc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// virtualPair is an Exporter of Virtual memory on exp (over v, or over r
// if r is not nil) connected to an importer on imp; it lends as the one
// handle type v was made with.
func virtualPair(t testing.TB, v *mr.Virtual, r mr.Resource, imp gpu.Device) (*ipc.Exporter, *ipc.Link, *ipc.Importer) {
	t.Helper()
	e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{Handle: v.Options().HandleTypes, Resource: r})
	must(t, err)
	l, im, _, _ := connect(t, e, imp)
	if im.Pool() != nil {
		t.Errorf("an importer of Virtual memory has a pool")
	}
	return e, l, im
}

// newSharedVirtual is a Virtual on dev whose memory is exportable as
// opts.HandleTypes (zero: POSIX descriptors), closed at the end of the
// test.
func newSharedVirtual(t testing.TB, dev gpu.Device, opts mr.VirtualOptions) *mr.Virtual {
	t.Helper()
	if opts.HandleTypes == gpu.HandleNone {
		opts.HandleTypes = gpu.HandlePOSIX
	}
	if opts.ReserveSize == 0 {
		opts.ReserveSize = 256 << 20
	}
	v, err := mr.NewVirtual(dev, opts)
	must(t, err)
	t.Cleanup(func() { v.Close() })
	return v
}

// TestLendVirtualRoundTrip: the exporter allocates ranges of one to three
// granules from a Virtual, fills and lends them; the importer, another
// simulated process, maps each (no pool: the pieces come with the lend),
// checks it, writes its own words and gives it back; the exporter finds
// the importer's words and frees. No mismatch, no data race under -race,
// no descriptor left open; once every release's work is done the importer
// maps nothing, and the Virtual, once its frees are reaped, maps nothing
// either.
//
// It runs with each handle type of handleTypes.
func TestLendVirtualRoundTrip(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		fds := openDescriptors(t)
		v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: ht})
		e, l, im := virtualPair(t, v, nil, imp)
		ke, err := kernels.Load(exp)
		must(t, err)
		ki, err := kernels.Load(imp)
		must(t, err)
		se, err := exp.NewStream()
		must(t, err)
		defer se.Destroy()
		si, err := imp.NewStream()
		must(t, err)
		defer si.Destroy()
		g := v.GrowGranularity()
		sizes := []int{4096, g, 3 * g, 2*g + 4}

		var bad uint32
		done := make(chan struct{})
		go func() { // the importing process
			defer close(done)
			for i := range sizes {
				x, err := im.Receive(context.Background(), si)
				if err != nil {
					t.Error(err)
					return
				}
				if x.Size() != sizes[i] {
					t.Errorf("import %d of %d bytes, want %d", i, x.Size(), sizes[i])
				}
				words := x.Size() / 4
				bad += mismatches(t, imp, ki, si, x.Ptr(), words, uint32(i)<<24)
				if err := ki.Fill(si, x.Ptr(), words, uint32(i)<<24+1); err != nil {
					t.Error(err)
				}
				if err := x.Release(si); err != nil {
					t.Error(err)
				}
			}
		}()
		ptrs := make([]gpu.DevicePtr, len(sizes))
		loans := make([]*ipc.Loan, len(sizes))
		for i, n := range sizes {
			p, err := e.Allocate(n, se)
			must(t, err)
			ptrs[i] = p
			must(t, ke.Fill(se, p, n/4, uint32(i)<<24))
			loans[i], err = l.Lend(context.Background(), p, n, se)
			must(t, err)
		}
		<-done
		if bad != 0 {
			t.Fatalf("the importer read the exporter's words with %d mismatches", bad)
		}
		for i, ln := range loans {
			must(t, ln.Wait(context.Background()))
			if got := mismatches(t, exp, ke, se, ptrs[i], sizes[i]/4, uint32(i)<<24+1); got != 0 {
				t.Fatalf("range %d: the exporter read the importer's words with %d mismatches", i, got)
			}
			must(t, e.Deallocate(ptrs[i], sizes[i], se))
		}
		must(t, si.Synchronize())
		must(t, im.Reap())
		if n := im.Unmapping(); n != 0 {
			t.Errorf("%d released imports still mapped after their work and a Reap", n)
		}
		if l.Outstanding() != 0 || im.Outstanding() != 0 {
			t.Errorf("outstanding: link %d, importer %d", l.Outstanding(), im.Outstanding())
		}
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
		must(t, v.ReleaseContext(context.Background()))
		if st := v.Stats(); st.Mapped != 0 || st.Live != 0 {
			t.Errorf("the Virtual after every free: %d bytes mapped, %d live", st.Mapped, st.Live)
		}
		if n := openDescriptors(t); n != fds {
			t.Errorf("%d descriptors open, %d before", n, fds)
		}
	})
}

// TestLendVirtualUnmapWaits: the importer's release of a Virtual loan
// unmaps only once its stream has finished with the memory. With the
// importer's stream held, a fill of the import queued behind the hold and
// the import released, every Reap (and a Receive's) leaves the mapping in
// place; the fill then runs on mapped memory (an unmap before it would
// make it an illegal address, and the exporter would miss its words) and
// the next Reap unmaps. The give-back does not wait for the fill on the
// host: the exporter's stream waits for it, and finds its words.
//
// It runs with each handle type of handleTypes.
func TestLendVirtualUnmapWaits(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: ht})
		e, l, im := virtualPair(t, v, nil, imp)
		ke, _ := kernels.Load(exp)
		ki, _ := kernels.Load(imp)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		g := v.GrowGranularity()
		p, err := e.Allocate(2*g, se)
		must(t, err)
		ln, err := l.Lend(context.Background(), p, 2*g, se)
		must(t, err)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		release := imp.(*sim.Device).Hold(si)
		defer release()
		must(t, ki.Fill(si, x.Ptr(), 2*g/4, 77))
		must(t, x.Release(si))
		if err := x.Release(si); !errors.Is(err, ipc.ErrReleased) {
			t.Errorf("a second Release: %v, want ipc.ErrReleased", err)
		}
		must(t, ln.Wait(context.Background())) // given back while the fill waits
		for range 3 {
			must(t, im.Reap())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if _, err := im.Receive(ctx, si); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Receive with nothing lent: %v, want the context's error", err)
		}
		cancel()
		if n := im.Unmapping(); n != 1 {
			t.Errorf("%d released imports mapped while their stream is held, want 1", n)
		}
		release()
		if err := si.Synchronize(); err != nil {
			t.Fatalf("the importer's fill after its release: %v", err)
		}
		must(t, im.Reap())
		if n := im.Unmapping(); n != 0 {
			t.Errorf("%d released imports mapped after their work, want 0", n)
		}
		if got := mismatches(t, exp, ke, se, p, 2*g/4, 77); got != 0 {
			t.Fatalf("the exporter read the importer's words with %d mismatches", got)
		}
		must(t, e.Deallocate(p, 2*g, se))
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
	})
}

// TestLendVirtualRefusals: what the exporter of Virtual memory refuses,
// each with its error, and each refusal changes nothing: a free, a second
// lend and the closes while lent (ErrLent); lends of what is no
// allocation; exporters the Virtual cannot serve; a Pool's small block,
// which Virtual.Export cannot give. The refused free works once the loan
// is back.
//
// It runs with each handle type of handleTypes.
func TestLendVirtualRefusals(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: ht})
		e, l, im := virtualPair(t, v, nil, imp)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		g := v.GrowGranularity()
		p, err := e.Allocate(g, se)
		must(t, err)
		ln, err := l.Lend(context.Background(), p, g, se)
		must(t, err)
		q := checkLentRefusals(t, e, l, p, g, se)
		// The export fails (its first driver call): nothing is lent, and q
		// can still be freed.
		injected := errors.New("injected")
		exp.(*sim.Device).SetInjector(sim.FailCall(1, injected))
		_, err = l.Lend(context.Background(), q, 512, se)
		exp.(*sim.Device).SetInjector(nil)
		if !errors.Is(err, injected) {
			t.Errorf("a lend whose export fails: %v, want the injected error", err)
		}
		if n := l.Outstanding(); n != 1 {
			t.Errorf("%d loans out after the refusals, want 1", n)
		}
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		must(t, x.Release(si))
		must(t, ln.Wait(context.Background()))
		must(t, e.Deallocate(p, g, se))
		must(t, e.Deallocate(q, 512, se))
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())

		plain, err := mr.NewVirtual(exp, mr.VirtualOptions{ReserveSize: 64 << 20})
		must(t, err)
		defer plain.Close()
		for _, c := range []struct {
			what string
			v    *mr.Virtual
			opts ipc.VirtualExporterOptions
			want error
		}{
			{"a nil Virtual", nil, ipc.VirtualExporterOptions{}, gpu.ErrInvalidValue},
			{"a Virtual made without handle types", plain, ipc.VirtualExporterOptions{}, gpu.ErrInvalidValue},
			{"a handle type the Virtual was not made with", v, ipc.VirtualExporterOptions{Handle: gpu.HandlePOSIX ^ gpu.HandleFabric ^ ht}, gpu.ErrInvalidValue},
			{"an unknown handle type", v, ipc.VirtualExporterOptions{Handle: 0x40}, gpu.ErrInvalidValue},
			{"two handle types at once", v, ipc.VirtualExporterOptions{Handle: gpu.HandlePOSIX | gpu.HandleFabric}, gpu.ErrInvalidValue},
		} {
			if _, err := ipc.NewVirtualExporter(c.v, c.opts); !errors.Is(err, c.want) {
				t.Errorf("an exporter over %s: %v, want %v", c.what, err, c.want)
			}
		}
	})
}

// TestLendVirtualPool: an Exporter over a Pool over the Virtual lends a
// block of four granules, which the pool grows in place in a growable
// range (the export gives the pieces under it). The importer reads the
// exporter's words, the exporter the importer's, and the pool frees the
// block.
//
// It runs with each handle type of handleTypes.
func TestLendVirtualPool(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		v := newSharedVirtual(t, exp, mr.VirtualOptions{PiecesPerCommit: 1, HandleTypes: ht})
		pool, err := mr.NewPool(v, mr.PoolOptions{})
		must(t, err)
		defer pool.Close()
		e, l, im := virtualPair(t, v, pool, imp)
		if e.Upstream() != mr.Resource(pool) || e.Async() != nil {
			t.Errorf("the exporter's upstream %v and Async %v, want the pool and nil", e.Upstream(), e.Async())
		}
		ke, _ := kernels.Load(exp)
		ki, _ := kernels.Load(imp)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		g := v.GrowGranularity()
		n := 3*g + g/2
		p, err := e.Allocate(n, se)
		must(t, err)
		must(t, ke.Fill(se, p, n/4, 5))
		ln, err := l.Lend(context.Background(), p, n, se)
		must(t, err)
		x, err := im.Receive(context.Background(), si)
		must(t, err)
		if x.Size() != n {
			t.Fatalf("an import of %d bytes, want %d", x.Size(), n)
		}
		if got := mismatches(t, imp, ki, si, x.Ptr(), n/4, 5); got != 0 {
			t.Fatalf("the importer read the pool's block with %d mismatches", got)
		}
		must(t, ki.Fill(si, x.Ptr(), n/4, 6))
		must(t, x.Release(si))
		must(t, ln.Wait(context.Background()))
		if got := mismatches(t, exp, ke, se, p, n/4, 6); got != 0 {
			t.Fatalf("the exporter read the importer's words with %d mismatches", got)
		}
		must(t, e.Deallocate(p, n, se))
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
		if u := pool.Usage(); u.Used != 0 {
			t.Errorf("the pool uses %d bytes after the free", u.Used)
		}
	})
}

// TestLendVirtualLostPeers: an importer that vanishes with a Virtual loan
// mapped gives it back as lost (ipc.ErrPeerLost), and the exporter frees
// it; an importer whose exporter vanishes gets ErrPeerLost from Release,
// and still unmaps the import once its work is done.
//
// It runs with each handle type of handleTypes.
func TestLendVirtualLostPeers(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		t.Run("importer", func(t *testing.T) {
			exp, imp := processes(t)
			v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: ht})
			e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{Handle: ht})
			must(t, err)
			l, im, _, ci := connect(t, e, imp)
			se, _ := exp.NewStream()
			si, _ := imp.NewStream()
			p, err := e.Allocate(4096, se)
			must(t, err)
			ln, err := l.Lend(context.Background(), p, 4096, se)
			must(t, err)
			_, err = im.Receive(context.Background(), si)
			must(t, err)
			ci.Close() // the importer's process is gone
			if err := ln.Wait(context.Background()); !errors.Is(err, ipc.ErrPeerLost) {
				t.Fatalf("a loan of a lost importer: %v, want ipc.ErrPeerLost", err)
			}
			must(t, e.Deallocate(p, 4096, se))
			<-l.Done()
			must(t, e.Close())
			must(t, v.ReleaseContext(context.Background()))
			if st := v.Stats(); st.Mapped != 0 {
				t.Errorf("the Virtual maps %d bytes after the free", st.Mapped)
			}
		})
		t.Run("exporter", func(t *testing.T) {
			exp, imp := processes(t)
			v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: ht})
			e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{Handle: ht})
			must(t, err)
			l, im, ce, _ := connect(t, e, imp)
			se, _ := exp.NewStream()
			si, _ := imp.NewStream()
			ki, _ := kernels.Load(imp)
			p, err := e.Allocate(4096, se)
			must(t, err)
			ln, err := l.Lend(context.Background(), p, 4096, se)
			must(t, err)
			x, err := im.Receive(context.Background(), si)
			must(t, err)
			ce.Close() // the exporter's process is gone
			if _, err := im.Receive(context.Background(), si); !errors.Is(err, ipc.ErrPeerLost) {
				t.Errorf("Receive after the exporter left: %v, want ipc.ErrPeerLost", err)
			}
			release := imp.(*sim.Device).Hold(si)
			must(t, ki.Fill(si, x.Ptr(), 1024, 3))
			if err := x.Release(si); !errors.Is(err, ipc.ErrPeerLost) {
				t.Errorf("Release after the exporter left: %v, want ipc.ErrPeerLost", err)
			}
			if err := x.Release(si); !errors.Is(err, ipc.ErrReleased) {
				t.Errorf("a second Release after the exporter left: %v, want ipc.ErrReleased", err)
			}
			if n := im.Unmapping(); n != 1 {
				t.Errorf("%d imports mapped while the released one's work waits, want 1", n)
			}
			release()
			must(t, si.Synchronize())
			must(t, im.Reap())
			if n, m := im.Unmapping(), im.Outstanding(); n != 0 || m != 0 {
				t.Errorf("after the work: %d imports mapped, %d held; want 0, 0", n, m)
			}
			must(t, im.Close())
			// The exporter's side, whose socket the test closed behind its
			// link: the loan is back as lost, and the range is freed, which
			// closes the descriptor the Virtual kept of its export.
			<-l.Done()
			if err := ln.Wait(context.Background()); !errors.Is(err, ipc.ErrPeerLost) {
				t.Errorf("the loan after the link was lost: %v, want ipc.ErrPeerLost", err)
			}
			must(t, e.Deallocate(p, 4096, se))
			must(t, v.ReleaseContext(context.Background()))
		})
	})
}
