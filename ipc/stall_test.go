package ipc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/ipc"
)

// TestLendImporterNotReceiving: an importer that never calls Receive
// fills its queue and the socket; Lend then returns ctx's error instead of
// blocking, lends nothing, and the link still closes.
func TestLendImporterNotReceiving(t *testing.T) {
	exp, imp := processes(t)
	e, l, im, ce, ci := pairConns(t, exp, imp, gpu.HandlePOSIX)
	// Small socket buffers, so that a few hundred frames fill them.
	must(t, ce.SetWriteBuffer(4096))
	must(t, ci.SetReadBuffer(4096))
	se, _ := exp.NewStream()
	const size = 256
	var loans []*ipc.Loan
	var stuck gpu.DevicePtr
	var lendErr error
	for i := 0; i < 5000 && lendErr == nil; i++ {
		p, err := e.Allocate(size, se)
		must(t, err)
		// Long enough that a Lend the queue has room for does not run
		// out of it on a loaded machine (50 ms did, under -race).
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		ln, err := l.Lend(ctx, p, size, se)
		cancel()
		if err != nil {
			stuck, lendErr = p, err
			break
		}
		loans = append(loans, ln)
	}
	if !errors.Is(lendErr, context.DeadlineExceeded) {
		t.Fatalf("Lend to an importer that does not receive, after %d loans: %v, want context.DeadlineExceeded", len(loans), lendErr)
	}
	t.Logf("Lend failed after %d loans: %v", len(loans), lendErr)
	if len(loans) < 64 {
		t.Errorf("Lend failed after %d loans, fewer than the importer's queue holds", len(loans))
	}
	// Nothing was lent: the allocation is the exporter's to free.
	if err := e.Deallocate(stuck, size, se); err != nil {
		t.Errorf("freeing the allocation whose Lend failed: %v", err)
	}
	if l.Err() == nil {
		// The frame did not go part-way: the link still runs and a
		// cancelled Lend fails with the cancellation.
		p, err := e.Allocate(size, se)
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := l.Lend(ctx, p, size, se); !errors.Is(err, context.Canceled) {
			t.Errorf("Lend with a cancelled context: %v, want context.Canceled", err)
		}
		must(t, e.Deallocate(p, size, se))
	} else if !errors.Is(l.Err(), ipc.ErrPeerLost) {
		t.Errorf("link after a frame cut short: %v, want ipc.ErrPeerLost", l.Err())
	}
	// The importer's goodbye sends back what it never received.
	must(t, im.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, ln := range loans {
		if err := ln.Wait(ctx); err != nil && !errors.Is(err, ipc.ErrPeerLost) {
			t.Fatalf("loan %d: %v", i, err)
		}
		must(t, e.Deallocate(ln.Ptr(), size, se))
	}
	must(t, l.Close())
	must(t, e.Close())
}
