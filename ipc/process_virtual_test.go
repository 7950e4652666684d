//go:build unix

package ipc_test

// A Virtual range made of several physical allocations, shared with a
// real second process on the card (mr.Virtual.Export, ipc.SendVirtual,
// ipc.ImportVirtual), ordered by interprocess events as
// mr/virtual_export.go prescribes.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// TestTwoProcessesVirtual: the exporter commits a growable allocation in
// three pieces (2, 4 and 8 granules), fills it, records an interprocess
// event and sends it and the export of granules 1-12 (all three pieces)
// to a child process; the child waits on the event, checks the pattern,
// writes its own, records its event and sends it back; the exporter's
// stream waits on that, checks the child's words and frees the range.
// Zero mismatches either side, and the exporter's memory all unmapped.
func TestTwoProcessesVirtual(t *testing.T) {
	dev := cardDevice(t)
	ch := startChild(t, "virtual")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := mr.NewVirtual(dev, mr.VirtualOptions{ReserveSize: 1 << 30, HandleTypes: gpu.HandlePOSIX, PiecesPerCommit: 1})
	must(t, err)
	defer v.Close()
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	k, err := kernels.Load(dev)
	must(t, err)
	g := v.GrowGranularity()
	p, err := v.AllocateGrowable(2*g, 64*g, s)
	must(t, err)
	must(t, v.Commit(p, 2*g, 4*g, s))
	must(t, v.Commit(p, 6*g, 8*g, s))
	const seed = 0x5a000000
	words := 14 * g / 4
	must(t, k.Fill(s, p, words, seed))
	x, err := gpu.IPCOf(dev)
	must(t, err)
	ready, err := x.NewIPCEvent()
	must(t, err)
	defer ready.Destroy()
	must(t, ready.Record(s))
	rh, err := x.ExportEvent(ready)
	must(t, err)

	start := time.Now()
	ex, err := v.Export(p+gpu.DevicePtr(g), 12*g, gpu.HandlePOSIX)
	must(t, err)
	if len(ex.Pieces) != 3 || ex.Start != uint64(g) {
		t.Fatalf("export of granules 1-12: %d pieces from offset %d, want 3 from %d", len(ex.Pieces), ex.Start, g)
	}
	_, err = ch.conn.Write(rh[:])
	must(t, err)
	must(t, ipc.SendVirtual(ctx, ch.conn, ex))
	must(t, ex.Close())
	var dh gpu.IPCEventHandle
	_, err = io.ReadFull(ch.conn, dh[:])
	must(t, err)
	elapsed := time.Since(start)
	done, err := x.ImportEvent(dh)
	must(t, err)
	defer done.Destroy()
	must(t, s.WaitEvent(done))
	// The child's pattern over granules 1-12, the exporter's at 0 and 13.
	childBad := mismatches(t, dev, k, s, p+gpu.DevicePtr(g), 12*g/4, seed+1)
	edgeBad := mismatches(t, dev, k, s, p, g/4, seed) + mismatches(t, dev, k, s, p+gpu.DevicePtr(13*g), g/4, seed+13*uint32(g)/4)
	// Both checks synchronized s, so its wait on the child's event has
	// executed: the child may destroy the event and exit.
	_, err = ch.conn.Write([]byte{1})
	must(t, err)
	importerLine := ch.line(t) // "mismatches N"
	must(t, ch.cmd.Wait())
	must(t, v.Deallocate(p, 64*g, s))
	must(t, v.ReleaseContext(ctx))
	st := v.Stats()
	t.Logf("%d MiB in %d pieces through a second process, export to the child's event in %v: importer %s, exporter mismatches %d (granules 0 and 13: %d); after the free %d bytes mapped",
		12*g>>20, len(ex.Pieces), elapsed.Round(time.Microsecond), importerLine, childBad, edgeBad, st.Mapped)
	if importerLine != "mismatches 0" || childBad != 0 || edgeBad != 0 {
		t.Fatalf("importer %q, exporter %d and %d mismatches", importerLine, childBad, edgeBad)
	}
	if st.Mapped != 0 || st.Growable != 0 {
		t.Errorf("after the free: %d bytes mapped, %d growable ranges", st.Mapped, st.Growable)
	}
}

// childVirtual is the importer of TestTwoProcessesVirtual: it reads the
// exporter's event handle and export, imports both, checks the pattern
// after the event, rewrites the range, sends its own event back, unmaps
// once its stream has run, and keeps its event until the exporter says
// its wait on it has executed.
func childVirtual(dev gpu.Device, conn *net.UnixConn, s gpu.Stream, k *kernels.Kernels, cnt gpu.DevicePtr) error {
	x, err := gpu.IPCOf(dev)
	if err != nil {
		return err
	}
	var rh gpu.IPCEventHandle
	if _, err := io.ReadFull(conn, rh[:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := ipc.RecvVirtual(ctx, conn)
	if err != nil {
		return err
	}
	m, err := ipc.ImportVirtual(dev, ex)
	if cerr := ex.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	ready, err := x.ImportEvent(rh)
	if err != nil {
		return err
	}
	defer ready.Destroy()
	if err := s.WaitEvent(ready); err != nil {
		return err
	}
	words := m.Size() / 4
	// The range starts one granule in: the exporter's word there is
	// seed + granule/4.
	g := uint32(ex.Start / 4)
	if err := dev.MemsetD8Async(cnt, 0, 4, s); err != nil {
		return err
	}
	if err := k.Check(s, m.Ptr(), words, 0x5a000000+g, cnt); err != nil {
		return err
	}
	var b [4]byte
	if err := dev.CopyDtoHAsync(b[:], cnt, s); err != nil {
		return err
	}
	if err := k.Fill(s, m.Ptr(), words, 0x5a000000+1); err != nil {
		return err
	}
	done, err := x.NewIPCEvent()
	if err != nil {
		return err
	}
	defer done.Destroy()
	if err := done.Record(s); err != nil {
		return err
	}
	dh, err := x.ExportEvent(done)
	if err != nil {
		return err
	}
	if _, err := conn.Write(dh[:]); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if err := m.Close(); err != nil {
		return err
	}
	// The exporter's wait on done must have executed before done goes.
	var bye [1]byte
	if _, err := io.ReadFull(conn, bye[:]); err != nil {
		return err
	}
	fmt.Printf("mismatches %d\n", binary.LittleEndian.Uint32(b[:]))
	return nil
}

// vlendSizes are the ranges TestTwoProcessesVirtualLend lends, one to 64
// granules and two below one.
var vlendSizes = []int{4096, 2 << 20, 6<<20 + 4, 64 << 20, 1 << 20, 32 << 20, 2 << 20, 128 << 20}

// vlendRounds is how many times TestTwoProcessesVirtualLend lends one
// 2 MiB range to time the round trip.
const vlendRounds = 200

// TestTwoProcessesVirtualLend: an Exporter of Virtual memory
// (NewVirtualExporter) lends eight ranges of 4 KiB to 128 MiB, filled, to
// a child process through a Link; the child checks each, rewrites it and
// releases it without synchronizing (its unmap waits for an event), the
// exporter finds the child's words once each loan is back and frees.
// Then one 2 MiB range goes back and forth vlendRounds times: the lend to
// the loan's return, the child writing one word each time. Zero
// mismatches either side, the child's imports all unmapped after its
// stream has run, the Virtual mapping nothing after the frees.
func TestTwoProcessesVirtualLend(t *testing.T) {
	dev := cardDevice(t)
	ch := startChild(t, "vlend")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := mr.NewVirtual(dev, mr.VirtualOptions{ReserveSize: 4 << 30, HandleTypes: gpu.HandlePOSIX})
	must(t, err)
	defer v.Close()
	e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{})
	must(t, err)
	l, err := e.Serve(ctx, ch.conn)
	must(t, err)
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	k, err := kernels.Load(dev)
	must(t, err)
	ptrs := make([]gpu.DevicePtr, len(vlendSizes))
	loans := make([]*ipc.Loan, len(vlendSizes))
	for i, n := range vlendSizes {
		ptrs[i], err = e.Allocate(n, s)
		must(t, err)
		must(t, k.Fill(s, ptrs[i], n/4, uint32(i)<<24))
		loans[i], err = l.Lend(ctx, ptrs[i], n, s)
		must(t, err)
	}
	var bad uint32
	for i, ln := range loans {
		must(t, ln.Wait(ctx))
		bad += mismatches(t, dev, k, s, ptrs[i], vlendSizes[i]/4, uint32(i)<<24+1)
		must(t, e.Deallocate(ptrs[i], vlendSizes[i], s))
	}
	p, err := e.Allocate(2<<20, s)
	must(t, err)
	rt := make([]time.Duration, 0, vlendRounds)
	lend := make([]time.Duration, 0, vlendRounds)
	for range vlendRounds {
		t0 := time.Now()
		ln, err := l.Lend(ctx, p, 2<<20, s)
		must(t, err)
		lend = append(lend, time.Since(t0))
		must(t, ln.Wait(ctx))
		rt = append(rt, time.Since(t0))
	}
	must(t, e.Deallocate(p, 2<<20, s))
	child := ch.line(t)
	<-l.Done()
	must(t, ch.cmd.Wait())
	must(t, e.Close())
	must(t, v.ReleaseContext(ctx))
	st := v.Stats()
	t.Logf("%d ranges (4 KiB to 128 MiB) lent to a second process: child %s; exporter mismatches %d; a 2 MiB range lent and given back %d times: %s, of which the Lend (export and send) %s; after the frees %d bytes mapped",
		len(vlendSizes), child, bad, vlendRounds, summary(rt), summary(lend), st.Mapped)
	if !strings.HasPrefix(child, "mismatches 0 ") || !strings.Contains(child, " mapped-after 0 ") || bad != 0 {
		t.Fatalf("child %q, exporter mismatches %d", child, bad)
	}
	if st.Mapped != 0 || st.Live != 0 {
		t.Errorf("after the frees: %d bytes mapped, %d live", st.Mapped, st.Live)
	}
}

// childVirtualLend is the importer of TestTwoProcessesVirtualLend: it
// receives the eight ranges, checks each and rewrites it with pattern+1,
// releases it without synchronizing, then takes vlendRounds loans,
// touching one word of each; it reports the mismatches, how many released
// imports were still mapped right after the last release and after its
// stream had run (and a Reap), and the time of a Release (all of them,
// the round trips' included).
func childVirtualLend(dev gpu.Device, conn *net.UnixConn, s gpu.Stream, k *kernels.Kernels, cnt gpu.DevicePtr) error {
	ctx := context.Background()
	im, err := ipc.Accept(ctx, dev, conn)
	if err != nil {
		return err
	}
	if err := dev.MemsetD8Async(cnt, 0, 4, s); err != nil {
		return err
	}
	var rel []time.Duration
	for i := range len(vlendSizes) + vlendRounds {
		x, err := im.Receive(ctx, s)
		if err != nil {
			return err
		}
		if i < len(vlendSizes) {
			words := x.Size() / 4
			if err := k.Check(s, x.Ptr(), words, uint32(i)<<24, cnt); err != nil {
				return err
			}
			if err := k.Fill(s, x.Ptr(), words, uint32(i)<<24+1); err != nil {
				return err
			}
		} else if err := k.Fill(s, x.Ptr(), 1, uint32(i)); err != nil {
			return err
		}
		t0 := time.Now()
		if err := x.Release(s); err != nil {
			return err
		}
		rel = append(rel, time.Since(t0))
	}
	pending := im.Unmapping()
	var b [4]byte
	if err := dev.CopyDtoHAsync(b[:], cnt, s); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if err := im.Reap(); err != nil {
		return err
	}
	fmt.Printf("mismatches %d mapped-at-release %d mapped-after %d release %s\n",
		binary.LittleEndian.Uint32(b[:]), pending, im.Unmapping(), summary(rel))
	return im.Close()
}

// TestVirtualImportCost times, in one process on the card, the steps a
// Virtual loan of one 2 MiB piece costs besides the messages: the
// exporter's Virtual.Export, and the importer's driver calls of
// ImportVirtual (import the handle, reserve the span, map, release the
// handle, set access) and of its unmap (unmap, free the span), each over
// 200 rounds; then ImportVirtual and VirtualImport.Close whole.
func TestVirtualImportCost(t *testing.T) {
	dev := cardDevice(t)
	v, err := mr.NewVirtual(dev, mr.VirtualOptions{ReserveSize: 1 << 30, HandleTypes: gpu.HandlePOSIX})
	must(t, err)
	defer v.Close()
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	const n, rounds = 2 << 20, 200
	p, err := v.Allocate(n, s)
	must(t, err)
	defer v.Deallocate(p, n, s)
	ps, err := gpu.PhysicalSharingOf(dev)
	must(t, err)
	steps := []string{"export", "import handle", "reserve", "map", "release handle", "set access", "unmap", "free span", "ImportVirtual", "VirtualImport.Close"}
	ds := make([][]time.Duration, len(steps))
	for range rounds {
		var ts [11]time.Time
		ts[0] = time.Now()
		x, err := v.Export(p, n, gpu.HandlePOSIX)
		must(t, err)
		ts[1] = time.Now()
		h, err := ps.ImportPhysical(x.Pieces[0].Handle)
		must(t, err)
		ts[2] = time.Now()
		base, err := ps.ReserveAddress(x.Span, 0)
		must(t, err)
		ts[3] = time.Now()
		must(t, ps.Map(base, x.Span, h, 0))
		ts[4] = time.Now()
		must(t, ps.ReleasePhysical(h))
		ts[5] = time.Now()
		must(t, ps.SetAccess(base, x.Span))
		ts[6] = time.Now()
		must(t, ps.Unmap(base, x.Span))
		ts[7] = time.Now()
		must(t, ps.FreeAddress(base, x.Span))
		ts[8] = time.Now()
		m, err := ipc.ImportVirtual(dev, x)
		must(t, err)
		ts[9] = time.Now()
		must(t, m.Close())
		ts[10] = time.Now()
		must(t, x.Close())
		for i := range steps {
			ds[i] = append(ds[i], ts[i+1].Sub(ts[i]))
		}
	}
	for i, name := range steps {
		t.Logf("%-20s %s", name, summary(ds[i]))
	}
}
