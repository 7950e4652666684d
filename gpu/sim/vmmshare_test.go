package sim_test

import (
	"errors"
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestPhysicalSharingConformance runs the sharing suite, which the card
// also passes, between two simulated processes: offering POSIX
// descriptors alone (the suite's fabric case skips), fabric handles too,
// and fabric handles to a process without an IMEX channel (the H100's
// answer on a machine without one).
func TestPhysicalSharingConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  sim.Config
	}{
		{"POSIX", sim.Config{Capacity: 1 << 30}},
		{"Fabric", sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric}},
		{"FabricWithoutIMEX", sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric, NoIMEXChannel: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			exp, _ := sim.New(c.cfg).Device(0)
			imp, _ := sim.New(c.cfg).Device(0)
			gputest.RunPhysicalSharing(t, exp, imp)
		})
	}
}

// TestPhysicalSharingSim: what the simulator answers beyond the suite: a
// fabric round trip where the configuration offers fabric handles, a
// descriptor of a file that is no export, a handle of an allocation
// already freed, the importer's capacity untouched by an import, and a
// device that offers no handle types.
func TestPhysicalSharingSim(t *testing.T) {
	cfg := sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric}
	a, _ := sim.New(cfg).Device(0)
	b, _ := sim.New(cfg).Device(0)
	exp, imp := a.(*sim.Device), b.(*sim.Device)
	g, _ := exp.Granularity(false)

	t.Run("Fabric", func(t *testing.T) {
		h, err := exp.CreateExportablePhysical(g, gpu.HandlePOSIX|gpu.HandleFabric)
		must(t, err)
		defer exp.ReleasePhysical(h)
		p := reserveMapped(t, exp, h, g)
		s, err := exp.NewStream()
		must(t, err)
		defer s.Destroy()
		must(t, exp.MemsetD8Async(p, 0x5a, int(g), s))
		must(t, s.Synchronize())
		sh, err := exp.ExportPhysical(h, gpu.HandleFabric)
		must(t, err)
		if sh.Type != gpu.HandleFabric || sh.File != nil {
			t.Fatalf("fabric export: %+v", sh)
		}
		ih, err := imp.ImportPhysical(sh)
		must(t, err)
		q := reserveMapped(t, imp, ih, g)
		must(t, imp.ReleasePhysical(ih))
		si, err := imp.NewStream()
		must(t, err)
		defer si.Destroy()
		buf := make([]byte, 16)
		must(t, imp.CopyDtoHAsync(buf, q+gpu.DevicePtr(g-16), si))
		must(t, si.Synchronize())
		for i, c := range buf {
			if c != 0x5a {
				t.Fatalf("byte %d through the fabric import: %#x, want 0x5a", i, c)
			}
		}
		junk := sh
		junk.Fabric[0] ^= 1
		if _, err := imp.ImportPhysical(junk); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("import of a corrupted fabric handle: %v, want ErrInvalidValue", err)
		}
		must(t, imp.Unmap(q, g))
		must(t, exp.Unmap(p, g))
	})

	t.Run("ForeignDescriptor", func(t *testing.T) {
		f, err := os.CreateTemp(t.TempDir(), "not-an-export")
		must(t, err)
		defer f.Close()
		if _, err := imp.ImportPhysical(gpu.Shareable{Type: gpu.HandlePOSIX, File: f}); !errors.Is(err, gpu.ErrUnknown) {
			t.Errorf("import of a descriptor that is no export: %v, want ErrUnknown", err)
		}
	})

	t.Run("FreedExport", func(t *testing.T) {
		h, err := exp.CreateExportablePhysical(g, gpu.HandlePOSIX)
		must(t, err)
		sh, err := exp.ExportPhysical(h, gpu.HandlePOSIX)
		must(t, err)
		defer sh.File.Close()
		must(t, exp.ReleasePhysical(h))
		if _, err := imp.ImportPhysical(sh); !errors.Is(err, gpu.ErrUnknown) {
			t.Errorf("import of a freed allocation's descriptor: %v, want ErrUnknown", err)
		}
	})

	t.Run("Capacity", func(t *testing.T) {
		h, err := exp.CreateExportablePhysical(4*g, gpu.HandlePOSIX)
		must(t, err)
		sh, err := exp.ExportPhysical(h, gpu.HandlePOSIX)
		must(t, err)
		defer sh.File.Close()
		free0, _, err := imp.MemGetInfo()
		must(t, err)
		ih, err := imp.ImportPhysical(sh)
		must(t, err)
		free1, _, err := imp.MemGetInfo()
		must(t, err)
		if free1 != free0 {
			t.Errorf("importer's free memory %d after the import, %d before: an import takes none", free1, free0)
		}
		must(t, imp.ReleasePhysical(ih))
		must(t, exp.ReleasePhysical(h))
		if err := imp.ReleasePhysical(ih); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("second release of an import: %v, want ErrInvalidValue", err)
		}
	})

	t.Run("NoneOffered", func(t *testing.T) {
		n, _ := sim.New(sim.Config{Capacity: 1 << 30, IPCHandleTypes: -1}).Device(0)
		x := n.(*sim.Device)
		types, err := x.PhysicalHandleTypes()
		if err != nil || types != gpu.HandleNone {
			t.Fatalf("PhysicalHandleTypes: %#x, %v; want none", int32(types), err)
		}
		if _, err := x.CreateExportablePhysical(g, gpu.HandlePOSIX); !errors.Is(err, gpu.ErrNotSupported) {
			t.Errorf("CreateExportablePhysical on a device offering none: %v, want ErrNotSupported", err)
		}
	})
}

// reserveMapped reserves size bytes on d, maps h there and makes it
// accessible; the range is freed at cleanup (after the test unmapped it).
func reserveMapped(t *testing.T, d *sim.Device, h gpu.Physical, size uint64) gpu.DevicePtr {
	t.Helper()
	p, err := d.ReserveAddress(size, 0)
	must(t, err)
	t.Cleanup(func() { d.FreeAddress(p, size) })
	must(t, d.Map(p, size, h, 0))
	must(t, d.SetAccess(p, size))
	return p
}
