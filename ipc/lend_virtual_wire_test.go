//go:build unix

package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// fakeExporter is the exporter's end of a connection, driven by hand: it
// has said hello as an exporter of Virtual memory (no pool) and read the
// importer's answer.
type fakeExporter struct {
	t    *testing.T
	dev  gpu.Device
	conn *net.UnixConn
	ev   gpu.Event
}

// simProcesses are two simulated processes on one GPU offering POSIX
// descriptors and fabric handles.
func simProcesses() (exp, imp gpu.Device) {
	cfg := sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric}
	exp, _ = sim.New(cfg).Device(0)
	imp, _ = sim.New(cfg).Device(0)
	return exp, imp
}

// newFakeExporter connects an Importer on a simulated device to a
// fakeExporter on another.
func newFakeExporter(t *testing.T) (*fakeExporter, *Importer, gpu.Stream) {
	t.Helper()
	exp, imp := simProcesses()
	ce, ci := unixPair(t)
	x, err := gpu.IPCOf(exp)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := x.NewIPCEvent()
	if err != nil {
		t.Fatal(err)
	}
	h, err := x.ExportEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	fe := &fakeExporter{t: t, dev: exp, conn: ce, ev: ev}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan error, 1)
	var im *Importer
	go func() {
		var err error
		im, err = Accept(ctx, imp, ci)
		ch <- err
	}()
	fe.write((&frame{kind: kindHello, handle: int32(gpu.HandleNone), b: h}).marshal())
	if _, err := readFrame(ce, kindHelloBack); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	s, err := imp.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	return fe, im, s
}

func (fe *fakeExporter) write(b []byte) {
	fe.t.Helper()
	if _, err := fe.conn.Write(b); err != nil {
		fe.t.Fatal(err)
	}
}

// writeFile writes b with a descriptor of a file of no export attached.
func (fe *fakeExporter) writeFile(b []byte) {
	fe.t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		fe.t.Fatal(err)
	}
	defer f.Close()
	if _, err := writeMessage(fe.conn, message{b: b, file: f}); err != nil {
		fe.t.Fatal(err)
	}
}

func (fe *fakeExporter) close() {
	fe.conn.Close()
	fe.ev.Destroy()
}

// exportHeader is an export's header: a span of pieces granules, a range
// of size bytes from its start, n pieces.
func exportHeader(span, size, n uint64) []byte {
	h := make([]byte, virtualHeaderLen)
	copy(h, virtualMagic)
	binary.LittleEndian.PutUint64(h[8:], span)
	binary.LittleEndian.PutUint64(h[24:], size)
	binary.LittleEndian.PutUint64(h[32:], n)
	return h
}

// fabricPiece is a piece message of a fabric handle.
func fabricPiece(off, size uint64, h [64]byte) []byte {
	b := exportPiece(off, size, gpu.HandleFabric)
	copy(b[20:], h[:])
	return b
}

// freedFabricHandle is the fabric handle of a physical allocation of size
// bytes of dev, released since: a handle whose export is gone.
func freedFabricHandle(t *testing.T, dev gpu.Device, size uint64) [64]byte {
	t.Helper()
	x, err := gpu.PhysicalSharingOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	h, err := x.CreateExportablePhysical(size, gpu.HandleFabric)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := x.ExportPhysical(h, gpu.HandleFabric)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.ReleasePhysical(h); err != nil {
		t.Fatal(err)
	}
	return sh.Fabric
}

// exportPiece is a piece message of no handle data.
func exportPiece(off, size uint64, t gpu.HandleType) []byte {
	b := make([]byte, virtualPieceLen)
	binary.LittleEndian.PutUint64(b[0:], off)
	binary.LittleEndian.PutUint64(b[8:], size)
	binary.LittleEndian.PutUint32(b[16:], uint32(t))
	return b
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestVirtualLendMalformed: an importer of Virtual memory refuses every
// malformed lend with ErrProtocol, closes every descriptor that came with
// it, and ends the link; a lend it cannot map (a pool lend without a
// pool, descriptors of no export, a malformed fabric handle, the fabric
// handle of an allocation freed since) it gives back at once, with the
// error of the refusal, and the link goes on.
func TestVirtualLendMalformed(t *testing.T) {
	const g = 2 << 20
	lend := func(size uint64) []byte { return (&frame{kind: kindLendVirtual, id: 1, size: size}).marshal() }
	foreign := make([]byte, virtualHeaderLen)
	copy(foreign, "NOTANEXP")
	withData := lend(g)
	withData[40] = 1
	for _, c := range []struct {
		name      string
		send      func(fe *fakeExporter)
		want      error
		givenBack bool // the link goes on, and the loan comes back
	}{
		{"a foreign export header", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(foreign)
		}, ErrProtocol, false},
		{"an export of no pieces", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(g, g, 0))
		}, ErrProtocol, false},
		{"a POSIX piece without its descriptor", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(g, g, 1))
			fe.write(exportPiece(0, g, gpu.HandlePOSIX))
		}, ErrProtocol, false},
		{"a fabric piece with a descriptor", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(2*g, g, 2))
			fe.writeFile(exportPiece(0, g, gpu.HandlePOSIX))
			fe.writeFile(exportPiece(g, g, gpu.HandleFabric))
		}, ErrProtocol, false},
		{"overlapping pieces", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(2*g, g, 2))
			fe.writeFile(exportPiece(0, 2*g, gpu.HandlePOSIX))
			fe.writeFile(exportPiece(g, g, gpu.HandlePOSIX))
		}, ErrProtocol, false},
		{"an export of another size than the lend's", func(fe *fakeExporter) {
			fe.write(lend(g / 2))
			fe.write(exportHeader(g, g, 1))
			fe.writeFile(exportPiece(0, g, gpu.HandlePOSIX))
		}, ErrProtocol, false},
		{"export data in the lend frame", func(fe *fakeExporter) {
			fe.write(withData)
		}, ErrProtocol, false},
		{"a frame out of turn", func(fe *fakeExporter) {
			fe.write((&frame{kind: kindHelloBack}).marshal())
		}, ErrProtocol, false},
		{"a pool lend to an importer without a pool", func(fe *fakeExporter) {
			fe.write((&frame{kind: kindLend, id: 1, size: 4096}).marshal())
		}, ErrProtocol, true},
		{"descriptors of no export", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(g, g, 1))
			fe.writeFile(exportPiece(0, g, gpu.HandlePOSIX))
		}, gpu.ErrUnknown, true},
		{"a malformed fabric handle", func(fe *fakeExporter) {
			fe.write(lend(g))
			fe.write(exportHeader(g, g, 1))
			fe.write(fabricPiece(0, g, [64]byte{'N', 'O', 'T', 'A', 'H', 'A', 'N', 'D'}))
		}, gpu.ErrInvalidValue, true},
		{"a fabric handle whose allocation was freed", func(fe *fakeExporter) {
			h := freedFabricHandle(fe.t, fe.dev, g)
			fe.write(lend(g))
			fe.write(exportHeader(g, g, 1))
			fe.write(fabricPiece(0, g, h))
		}, gpu.ErrInvalidValue, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fds := openFDs(t)
			fe, im, s := newFakeExporter(t)
			c.send(fe)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := im.Receive(ctx, s); !errors.Is(err, c.want) {
				t.Errorf("Receive: %v, want %v", err, c.want)
			}
			if c.givenBack {
				f, err := readFrame(fe.conn, kindGiveBack)
				if err != nil || f.kind != kindGiveBack || f.id != 1 {
					t.Errorf("after the refusal the exporter read %+v, %v; want the give-back of loan 1", f, err)
				}
			} else if _, err := im.Receive(ctx, s); !errors.Is(err, ErrProtocol) {
				t.Errorf("Receive after the malformed lend: %v, want the link ended with ErrProtocol", err)
			}
			if n := im.Outstanding() + im.Unmapping(); n != 0 {
				t.Errorf("%d imports held or mapped after the refusal", n)
			}
			fe.close()
			if err := im.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			s.Destroy()
			if n := openFDs(t); n != fds {
				t.Errorf("%d descriptors open, %d before", n, fds)
			}
		})
	}
}
