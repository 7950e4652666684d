//go:build unix

package ipc_test

import (
	"context"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// simDevice is a simulated process's device offering types; noIMEX: one
// without an IMEX channel.
func simDevice(types gpu.HandleType, noIMEX bool) gpu.Device {
	d, _ := sim.New(sim.Config{Capacity: 1 << 30, IPCHandleTypes: types, NoIMEXChannel: noIMEX}).Device(0)
	return d
}

// TestFabricNotOffered: fabric asked of a device that does not offer it,
// or of memory not made with it, and handle types that are no single
// known type, each refused with its error and nothing made.
func TestFabricNotOffered(t *testing.T) {
	posix := simDevice(gpu.HandlePOSIX, false)
	both := simDevice(gpu.HandlePOSIX|gpu.HandleFabric, false)
	for _, c := range []struct {
		what string
		dev  gpu.Device
		ht   gpu.HandleType
		want error
	}{
		{"a fabric pool on a device offering POSIX descriptors alone", posix, gpu.HandleFabric, gpu.ErrNotSupported},
		{"a pool of two handle types", both, gpu.HandlePOSIX | gpu.HandleFabric, gpu.ErrInvalidValue},
		{"a pool of an unknown handle type", both, 0x40, gpu.ErrInvalidValue},
	} {
		if e, err := ipc.NewExporter(c.dev, ipc.ExporterOptions{Handle: c.ht}); !errors.Is(err, c.want) {
			t.Errorf("NewExporter of %s: %v, want %v", c.what, err, c.want)
			if e != nil {
				e.Close()
			}
		}
	}
	if _, err := mr.NewVirtual(posix, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandleFabric}); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("a Virtual exportable as fabric on a device offering POSIX descriptors alone: %v, want ErrNotSupported", err)
	}
	v := newSharedVirtual(t, both, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandlePOSIX})
	if _, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{Handle: gpu.HandleFabric}); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("a fabric exporter over a Virtual made exportable as POSIX descriptors: %v, want ErrInvalidValue", err)
	}
	s, _ := both.NewStream()
	defer s.Destroy()
	p, err := v.Allocate(4096, s)
	must(t, err)
	if _, err := v.Export(p, 4096, gpu.HandleFabric); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("a fabric export of memory made exportable as POSIX descriptors: %v, want ErrInvalidValue", err)
	}
	must(t, v.Deallocate(p, 4096, s))
}

// TestFabricImportFreed: the fabric export of a Virtual range whose
// memory was freed since (and the physical allocations released) imports
// no more: ImportVirtual says the driver's ErrInvalidValue and leaves
// nothing mapped or reserved, so the same importer then maps a live
// export.
func TestFabricImportFreed(t *testing.T) {
	exp, imp := processes(t)
	v := newSharedVirtual(t, exp, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandleFabric})
	s, _ := exp.NewStream()
	defer s.Destroy()
	g := v.GrowGranularity()
	p, err := v.Allocate(2*g, s)
	must(t, err)
	x, err := v.Export(p, 2*g, gpu.HandleFabric)
	must(t, err)
	must(t, v.Deallocate(p, 2*g, s))
	must(t, v.ReleaseContext(context.Background()))
	if st := v.Stats(); st.Mapped != 0 {
		t.Fatalf("the Virtual maps %d bytes after the free", st.Mapped)
	}
	free0, _, _ := imp.MemGetInfo()
	if _, err := ipc.ImportVirtual(imp, x); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("ImportVirtual of a freed range's fabric export: %v, want ErrInvalidValue", err)
	}
	q, err := v.Allocate(2*g, s)
	must(t, err)
	y, err := v.Export(q, 2*g, gpu.HandleFabric)
	must(t, err)
	m, err := ipc.ImportVirtual(imp, y)
	must(t, err)
	must(t, m.Close())
	must(t, v.Deallocate(q, 2*g, s))
	if free, _, _ := imp.MemGetInfo(); free != free0 {
		t.Errorf("the importer's free memory %d after the imports, %d before", free, free0)
	}
}

// TestFabricWithoutIMEX: a device that offers fabric handles to a process
// without an IMEX channel, answering as the H100 this project is tested
// on does (sim.Config.NoIMEXChannel). NewExporter of a fabric pool is
// refused with gpu.ErrNotPermitted, making no pool, because the backend
// refuses the pool to every caller, mr.NewAsync too (on the card,
// destroying a fabric pool whose export was refused ends the process);
// an mr.Virtual made with fabric handle types (alone or with POSIX) is
// made but refuses every allocation with gpu.ErrNotPermitted, mapping
// nothing; an importer
// without the channel refuses a fabric pool's hello, or a fabric Virtual
// loan, which goes back to the exporter at once, with the driver's
// gpu.ErrNotSupported. POSIX descriptors work beside each.
func TestFabricWithoutIMEX(t *testing.T) {
	const both = gpu.HandlePOSIX | gpu.HandleFabric
	t.Run("PoolExporter", func(t *testing.T) {
		exp, imp := simDevice(both, true), simDevice(both, false)
		free0, _, _ := exp.MemGetInfo()
		e, err := ipc.NewExporter(exp, ipc.ExporterOptions{Handle: gpu.HandleFabric})
		if !errors.Is(err, gpu.ErrNotPermitted) {
			t.Errorf("NewExporter of a fabric pool without an IMEX channel: %v, want ErrNotPermitted", err)
		}
		if e != nil {
			t.Fatal("NewExporter returned an Exporter with its error")
		}
		if free, _, _ := exp.MemGetInfo(); free != free0 {
			t.Errorf("free memory %d after the refusal, %d before", free, free0)
		}
		// The refusal is the backend's: the pool is refused to every
		// caller, not only to NewExporter.
		if a, err := mr.NewAsync(exp, mr.AsyncOptions{Exportable: gpu.HandleFabric}); !errors.Is(err, gpu.ErrNotPermitted) || a != nil {
			t.Errorf("mr.NewAsync of a fabric pool without an IMEX channel: %v, want ErrNotPermitted and no resource", err)
		}
		if free, _, _ := exp.MemGetInfo(); free != free0 {
			t.Errorf("free memory %d after the refusals, %d before", free, free0)
		}
		lendOnce(t, exp, imp, gpu.HandlePOSIX)
	})
	t.Run("PoolImporter", func(t *testing.T) {
		exp, imp := simDevice(both, false), simDevice(both, true)
		e, err := ipc.NewExporter(exp, ipc.ExporterOptions{Handle: gpu.HandleFabric})
		must(t, err)
		_, _, serr, aerr := handshake(t, e, imp)
		if !errors.Is(aerr, gpu.ErrNotSupported) {
			t.Errorf("Accept of a fabric pool without an IMEX channel: %v, want ErrNotSupported", aerr)
		}
		if !errors.Is(serr, ipc.ErrPeerLost) {
			t.Errorf("Serve when the importer's Accept failed: %v, want ErrPeerLost", serr)
		}
		must(t, e.Close())
		lendOnce(t, exp, imp, gpu.HandlePOSIX)
	})
	t.Run("VirtualExporter", func(t *testing.T) {
		exp := simDevice(both, true)
		s, _ := exp.NewStream()
		defer s.Destroy()
		for _, ht := range []gpu.HandleType{gpu.HandleFabric, both} {
			v := newSharedVirtual(t, exp, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: ht})
			e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{Handle: gpu.HandleFabric})
			must(t, err)
			if _, err := e.Allocate(4096, s); !errors.Is(err, gpu.ErrNotPermitted) {
				t.Errorf("an allocation of a Virtual exportable as %#x without an IMEX channel: %v, want ErrNotPermitted", int32(ht), err)
			}
			if st := v.Stats(); st.Mapped != 0 || st.Live != 0 {
				t.Errorf("after the refusal the Virtual maps %d bytes, %d live", st.Mapped, st.Live)
			}
			must(t, e.Close())
		}
		v := newSharedVirtual(t, exp, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandlePOSIX})
		p, err := v.Allocate(4096, s)
		must(t, err)
		must(t, v.Deallocate(p, 4096, s))
	})
	t.Run("VirtualImporter", func(t *testing.T) {
		exp, imp := simDevice(both, false), simDevice(both, true)
		v := newSharedVirtual(t, exp, mr.VirtualOptions{HandleTypes: gpu.HandleFabric})
		e, l, im := virtualPair(t, v, nil, imp)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		p, err := e.Allocate(4096, se)
		must(t, err)
		ln, err := l.Lend(context.Background(), p, 4096, se)
		must(t, err)
		if _, err := im.Receive(context.Background(), si); !errors.Is(err, gpu.ErrNotSupported) {
			t.Errorf("Receive of a fabric loan without an IMEX channel: %v, want ErrNotSupported", err)
		}
		must(t, ln.Wait(context.Background())) // given back at once
		if n := im.Outstanding() + im.Unmapping(); n != 0 {
			t.Errorf("%d imports held or mapped after the refusal", n)
		}
		must(t, e.Deallocate(p, 4096, se))
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
	})
}

// lendOnce lends one allocation of a new exporter on exp, its pool
// exported as ht, to an importer on imp and back, and closes both.
func lendOnce(t *testing.T, exp, imp gpu.Device, ht gpu.HandleType) {
	t.Helper()
	e, l, im := pair(t, exp, imp, ht)
	se, _ := exp.NewStream()
	si, _ := imp.NewStream()
	p, err := e.Allocate(4096, se)
	must(t, err)
	ln, err := l.Lend(context.Background(), p, 4096, se)
	must(t, err)
	x, err := im.Receive(context.Background(), si)
	must(t, err)
	must(t, x.Release(si))
	must(t, ln.Wait(context.Background()))
	must(t, e.Deallocate(p, 4096, se))
	closeEmpty(t, e, l, im, se)
}
