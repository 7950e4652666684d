// Conformance of interprocess memory (gpu.IPC). RunIPCBadInput needs one
// device, so the card runs it in one process; RunIPC needs an exporter and
// an importer that stand for two processes (two simulated Backends; on the
// card, package ipc's two-process test does the same over a real child).

package gputest

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// RunIPC runs the two-process suite as subtests of t: exp exports, imp
// imports; they must be the same GPU seen from two processes.
func RunIPC(t *testing.T, exp, imp gpu.Device) {
	t.Helper()
	t.Run("RoundTrip", func(t *testing.T) { testIPCRoundTrip(t, exp, imp) })
	t.Run("Legacy", func(t *testing.T) { testIPCLegacy(t, exp, imp) })
	t.Run("ImportRefusals", func(t *testing.T) { testIPCImportRefusals(t, exp, imp) })
}

func ipcOf(t *testing.T, dev gpu.Device) gpu.IPC {
	t.Helper()
	x, err := gpu.IPCOf(dev)
	must(t, err)
	return x
}

// exportablePool makes a POSIX-exportable pool, destroyed at cleanup.
func exportablePool(t *testing.T, x gpu.IPC) gpu.MemPool {
	t.Helper()
	types, err := x.ExportHandleTypes()
	must(t, err)
	if types&gpu.HandlePOSIX == 0 {
		t.Skipf("the device offers handle types %#x, no POSIX descriptor", int32(types))
	}
	p, err := x.NewExportableMemPool(gpu.HandlePOSIX)
	must(t, err)
	t.Cleanup(func() { p.Destroy() })
	return p
}

// testIPCRoundTrip: the exporter fills an allocation and records an
// interprocess event; the importer imports pool, pointer and event, waits,
// checks the words, writes its own, frees its import and records its event;
// the exporter waits on that and finds the importer's words.
func testIPCRoundTrip(t *testing.T, exp, imp gpu.Device) {
	xe, xi := ipcOf(t, exp), ipcOf(t, imp)
	se, si := newStream(t, exp), newStream(t, imp)
	ke, ki := load(t, exp), load(t, imp)
	pool := exportablePool(t, xe)
	const n = 1 << 16 // words
	p, err := exp.MallocFromPoolAsync(4*n, pool, se)
	must(t, err)
	must(t, ke.Fill(se, p, n, 11))
	ev, err := xe.NewIPCEvent()
	must(t, err)
	defer ev.Destroy()
	must(t, ev.Record(se))

	sh, err := xe.ExportMemPool(pool, gpu.HandlePOSIX)
	must(t, err)
	defer sh.File.Close()
	data, err := xe.ExportPointer(p)
	must(t, err)
	eh, err := xe.ExportEvent(ev)
	must(t, err)

	ipool, err := xi.ImportMemPool(sh)
	must(t, err)
	defer ipool.Destroy()
	q, err := xi.ImportPointer(ipool, data)
	must(t, err)
	if q == 0 {
		t.Fatal("ImportPointer returned the null pointer")
	}
	iev, err := xi.ImportEvent(eh)
	must(t, err)
	defer iev.Destroy()
	wantErr(t, "recording an imported event", iev.Record(si), gpu.ErrNotSupported)
	wantErr(t, "allocating from an imported pool", second(imp.MallocFromPoolAsync(256, ipool, si)), gpu.ErrNotSupported)
	must(t, si.WaitEvent(iev))
	errs := newCounter(t, imp, si)
	must(t, ki.Check(si, q, n, 11, errs.p))
	if got := errs.read(t, si); got != 0 {
		t.Fatalf("the importer read the exporter's words with %d mismatches", got)
	}
	must(t, ki.Fill(si, q, n, 12))
	must(t, imp.FreeAsync(q, si))
	back, err := xi.NewIPCEvent()
	must(t, err)
	defer back.Destroy()
	must(t, back.Record(si))
	bh, err := xi.ExportEvent(back)
	must(t, err)

	eback, err := xe.ImportEvent(bh)
	must(t, err)
	defer eback.Destroy()
	must(t, se.WaitEvent(eback))
	eerrs := newCounter(t, exp, se)
	must(t, ke.Check(se, p, n, 12, eerrs.p))
	if got := eerrs.read(t, se); got != 0 {
		t.Fatalf("the exporter read the importer's words with %d mismatches", got)
	}
	must(t, exp.FreeAsync(p, se))
	must(t, se.Synchronize())
}

// testIPCLegacy: cuIpcGetMemHandle's path: a Malloc allocation opened in
// the importer shows the exporter's bytes; closing it leaves them.
func testIPCLegacy(t *testing.T, exp, imp gpu.Device) {
	xe, xi := ipcOf(t, exp), ipcOf(t, imp)
	si := newStream(t, imp)
	p, err := exp.Malloc(4096)
	must(t, err)
	defer exp.Free(p)
	src := make([]byte, 4096)
	for i := range src {
		src[i] = byte(i)
	}
	se := newStream(t, exp)
	must(t, exp.CopyHtoDAsync(p, src, se))
	must(t, se.Synchronize())
	h, err := xe.ExportMem(p)
	must(t, err)
	q, err := xi.OpenMem(h)
	must(t, err)
	got := make([]byte, 4096)
	must(t, imp.CopyDtoHAsync(got, q, si))
	must(t, si.Synchronize())
	if i := firstDiff(got, src); i >= 0 {
		t.Fatalf("byte %d of the opened allocation: %#x, want %#x", i, got[i], src[i])
	}
	wantErr(t, "FreeAsync of an opened allocation", imp.FreeAsync(q, si), gpu.ErrInvalidValue)
	must(t, xi.CloseMem(q))
	wantErr(t, "CloseMem twice", xi.CloseMem(q), gpu.ErrInvalidValue)
}

// testIPCImportRefusals: export data of a freed allocation, or of another
// pool, is refused by the importer.
func testIPCImportRefusals(t *testing.T, exp, imp gpu.Device) {
	xe, xi := ipcOf(t, exp), ipcOf(t, imp)
	se := newStream(t, exp)
	pool := exportablePool(t, xe)
	other := exportablePool(t, xe)
	sh, err := xe.ExportMemPool(pool, gpu.HandlePOSIX)
	must(t, err)
	defer sh.File.Close()
	ipool, err := xi.ImportMemPool(sh)
	must(t, err)
	defer ipool.Destroy()
	p, err := exp.MallocFromPoolAsync(4096, other, se)
	must(t, err)
	data, err := xe.ExportPointer(p)
	must(t, err)
	wantErr(t, "ImportPointer of another pool's allocation", second(xi.ImportPointer(ipool, data)), gpu.ErrInvalidValue)
	must(t, exp.FreeAsync(p, se))
	must(t, se.Synchronize())
	var junk gpu.PtrExportData
	wantErr(t, "ImportPointer of junk", second(xi.ImportPointer(ipool, junk)), gpu.ErrInvalidValue)
}

// RunIPCBadInput runs the refusals one process can see, as a subtest of t.
func RunIPCBadInput(t *testing.T, dev gpu.Device) {
	t.Helper()
	t.Run("IPCBadInput", func(t *testing.T) {
		x := ipcOf(t, dev)
		s := newStream(t, dev)
		wantErr(t, "NewExportableMemPool(none)", second(x.NewExportableMemPool(gpu.HandleNone)), gpu.ErrNotSupported)
		wantErr(t, "NewExportableMemPool(unknown type)", second(x.NewExportableMemPool(0x40)), gpu.ErrNotSupported)
		plain, err := dev.NewMemPool()
		must(t, err)
		t.Cleanup(func() { plain.Destroy() })
		wantErr(t, "ExportMemPool of a pool made without handle types", second(x.ExportMemPool(plain, gpu.HandlePOSIX)), gpu.ErrInvalidValue)
		pool := exportablePool(t, x)
		wantErr(t, "ExportMemPool as a type it was not made with", second(x.ExportMemPool(pool, gpu.HandleFabric)), gpu.ErrInvalidValue)
		wantErr(t, "ExportMemPool(nil)", second(x.ExportMemPool(nil, gpu.HandlePOSIX)), gpu.ErrInvalidHandle)
		sh, err := x.ExportMemPool(pool, gpu.HandlePOSIX)
		must(t, err)
		if sh.File == nil || sh.Type != gpu.HandlePOSIX {
			t.Fatalf("ExportMemPool: %+v, want a descriptor", sh)
		}
		sh.File.Close()
		wantErr(t, "ImportMemPool without a descriptor", second(x.ImportMemPool(gpu.Shareable{Type: gpu.HandlePOSIX})), gpu.ErrInvalidValue)
		wantErr(t, "ImportPointer into a pool that was not imported", second(x.ImportPointer(pool, gpu.PtrExportData{})), gpu.ErrInvalidValue)
		wantErr(t, "ExportPointer(null)", second(x.ExportPointer(0)), gpu.ErrInvalidValue)
		e := newEvent(t, dev, false)
		wantErr(t, "ExportEvent of an event made without CU_EVENT_INTERPROCESS", second(x.ExportEvent(e)), gpu.ErrInvalidValue)
		ie, err := x.NewIPCEvent()
		must(t, err)
		defer ie.Destroy()
		must(t, ie.Record(s))
		if _, err := x.ExportEvent(ie); err != nil {
			t.Fatalf("ExportEvent: %v", err)
		}
		wantErr(t, "ElapsedSince of interprocess events", second(ie.ElapsedSince(ie)), gpu.ErrInvalidHandle)
		p, err := dev.MallocFromPoolAsync(4096, pool, s)
		must(t, err)
		if _, err := x.ExportPointer(p); err != nil {
			t.Fatalf("ExportPointer of an exportable pool's allocation: %v", err)
		}
		must(t, dev.FreeAsync(p, s))
		must(t, s.Synchronize())
	})
}
