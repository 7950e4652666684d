package mr_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// importInto maps x's pieces into a range of imp, as another process
// would (package ipc's ImportVirtual does this for programs), and returns
// the range's first byte and a function that unmaps and frees it.
func importInto(t *testing.T, imp *sim.Device, x mr.VirtualExport) (gpu.DevicePtr, func()) {
	t.Helper()
	base, err := imp.ReserveAddress(x.Span, 0)
	ok(t, err)
	for _, pc := range x.Pieces {
		h, err := imp.ImportPhysical(pc.Handle)
		ok(t, err)
		ok(t, imp.Map(base+gpu.DevicePtr(pc.Offset), pc.Size, h, 0))
		ok(t, imp.ReleasePhysical(h))
		ok(t, imp.SetAccess(base+gpu.DevicePtr(pc.Offset), pc.Size))
	}
	ok(t, x.Close())
	return base + gpu.DevicePtr(x.Start), func() {
		for _, pc := range x.Pieces {
			ok(t, imp.Unmap(base+gpu.DevicePtr(pc.Offset), pc.Size))
		}
		ok(t, imp.FreeAddress(base, x.Span))
	}
}

// importerStream is a stream of the importing process, destroyed when
// the test ends.
func importerStream(t *testing.T, imp *sim.Device) gpu.Stream {
	t.Helper()
	si, err := imp.NewStream()
	ok(t, err)
	t.Cleanup(func() { si.Destroy() })
	return si
}

// readImported copies n bytes at the imported address q to the host on
// si and waits for them.
func readImported(t *testing.T, imp *sim.Device, q gpu.DevicePtr, n int, si gpu.Stream) []byte {
	t.Helper()
	got := make([]byte, n)
	ok(t, imp.CopyDtoHAsync(got, q, si))
	ok(t, si.Synchronize())
	return got
}

// pattern is n bytes that differ from one offset to the next.
func exportPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// importer is a device of a second simulated process.
func otherProcess(t *testing.T) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	ok(t, err)
	return d.(*sim.Device)
}

// TestVirtualExportPlain: a plain allocation of an exportable Virtual is
// one piece; another process reads the exporter's bytes through it and
// writes its own back; after the free the exporter's memory goes back to
// the device (the kept handle is released with the unmap).
func TestVirtualExportPlain(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX})
	imp := otherProcess(t)
	g := v.Stats().Granularity
	size := int(g + g/2)
	p, err := v.Allocate(size, ss[0])
	ok(t, err)
	want := exportPattern(size, 3)
	ok(t, dev.CopyHtoDAsync(p, want, ss[0]))
	ok(t, ss[0].Synchronize())

	x, err := v.Export(p, size, gpu.HandlePOSIX)
	ok(t, err)
	if x.Span != 2*g || x.Start != 0 || x.Size != uint64(size) || len(x.Pieces) != 1 ||
		x.Pieces[0].Offset != 0 || x.Pieces[0].Size != 2*g || x.Pieces[0].Handle.File == nil {
		t.Fatalf("export of a plain allocation: %+v", x)
	}
	q, done := importInto(t, imp, x)
	si := importerStream(t, imp)
	got := readImported(t, imp, q, size, si)
	if !bytes.Equal(got, want) {
		t.Fatal("the importer does not read the exporter's bytes")
	}
	back := exportPattern(size, 200)
	ok(t, imp.CopyHtoDAsync(q, back, si))
	ok(t, si.Synchronize())
	ok(t, dev.CopyDtoHAsync(got, p, ss[0]))
	ok(t, ss[0].Synchronize())
	if !bytes.Equal(got, back) {
		t.Fatal("the exporter does not read the importer's bytes")
	}
	done()
	ok(t, v.Deallocate(p, size, ss[0]))
	ok(t, v.ReleaseContext(context.Background()))
	if n := inUse(t, dev); n != 0 {
		t.Errorf("%d bytes of the device in use after the free", n)
	}
}

// TestVirtualExportGrowable: a range of a growable allocation lies over
// the pieces its commits made; the export names each whole, with offsets
// in the span, and the importer reads the exporter's bytes of the range.
func TestVirtualExportGrowable(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX, PiecesPerCommit: 1})
	imp := otherProcess(t)
	g := int(v.Stats().Granularity)
	p, err := v.AllocateGrowable(2*g, 16*g, ss[0])
	ok(t, err)
	ok(t, v.Commit(p, 2*g, 4*g, ss[0])) // one piece of granules 2-5
	all := exportPattern(6*g, 9)
	ok(t, dev.CopyHtoDAsync(p, all, ss[0]))
	ok(t, ss[0].Synchronize())

	// Granules 1-4: both pieces, from granule 0 to 6.
	x, err := v.Export(p+gpu.DevicePtr(g), 4*g, gpu.HandlePOSIX)
	ok(t, err)
	ug := uint64(g)
	if x.Span != 6*ug || x.Start != ug || x.Size != 4*ug || len(x.Pieces) != 2 ||
		x.Pieces[0].Offset != 0 || x.Pieces[0].Size != 2*ug || x.Pieces[1].Offset != 2*ug || x.Pieces[1].Size != 4*ug {
		t.Fatalf("export of granules 1-4: %+v", x)
	}
	q, done := importInto(t, imp, x)
	si := importerStream(t, imp)
	got := readImported(t, imp, q, 4*g, si)
	if !bytes.Equal(got, all[g:5*g]) {
		t.Fatal("the importer does not read the exporter's bytes of the range")
	}
	done()

	// A range in one piece exports that piece alone.
	x, err = v.Export(p+gpu.DevicePtr(3*g), g, gpu.HandlePOSIX)
	ok(t, err)
	if len(x.Pieces) != 1 || x.Span != 4*ug || x.Start != ug || x.Size != ug {
		t.Fatalf("export of granule 3: %+v", x)
	}
	ok(t, x.Close())
	ok(t, v.Deallocate(p, 16*g, ss[0]))
	ok(t, v.ReleaseContext(context.Background()))
	if n := inUse(t, dev); n != 0 {
		t.Errorf("%d bytes of the device in use after the free", n)
	}
}

// TestVirtualExportBadInput: each refusal with its error; none leaves
// anything exported or changes the allocation.
func TestVirtualExportBadInput(t *testing.T) {
	_, v, ss := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX})
	g := int(v.Stats().Granularity)
	p, err := v.Allocate(g, ss[0])
	ok(t, err)
	gp, err := v.AllocateGrowable(g, 8*g, ss[0])
	ok(t, err)
	for _, c := range []struct {
		name string
		p    gpu.DevicePtr
		size int
		t    gpu.HandleType
		want error
	}{
		{"a type the resource was not made with", p, g, gpu.HandleFabric, gpu.ErrInvalidValue},
		{"no type", p, g, gpu.HandleNone, gpu.ErrInvalidValue},
		{"two types at once", p, g, gpu.HandlePOSIX | gpu.HandleFabric, gpu.ErrInvalidValue},
		{"size 0", p, 0, gpu.HandlePOSIX, mr.ErrInvalidSize},
		{"negative size", p, -1, gpu.HandlePOSIX, mr.ErrInvalidSize},
		{"past the allocation", p, g + 1, gpu.HandlePOSIX, gpu.ErrInvalidValue},
		{"inside an allocation", p + 256, 256, gpu.HandlePOSIX, mr.ErrUnknownPointer},
		{"an unknown pointer", 0x1000, g, gpu.HandlePOSIX, mr.ErrUnknownPointer},
		{"uncommitted granules", gp, 2 * g, gpu.HandlePOSIX, gpu.ErrInvalidValue},
		{"past a growable range", gp, 9 * g, gpu.HandlePOSIX, gpu.ErrInvalidValue},
	} {
		if _, err := v.Export(c.p, c.size, c.t); !errors.Is(err, c.want) {
			t.Errorf("Export of %s: %v, want %v", c.name, err, c.want)
		}
	}
	ok(t, v.Deallocate(p, g, ss[0]))
	ok(t, v.Deallocate(gp, 8*g, ss[0]))
	if _, err := v.Export(p, g, gpu.HandlePOSIX); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Errorf("Export of a freed allocation: %v, want ErrUnknownPointer", err)
	}
	if _, err := v.Export(gp, g, gpu.HandlePOSIX); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Errorf("Export of a freed growable allocation: %v, want ErrUnknownPointer", err)
	}

	_, plain, ss2 := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{})
	q, err := plain.Allocate(g, ss2[0])
	ok(t, err)
	if _, err := plain.Export(q, g, gpu.HandlePOSIX); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("Export from a Virtual made without handle types: %v, want ErrInvalidValue", err)
	}
	ok(t, plain.Deallocate(q, g, ss2[0]))

	d, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	ok(t, err)
	if _, err := mr.NewVirtual(d, mr.VirtualOptions{HandleTypes: gpu.HandleFabric}); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("NewVirtual with a handle type the device does not offer: %v, want ErrNotSupported", err)
	}
}

// TestVirtualExportPoolBlock: a block of a Pool growing in place over an
// exportable Virtual is exported by its address alone, and another
// process reads the block's bytes.
func TestVirtualExportPoolBlock(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX})
	imp := otherProcess(t)
	pool, err := mr.NewPool(v, mr.PoolOptions{})
	ok(t, err)
	defer pool.Close()
	const size = 3 << 20
	first, err := pool.Allocate(1<<20, ss[0]) // the block is not at the chunk's start
	ok(t, err)
	p, err := pool.Allocate(size, ss[0])
	ok(t, err)
	want := exportPattern(size, 77)
	ok(t, dev.CopyHtoDAsync(p, want, ss[0]))
	ok(t, ss[0].Synchronize())
	x, err := v.Export(p, size, gpu.HandlePOSIX)
	ok(t, err)
	if x.Size != size || x.Start+x.Size > x.Span {
		t.Fatalf("export of a pool block: %+v", x)
	}
	q, done := importInto(t, imp, x)
	si := importerStream(t, imp)
	got := readImported(t, imp, q, size, si)
	if !bytes.Equal(got, want) {
		t.Fatal("the importer does not read the pool block's bytes")
	}
	done()
	ok(t, pool.Deallocate(p, size, ss[0]))
	ok(t, pool.Deallocate(first, 1<<20, ss[0]))
}

// openFiles counts this process's open descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestVirtualExportKeptDescriptor: the first POSIX export of a physical
// allocation asks the driver and keeps a descriptor; a second export of
// it makes no driver call (every call fails meanwhile, and it succeeds)
// and gives a descriptor of the same memory, which another process reads.
// The kept descriptors, one per allocation (a plain one, two pieces of a
// growable one), are closed when the allocations are released, and the
// device's memory all goes back.
func TestVirtualExportKeptDescriptor(t *testing.T) {
	dev, v, ss := newSimVirtualOpts(t, 1<<30, mr.VirtualOptions{HandleTypes: gpu.HandlePOSIX, PiecesPerCommit: 1})
	imp := otherProcess(t)
	si := importerStream(t, imp)
	fds := openFiles(t)
	g := int(v.Stats().Granularity)
	p, err := v.Allocate(g, ss[0])
	ok(t, err)
	gp, err := v.AllocateGrowable(g, 4*g, ss[0])
	ok(t, err)
	ok(t, v.Commit(gp, g, 2*g, ss[0])) // a second piece
	want := exportPattern(3*g, 9)
	ok(t, dev.CopyHtoDAsync(p, want[:g], ss[0]))
	ok(t, dev.CopyHtoDAsync(gp, want, ss[0]))
	ok(t, ss[0].Synchronize())
	for _, r := range []struct {
		what   string
		p      gpu.DevicePtr
		n      int
		pieces int
	}{
		{"a plain allocation", p, g, 1},
		{"a growable allocation", gp, 3 * g, 2},
	} {
		x1, err := v.Export(r.p, r.n, gpu.HandlePOSIX)
		ok(t, err)
		ok(t, x1.Close())
		dev.SetInjector(sim.FailCall(1, errors.New("injected")))
		x2, err := v.Export(r.p, r.n, gpu.HandlePOSIX)
		dev.SetInjector(nil)
		if err != nil {
			t.Fatalf("a second export of %s: %v, want no driver call", r.what, err)
		}
		if len(x2.Pieces) != r.pieces {
			t.Fatalf("a second export of %s: %d pieces, want %d", r.what, len(x2.Pieces), r.pieces)
		}
		q, done := importInto(t, imp, x2)
		if got := readImported(t, imp, q, r.n, si); !bytes.Equal(got, want[:r.n]) {
			t.Errorf("the importer does not read the exporter's bytes of %s through a kept descriptor", r.what)
		}
		done()
	}
	if n := openFiles(t); n != fds+3 {
		t.Errorf("%d descriptors open with three allocations exported, want %d (one kept each)", n, fds+3)
	}
	ok(t, v.Deallocate(p, g, ss[0]))
	ok(t, v.Deallocate(gp, 4*g, ss[0]))
	ok(t, v.ReleaseContext(context.Background()))
	if n := openFiles(t); n != fds {
		t.Errorf("%d descriptors open after the frees, %d before the exports", n, fds)
	}
	if n := inUse(t, dev); n != 0 {
		t.Errorf("%d bytes of the device in use after the frees", n)
	}
}
