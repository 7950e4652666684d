// Conformance of shared physical allocations (gpu.PhysicalSharing): an
// exporter's pattern read through the importer's mappings of several
// allocations and the importer's writes seen by the exporter, memory that
// outlives the exporter's release while the importer maps it, and the
// refusals of bad input; where the device offers fabric handles, a round
// trip through one or the driver's refusal of a process without an IMEX
// channel (gpu.ErrNotPermitted). RunPhysicalSharing takes an exporter and an
// importer: two simulated Backends stand for two processes; on the card
// one device serves as both (the driver imports its own process's
// descriptors), and package ipc's two-process test crosses a real
// process boundary.

package gputest

import (
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// RunPhysicalSharing runs the sharing suite as subtests of t: exp
// exports, imp imports (the same GPU, seen from two processes or one);
// both must implement gpu.PhysicalSharing and offer HandlePOSIX, else the
// suite skips.
func RunPhysicalSharing(t *testing.T, exp, imp gpu.Device) {
	t.Helper()
	xe, xi := sharingOf(t, exp), sharingOf(t, imp)
	t.Run("RoundTrip", func(t *testing.T) { testShareRoundTrip(t, exp, imp, xe, xi) })
	t.Run("OutlivesExporter", func(t *testing.T) { testShareOutlives(t, exp, imp, xe, xi) })
	t.Run("BadInput", func(t *testing.T) { testShareBadInput(t, xe) })
	t.Run("Fabric", func(t *testing.T) { testShareFabric(t, exp, imp, xe, xi) })
}

func sharingOf(t *testing.T, dev gpu.Device) gpu.PhysicalSharing {
	t.Helper()
	x, err := gpu.PhysicalSharingOf(dev)
	must(t, err)
	types, err := x.PhysicalHandleTypes()
	must(t, err)
	if types&gpu.HandlePOSIX == 0 {
		t.Skipf("the device offers handle types %#x for physical allocations, no POSIX descriptor", int32(types))
	}
	return x
}

// shareInto exports h as a descriptor, imports it into xi, closes the
// descriptor and maps the import at p, accessible, releasing the handle
// so that the import goes with the mapping.
func shareInto(t *testing.T, xe, xi gpu.PhysicalSharing, h gpu.Physical, p gpu.DevicePtr, size uint64) {
	t.Helper()
	sh, err := xe.ExportPhysical(h, gpu.HandlePOSIX)
	must(t, err)
	if sh.Type != gpu.HandlePOSIX || sh.File == nil {
		t.Fatalf("ExportPhysical: %+v, want a descriptor", sh)
	}
	ih, err := xi.ImportPhysical(sh)
	must(t, sh.File.Close())
	must(t, err)
	if ih == 0 {
		t.Fatal("ImportPhysical returned the null handle")
	}
	must(t, xi.Map(p, size, ih, 0))
	must(t, xi.ReleasePhysical(ih))
	must(t, xi.SetAccess(p, size))
}

// testShareRoundTrip: the exporter maps two exportable allocations (one
// granule, two granules) side by side and fills them; the importer maps
// imports of both side by side in a range of its own, checks the
// exporter's words across the seam, writes its own; the exporter finds
// them. The host orders the two sides (each synchronizes before the other
// goes on), as the two-process test does with its messages.
func testShareRoundTrip(t *testing.T, exp, imp gpu.Device, xe, xi gpu.PhysicalSharing) {
	g := granule(t, xe)
	const pieces = 3 // granules: one allocation of 1, one of 2
	se, si := newStream(t, exp), newStream(t, imp)
	ke, ki := load(t, exp), load(t, imp)
	ce, ci := newCounter(t, exp, se), newCounter(t, imp, si)
	pe := reserve(t, xe, pieces*g)
	pi := reserve(t, xi, pieces*g)

	h1, err := xe.CreateExportablePhysical(g, gpu.HandlePOSIX)
	must(t, err)
	h2, err := xe.CreateExportablePhysical(2*g, gpu.HandlePOSIX)
	must(t, err)
	must(t, xe.Map(pe, g, h1, 0))
	must(t, xe.Map(pe+gpu.DevicePtr(g), 2*g, h2, 0))
	must(t, xe.SetAccess(pe, pieces*g))
	words := int(pieces * g / 4)
	must(t, ke.Fill(se, pe, words, 7))
	must(t, se.Synchronize())

	shareInto(t, xe, xi, h1, pi, g)
	shareInto(t, xe, xi, h2, pi+gpu.DevicePtr(g), 2*g)
	exchangeWords(t, side{ke, se, ce, pe}, side{ki, si, ci, pi}, words, 7, 1000)
	must(t, xi.Unmap(pi, g))
	must(t, xi.Unmap(pi+gpu.DevicePtr(g), 2*g))
	must(t, xe.Unmap(pe, g))
	must(t, xe.Unmap(pe+gpu.DevicePtr(g), 2*g))
	must(t, xe.ReleasePhysical(h1))
	must(t, xe.ReleasePhysical(h2))
}

// testShareOutlives: once imported and mapped, the memory stays while the
// importer maps it, after the exporter unmapped and released its handle.
func testShareOutlives(t *testing.T, exp, imp gpu.Device, xe, xi gpu.PhysicalSharing) {
	g := granule(t, xe)
	se, si := newStream(t, exp), newStream(t, imp)
	ke, ki := load(t, exp), load(t, imp)
	ci := newCounter(t, imp, si)
	pe := reserve(t, xe, g)
	pi := reserve(t, xi, g)
	h, err := xe.CreateExportablePhysical(g, gpu.HandlePOSIX)
	must(t, err)
	must(t, xe.Map(pe, g, h, 0))
	must(t, xe.SetAccess(pe, g))
	must(t, ke.Fill(se, pe, int(g/4), 99))
	must(t, se.Synchronize())
	shareInto(t, xe, xi, h, pi, g)
	must(t, xe.Unmap(pe, g))
	must(t, xe.ReleasePhysical(h))
	must(t, ki.Check(si, pi, int(g/4), 99, ci.p))
	if c := ci.read(t, si); c != 0 {
		t.Fatalf("after the exporter let go: %d words wrong", c)
	}
	must(t, xi.Unmap(pi, g))
}

// testShareBadInput: the refusals, each with its error, and an export that
// still works after them.
func testShareBadInput(t *testing.T, x gpu.PhysicalSharing) {
	g := granule(t, x)
	wantErr(t, "CreateExportablePhysical(none)", second(x.CreateExportablePhysical(g, gpu.HandleNone)), gpu.ErrNotSupported)
	wantErr(t, "CreateExportablePhysical(unknown type)", second(x.CreateExportablePhysical(g, 0x40)), gpu.ErrNotSupported)
	wantErr(t, "CreateExportablePhysical(granule+1)", second(x.CreateExportablePhysical(g+1, gpu.HandlePOSIX)), gpu.ErrInvalidValue)
	plain, err := x.CreatePhysical(g)
	must(t, err)
	wantErr(t, "ExportPhysical of an allocation made without handle types", second(x.ExportPhysical(plain, gpu.HandlePOSIX)), gpu.ErrInvalidValue)
	must(t, x.ReleasePhysical(plain))
	h, err := x.CreateExportablePhysical(g, gpu.HandlePOSIX)
	must(t, err)
	wantErr(t, "ExportPhysical as a type it was not made with", second(x.ExportPhysical(h, gpu.HandleFabric)), gpu.ErrInvalidValue)
	wantErr(t, "ExportPhysical as no type", second(x.ExportPhysical(h, gpu.HandleNone)), gpu.ErrInvalidValue)
	wantErr(t, "ExportPhysical as an unknown type", second(x.ExportPhysical(h, 0x40)), gpu.ErrInvalidValue)
	wantErr(t, "ExportPhysical(0)", second(x.ExportPhysical(0, gpu.HandlePOSIX)), gpu.ErrInvalidValue)
	wantErr(t, "ImportPhysical without a descriptor", second(x.ImportPhysical(gpu.Shareable{Type: gpu.HandlePOSIX})), gpu.ErrInvalidValue)
	wantErr(t, "ImportPhysical of an unknown type", second(x.ImportPhysical(gpu.Shareable{Type: 0x40})), gpu.ErrInvalidValue)
	sh, err := x.ExportPhysical(h, gpu.HandlePOSIX)
	must(t, err)
	if sh.Type != gpu.HandlePOSIX || sh.File == nil {
		t.Fatalf("ExportPhysical: %+v, want a descriptor", sh)
	}
	must(t, sh.File.Close())
	wantErr(t, "ImportPhysical of a closed descriptor", second(x.ImportPhysical(sh)), gpu.ErrInvalidValue)
	must(t, x.ReleasePhysical(h))
	wantErr(t, "ExportPhysical of a released allocation", second(x.ExportPhysical(h, gpu.HandlePOSIX)), gpu.ErrInvalidValue)
	// The driver's own answer (driver 580, H100) to a descriptor that is
	// no export.
	null, err := os.Open(os.DevNull)
	must(t, err)
	defer null.Close()
	wantErr(t, "ImportPhysical of /dev/null", second(x.ImportPhysical(gpu.Shareable{Type: gpu.HandlePOSIX, File: null})), gpu.ErrUnknown)
}

// testShareFabric, where the device offers fabric handles: either the
// exporter's words read through the importer's mapping of a fabric import
// (an allocation exportable as both types, exported as fabric: 64 bytes,
// no descriptor), or, where the process has no IMEX channel, the driver's
// refusal of an allocation that requests fabric handles, or of its
// export, as gpu.ErrNotPermitted, after which POSIX sharing still works.
// The refusal is what the H100 this project is tested on answers (the
// card offers fabric handles; the machine has no IMEX channel).
func testShareFabric(t *testing.T, exp, imp gpu.Device, xe, xi gpu.PhysicalSharing) {
	types, err := xe.PhysicalHandleTypes()
	must(t, err)
	if types&gpu.HandleFabric == 0 {
		t.Skipf("the device offers handle types %#x for physical allocations, no fabric", int32(types))
	}
	g := granule(t, xe)
	h, err := xe.CreateExportablePhysical(g, gpu.HandlePOSIX|gpu.HandleFabric)
	var sh gpu.Shareable
	if err == nil {
		sh, err = xe.ExportPhysical(h, gpu.HandleFabric)
		if err != nil {
			must(t, xe.ReleasePhysical(h))
		}
	}
	if err != nil {
		// No IMEX channel: the refusal, with POSIX sharing unaffected.
		t.Logf("fabric refused: %v", err)
		wantErr(t, "a fabric allocation or export without an IMEX channel", err, gpu.ErrNotPermitted)
		testShareRoundTrip(t, exp, imp, xe, xi)
		return
	}
	if sh.Type != gpu.HandleFabric || sh.File != nil {
		t.Fatalf("ExportPhysical as fabric: %+v, want 64 bytes and no descriptor", sh)
	}
	se, si := newStream(t, exp), newStream(t, imp)
	ke, ki := load(t, exp), load(t, imp)
	ce, ci := newCounter(t, exp, se), newCounter(t, imp, si)
	pe, pi := reserve(t, xe, g), reserve(t, xi, g)
	must(t, xe.Map(pe, g, h, 0))
	must(t, xe.SetAccess(pe, g))
	words := int(g / 4)
	must(t, ke.Fill(se, pe, words, 31))
	must(t, se.Synchronize())
	ih, err := xi.ImportPhysical(sh)
	must(t, err)
	must(t, xi.Map(pi, g, ih, 0))
	must(t, xi.ReleasePhysical(ih))
	must(t, xi.SetAccess(pi, g))
	exchangeWords(t, side{ke, se, ce, pe}, side{ki, si, ci, pi}, words, 31, 32)
	must(t, xi.Unmap(pi, g))
	must(t, xe.Unmap(pe, g))
	must(t, xe.ReleasePhysical(h))
}

// side is one process's view of shared memory: its kernels, stream,
// mismatch counter and the address where it maps the memory.
type side struct {
	k *kernels.Kernels
	s gpu.Stream
	c counter
	p gpu.DevicePtr
}

// exchangeWords checks, on the importer's side, the words the exporter
// filled with pattern a (the exporter has synchronized its fill), then
// fills them with pattern b there and checks them on the exporter's side:
// the memory carries writes both ways.
func exchangeWords(t *testing.T, exp, imp side, words int, a, b uint32) {
	t.Helper()
	must(t, imp.k.Check(imp.s, imp.p, words, a, imp.c.p))
	if c := imp.c.read(t, imp.s); c != 0 {
		t.Fatalf("importer: %d of %d words differ from the exporter's pattern", c, words)
	}
	must(t, imp.k.Fill(imp.s, imp.p, words, b))
	must(t, imp.s.Synchronize())
	must(t, exp.k.Check(exp.s, exp.p, words, b, exp.c.p))
	if c := exp.c.read(t, exp.s); c != 0 {
		t.Fatalf("exporter: %d of %d words differ from the importer's pattern", c, words)
	}
}
