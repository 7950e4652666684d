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
func TestHandshakeFaults(t *testing.T) {
	injected := errors.New("injected")
	for _, side := range []string{"exporter", "importer"} {
		for k := 1; ; k++ {
			exp, imp := processes(t)
			e, err := ipc.NewExporter(exp, ipc.ExporterOptions{})
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
			ln, err := l.Lend(p, 4096, s)
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
