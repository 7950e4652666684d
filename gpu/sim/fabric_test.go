package sim_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestNoIMEXChannel: a device offering fabric handles to a process
// without an IMEX channel answers as the H100 (and the CUDA backend over
// it) does: it says it offers them, but refuses a physical allocation
// that requests fabric handles and a pool exportable as fabric (alone or
// with POSIX descriptors) with gpu.ErrNotPermitted, and a fabric import
// with gpu.ErrNotSupported; each refusal takes no memory and makes
// nothing; POSIX sharing works beside it. The same devices with an IMEX
// channel do all of it.
func TestNoIMEXChannel(t *testing.T) {
	for _, imex := range []bool{false, true} {
		name := "without"
		if imex {
			name = "with"
		}
		t.Run(name, func(t *testing.T) {
			cfg := sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric, NoIMEXChannel: !imex}
			a, _ := sim.New(cfg).Device(0)
			b, _ := sim.New(cfg).Device(0)
			exp, imp := a.(*sim.Device), b.(*sim.Device)
			var want error = gpu.ErrNotPermitted
			if imex {
				want = nil
			}
			check := func(what string, err error) {
				t.Helper()
				if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
					t.Errorf("%s: %v, want %v", what, err, want)
				}
			}
			for _, types := range []func() (gpu.HandleType, error){exp.PhysicalHandleTypes, exp.ExportHandleTypes} {
				if got, err := types(); err != nil || got != gpu.HandlePOSIX|gpu.HandleFabric {
					t.Errorf("handle types offered: %#x, %v; want 0x9", int32(got), err)
				}
			}
			g, _ := exp.Granularity(false)
			free0, _, _ := exp.MemGetInfo()
			for _, ht := range []gpu.HandleType{gpu.HandleFabric, gpu.HandlePOSIX | gpu.HandleFabric} {
				h, err := exp.CreateExportablePhysical(g, ht)
				check("an allocation exportable as fabric", err)
				if err == nil {
					sh, err := exp.ExportPhysical(h, gpu.HandleFabric)
					must(t, err)
					ih, err := imp.ImportPhysical(sh)
					must(t, err)
					must(t, imp.ReleasePhysical(ih))
					must(t, exp.ReleasePhysical(h))
				}
			}
			if free, _, _ := exp.MemGetInfo(); free != free0 {
				t.Errorf("free memory %d after the fabric allocations were refused or released, %d before", free, free0)
			}
			// A fabric handle from elsewhere (another node) is refused
			// before it is read.
			junk := gpu.Shareable{Type: gpu.HandleFabric}
			junk.Fabric[0] = 0x5a
			if _, err := imp.ImportPhysical(junk); imex && !errors.Is(err, gpu.ErrInvalidValue) || !imex && !errors.Is(err, gpu.ErrNotSupported) {
				t.Errorf("import of a fabric handle of no export: %v", err)
			}
			if _, err := imp.ImportMemPool(junk); imex && !errors.Is(err, gpu.ErrInvalidValue) || !imex && !errors.Is(err, gpu.ErrNotSupported) {
				t.Errorf("import of a fabric pool handle of no export: %v", err)
			}

			for _, ht := range []gpu.HandleType{gpu.HandleFabric, gpu.HandlePOSIX | gpu.HandleFabric} {
				pool, err := exp.NewExportableMemPool(ht)
				check("a pool exportable as fabric", err)
				if err != nil {
					if pool != nil {
						t.Errorf("the refused pool of handle types %#x came back with its error", int32(ht))
					}
					continue
				}
				sh, err := exp.ExportMemPool(pool, gpu.HandleFabric)
				must(t, err)
				ip, err := imp.ImportMemPool(sh)
				must(t, err)
				must(t, ip.Destroy())
				must(t, pool.Destroy())
			}
			if free, _, _ := exp.MemGetInfo(); free != free0 {
				t.Errorf("free memory %d after the fabric pools were refused or destroyed, %d before", free, free0)
			}

			// POSIX sharing beside it.
			h, err := exp.CreateExportablePhysical(g, gpu.HandlePOSIX)
			must(t, err)
			psh, err := exp.ExportPhysical(h, gpu.HandlePOSIX)
			must(t, err)
			ih, err := imp.ImportPhysical(psh)
			must(t, psh.File.Close())
			must(t, err)
			must(t, imp.ReleasePhysical(ih))
			must(t, exp.ReleasePhysical(h))
		})
	}
}

// TestIPCFabricConformance runs the fabric pool case of the conformance
// suite on devices offering fabric handles: refused without an IMEX
// channel, working with one.
func TestIPCFabricConformance(t *testing.T) {
	for _, c := range []struct {
		name    string
		noIMEX  bool
		channel gputest.IMEX
	}{
		{"without", true, gputest.IMEXNone},
		{"with", false, gputest.IMEXChannel},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, _ := sim.New(sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric, NoIMEXChannel: c.noIMEX}).Device(0)
			gputest.RunIPCFabric(t, d, c.channel)
		})
	}
}
