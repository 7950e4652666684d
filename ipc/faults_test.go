//go:build unix

package ipc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
)

// TestHandshakeFaults fails every driver call of the handshake in turn,
// on the exporter's side and on the importer's: the side whose call failed
// returns the injected error; the other side fails too, or, if it had
// finished its part, finds the link gone at its first use (never a hang
// or a panic); and a new handshake on the same exporter then succeeds,
// lends and gives back.
//
// It runs with each handle type of handleTypes.
func TestHandshakeFaults(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		injected := errors.New("injected")
		for _, side := range []string{"exporter", "importer"} {
			for k := 1; ; k++ {
				exp, imp := processes(t)
				e, err := ipc.NewExporter(exp, ipc.ExporterOptions{Handle: ht})
				must(t, err)
				victim := exp.(*sim.Device)
				if side == "importer" {
					victim = imp.(*sim.Device)
				}
				victim.SetInjector(sim.FailCall(k, injected))
				l, im, serr, aerr := handshake(t, e, imp)
				victim.SetInjector(nil)
				if serr == nil && aerr == nil {
					if k == 1 {
						t.Fatalf("%s: no driver call to fail", side)
					}
					must(t, im.Close())
					<-l.Done()
					must(t, e.Close())
					break // every call of the handshake failed once
				}
				failed := serr
				if side == "importer" {
					failed = aerr
				}
				if !errors.Is(failed, injected) {
					t.Errorf("%s call %d failed: the %s said %v, want the injected error", side, k, side, failed)
				}
				switch {
				case serr != nil && aerr == nil:
					si, _ := imp.NewStream()
					if _, err := im.Receive(context.Background(), si); !errors.Is(err, ipc.ErrPeerLost) {
						t.Errorf("exporter call %d failed after the importer's part: Receive %v, want ipc.ErrPeerLost", k, err)
					}
					must(t, im.Close())
				case aerr != nil && serr == nil:
					<-l.Done()
					if !errors.Is(l.Err(), ipc.ErrPeerLost) {
						t.Errorf("importer call %d failed after the exporter's part: link %v, want ipc.ErrPeerLost", k, l.Err())
					}
					must(t, l.Close())
				}
				// The exporter still works.
				_, l, im = pairOn(t, e, imp)
				s, _ := e.Device().NewStream()
				si, _ := imp.NewStream()
				p, err := e.Allocate(4096, s)
				must(t, err)
				ln, err := l.Lend(context.Background(), p, 4096, s)
				must(t, err)
				x, err := im.Receive(context.Background(), si)
				must(t, err)
				must(t, x.Release(si))
				must(t, ln.Wait(context.Background()))
				must(t, e.Deallocate(p, 4096, s))
				must(t, im.Close())
				<-l.Done()
				must(t, e.Close())
			}
		}
	})
}

// handshake runs Serve and Accept on a new socket pair and returns what
// each gave; a side that failed closes its socket, as a program would.
func handshake(t *testing.T, e *ipc.Exporter, imp gpu.Device) (l *ipc.Link, im *ipc.Importer, serr, aerr error) {
	t.Helper()
	ce, ci := socketPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		im, aerr = ipc.Accept(ctx, imp, ci)
		if aerr != nil {
			ci.Close()
		}
	}()
	l, serr = e.Serve(ctx, ce)
	if serr != nil {
		ce.Close()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the handshake hung: serve %v, accept %v", serr, aerr)
	}
	return l, im, serr, aerr
}

// pairOn connects a new importer on imp to the exporter e.
func pairOn(t *testing.T, e *ipc.Exporter, imp gpu.Device) (*ipc.Exporter, *ipc.Link, *ipc.Importer) {
	t.Helper()
	ce, ci := socketPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var im *ipc.Importer
	var ierr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); im, ierr = ipc.Accept(ctx, imp, ci) }()
	l, err := e.Serve(ctx, ce)
	wg.Wait()
	must(t, err)
	must(t, ierr)
	return e, l, im
}

// TestHandshakeCanceledAtCommit: a context that ends after a side's
// handshake is done but before it commits fails that side with the
// context's error and releases what it made, once: the exporter keeps no
// link to a closed socket and closes cleanly, and the other side finds
// the link gone at its first use.
func TestHandshakeCanceledAtCommit(t *testing.T) {
	for _, side := range []string{"serve", "accept"} {
		t.Run(side, func(t *testing.T) {
			exp, imp := processes(t)
			e, err := ipc.NewExporter(exp, ipc.ExporterOptions{})
			must(t, err)
			sctx, scancel := context.WithCancel(context.Background())
			defer scancel()
			actx, acancel := context.WithCancel(context.Background())
			defer acancel()
			ipc.SetCommitHook(func(s string) {
				if s == side && s == "serve" {
					scancel()
				} else if s == side {
					acancel()
				}
			})
			defer ipc.SetCommitHook(nil)
			ce, ci := socketPair(t)
			var im *ipc.Importer
			var aerr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); im, aerr = ipc.Accept(actx, imp, ci) }()
			l, serr := e.Serve(sctx, ce)
			wg.Wait()
			ipc.SetCommitHook(nil)
			switch side {
			case "serve":
				if !errors.Is(serr, context.Canceled) || l != nil {
					t.Fatalf("Serve canceled at its commit: %v, %v; want nil, context.Canceled", l, serr)
				}
				must(t, aerr)
				si, _ := imp.NewStream()
				if _, err := im.Receive(context.Background(), si); !errors.Is(err, ipc.ErrPeerLost) {
					t.Errorf("Receive from an exporter that gave up: %v, want ipc.ErrPeerLost", err)
				}
				must(t, im.Close())
			case "accept":
				if !errors.Is(aerr, context.Canceled) || im != nil {
					t.Fatalf("Accept canceled at its commit: %v, %v; want nil, context.Canceled", im, aerr)
				}
				must(t, serr)
				<-l.Done()
				if !errors.Is(l.Err(), ipc.ErrPeerLost) {
					t.Errorf("link to an importer that gave up: %v, want ipc.ErrPeerLost", l.Err())
				}
				must(t, l.Close())
			}
			must(t, e.Close())
		})
	}
}
