//go:build unix

package ipc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// shareVirtual exports [p, p+size) of v as the one handle type v was made
// with, carries it over a socket pair and imports it on imp, closing the
// descriptors of both sides.
func shareVirtual(t *testing.T, v *mr.Virtual, imp gpu.Device, p gpu.DevicePtr, size int) *ipc.VirtualImport {
	t.Helper()
	x, err := v.Export(p, size, v.Options().HandleTypes)
	must(t, err)
	ce, ci := socketPair(t)
	defer ce.Close()
	defer ci.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- ipc.SendVirtual(ctx, ce, x) }()
	y, err := ipc.RecvVirtual(ctx, ci)
	must(t, err)
	must(t, <-sent)
	must(t, x.Close())
	m, err := ipc.ImportVirtual(imp, y)
	must(t, y.Close())
	must(t, err)
	return m
}

// TestVirtualShareRoundTrip: the exporter fills a growable allocation
// made of several pieces and records an interprocess event; the importer,
// another simulated process, imports the range over a socket, waits on
// the event, checks the words, writes its own and records its event; the
// exporter's stream waits on that before it checks and frees. The events
// alone order the two processes: no data race under -race, no mismatch,
// no descriptor left open, and the exporter's memory goes back.
//
// It runs with each handle type of handleTypes.
func TestVirtualShareRoundTrip(t *testing.T) {
	eachHandleType(t, func(t *testing.T, ht gpu.HandleType) {
		exp, imp := processes(t)
		fds := openDescriptors(t)
		v, err := mr.NewVirtual(exp, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: ht, PiecesPerCommit: 1})
		must(t, err)
		defer v.Close()
		se, err := exp.NewStream()
		must(t, err)
		defer se.Destroy()
		si, err := imp.NewStream()
		must(t, err)
		defer si.Destroy()
		ke, err := kernels.Load(exp)
		must(t, err)
		ki, err := kernels.Load(imp)
		must(t, err)
		g := v.GrowGranularity()
		p, err := v.AllocateGrowable(g, 8*g, se)
		must(t, err)
		must(t, v.Commit(p, g, 2*g, se)) // a second piece
		must(t, v.Commit(p, 3*g, g, se)) // a third
		const seed = 1 << 20
		words := 4 * g / 4
		must(t, ke.Fill(se, p, words, seed))
		ready, err := gpu.IPCOf(exp)
		must(t, err)
		re, err := ready.NewIPCEvent()
		must(t, err)
		defer re.Destroy()
		must(t, re.Record(se))
		rh, err := ready.ExportEvent(re)
		must(t, err)

		m := shareVirtual(t, v, imp, p, 4*g)
		if m.Size() != 4*g {
			t.Fatalf("import of %d bytes, want %d", m.Size(), 4*g)
		}
		xi, err := gpu.IPCOf(imp)
		must(t, err)
		ire, err := xi.ImportEvent(rh)
		must(t, err)
		defer ire.Destroy()
		must(t, si.WaitEvent(ire))
		if n := mismatches(t, imp, ki, si, m.Ptr(), words, seed); n != 0 {
			t.Fatalf("importer: %d of %d words differ from the exporter's", n, words)
		}
		must(t, ki.Fill(si, m.Ptr(), words, 2*seed))
		done, err := xi.NewIPCEvent()
		must(t, err)
		defer done.Destroy()
		must(t, done.Record(si))
		dh, err := xi.ExportEvent(done)
		must(t, err)

		ide, err := ready.ImportEvent(dh)
		must(t, err)
		defer ide.Destroy()
		must(t, se.WaitEvent(ide))
		if n := mismatches(t, exp, ke, se, p, words, 2*seed); n != 0 {
			t.Fatalf("exporter: %d of %d words differ from the importer's", n, words)
		}
		must(t, v.Deallocate(p, 8*g, se))
		must(t, si.Synchronize())
		must(t, m.Close())
		if err := m.Close(); !errors.Is(err, ipc.ErrReleased) {
			t.Errorf("second Close: %v, want ErrReleased", err)
		}
		must(t, v.ReleaseContext(context.Background()))
		if st := v.Stats(); st.Mapped != 0 || st.Growable != 0 {
			t.Errorf("after the free: %d bytes mapped, %d growable ranges", st.Mapped, st.Growable)
		}
		if n := openDescriptors(t); n != fds {
			t.Errorf("%d descriptors open, %d before", n, fds)
		}
	})
}

// noSharing is a device that cannot share physical allocations.
type noSharing struct{ gpu.Device }

// TestImportVirtualRefusals: a malformed export is ErrProtocol, a device
// without sharing ErrNotSupported, a closed descriptor the backend's
// ErrInvalidValue; none leaves a range reserved (a second import of a
// good export still fits in a device whose address space only holds one).
func TestImportVirtualRefusals(t *testing.T) {
	exp, imp := processes(t)
	v, err := mr.NewVirtual(exp, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandlePOSIX})
	must(t, err)
	defer v.Close()
	s, err := exp.NewStream()
	must(t, err)
	defer s.Destroy()
	g := uint64(v.GrowGranularity())
	p, err := v.Allocate(int(2*g), s)
	must(t, err)
	defer v.Deallocate(p, int(2*g), s)
	x, err := v.Export(p, int(2*g), gpu.HandlePOSIX)
	must(t, err)
	defer x.Close()
	piece := x.Pieces[0]
	for _, c := range []struct {
		name string
		x    mr.VirtualExport
		dev  gpu.Device
		want error
	}{
		{"no pieces", mr.VirtualExport{Span: g, Size: g}, imp, ipc.ErrProtocol},
		{"an empty range", mr.VirtualExport{Span: 2 * g, Pieces: x.Pieces}, imp, ipc.ErrProtocol},
		{"a range past the span", mr.VirtualExport{Span: 2 * g, Start: g, Size: 2 * g, Pieces: x.Pieces}, imp, ipc.ErrProtocol},
		{"a piece past the span", mr.VirtualExport{Span: g, Size: g, Pieces: x.Pieces}, imp, ipc.ErrProtocol},
		{"overlapping pieces", mr.VirtualExport{Span: 3 * g, Size: g, Pieces: []mr.VirtualPiece{piece, {Offset: g, Size: 2 * g, Handle: piece.Handle}}}, imp, ipc.ErrProtocol},
		{"a device without sharing", x, noSharing{imp}, gpu.ErrNotSupported},
		{"a piece without its descriptor", mr.VirtualExport{Span: 2 * g, Size: g, Pieces: []mr.VirtualPiece{{Size: 2 * g, Handle: gpu.Shareable{Type: gpu.HandlePOSIX}}}}, imp, gpu.ErrInvalidValue},
	} {
		if _, err := ipc.ImportVirtual(c.dev, c.x); !errors.Is(err, c.want) {
			t.Errorf("ImportVirtual of %s: %v, want %v", c.name, err, c.want)
		}
	}
	// The second of two pieces fails: the first is unmapped again and
	// the range freed, so the same export imports afterwards.
	bad := mr.VirtualExport{Span: 4 * g, Size: 4 * g, Pieces: []mr.VirtualPiece{piece, {Offset: 2 * g, Size: 2 * g, Handle: gpu.Shareable{Type: gpu.HandlePOSIX}}}}
	if _, err := ipc.ImportVirtual(imp, bad); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("ImportVirtual with a bad second piece: %v, want ErrInvalidValue", err)
	}
	m, err := ipc.ImportVirtual(imp, x)
	must(t, err)
	must(t, m.Close())
}

// TestRecvVirtualRefusals: a header that is no export's, an export of no
// pieces, a POSIX piece without its descriptor or with fabric handle
// bytes, and a fabric piece with a descriptor are ErrProtocol, with every descriptor received closed; SendVirtual
// refuses a malformed export before writing.
func TestRecvVirtualRefusals(t *testing.T) {
	fds := openDescriptors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	header := func(pieces uint64) []byte {
		h := make([]byte, 40)
		copy(h, "SAVIRT01")
		binary.LittleEndian.PutUint64(h[8:], 2<<20)
		binary.LittleEndian.PutUint64(h[24:], 2<<20)
		binary.LittleEndian.PutUint64(h[32:], pieces)
		return h
	}
	piece := func(t gpu.HandleType) []byte {
		b := make([]byte, 84)
		binary.LittleEndian.PutUint64(b[8:], 2<<20)
		binary.LittleEndian.PutUint32(b[16:], uint32(t))
		return b
	}
	junk := make([]byte, 40)
	copy(junk, "NOTANEXP")
	for _, c := range []struct {
		name  string
		write func(w, wf func([]byte))
	}{
		{"a foreign header", func(w, _ func([]byte)) { w(junk) }},
		{"no pieces", func(w, _ func([]byte)) { w(header(0)) }},
		{"a POSIX piece without a descriptor", func(w, _ func([]byte)) {
			w(header(1))
			w(piece(gpu.HandlePOSIX))
		}},
		{"a fabric piece with a descriptor", func(w, wf func([]byte)) {
			w(header(1))
			wf(piece(gpu.HandleFabric))
		}},
		{"a POSIX piece with fabric handle bytes", func(w, wf func([]byte)) {
			w(header(1))
			b := piece(gpu.HandlePOSIX)
			b[20] = 0x5a
			wf(b)
		}},
	} {
		a, b := socketPair(t)
		w := func(m []byte) {
			if _, err := a.Write(m); err != nil {
				t.Fatal(err)
			}
		}
		wf := func(m []byte) {
			f, err := os.Open(os.DevNull)
			must(t, err)
			defer f.Close()
			must(t, ipc.SendFile(a, m, f))
		}
		c.write(w, wf)
		if _, err := ipc.RecvVirtual(ctx, b); !errors.Is(err, ipc.ErrProtocol) {
			t.Errorf("RecvVirtual of %s: %v, want ErrProtocol", c.name, err)
		}
		a.Close()
		b.Close()
	}
	a, b := socketPair(t)
	if err := ipc.SendVirtual(ctx, a, mr.VirtualExport{}); !errors.Is(err, ipc.ErrProtocol) {
		t.Errorf("SendVirtual of an empty export: %v, want ErrProtocol", err)
	}
	a.Close()
	b.Close()
	if n := openDescriptors(t); n != fds {
		t.Errorf("%d descriptors open, %d before", n, fds)
	}
}
