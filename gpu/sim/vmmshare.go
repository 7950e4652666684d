// Physical allocations shared between simulated "processes"
// (gpu.PhysicalSharing): two Backends of one test binary stand for two
// processes on one GPU, as for pools (ipc.go).
//
// An exported allocation has an entry in exports (the real process's
// registry, shared by every Backend), made at its first export. A POSIX
// export is a new descriptor of a temporary file the allocation keeps
// while it lives, so it can cross a Unix socket with SCM_RIGHTS; an import
// finds the allocation by the file's identity (os.SameFile), so a
// descriptor of anything else is refused. A fabric export is 64 bytes: a
// tag and the entry's number.
//
// An import is a physical allocation of the importer's device that shares
// the exporter's page slots: mapped there, it shows the exporter's bytes,
// committed on first touch by whichever side touches first, and under
// -race an access of one "process" that no event orders after the other's
// is a data race, as within one process. It counts against no capacity of
// the importer's and is freed, like any other, when released and unmapped.
//
// A descriptor of no export (another file, or an export's after its
// allocation was freed) is gpu.ErrUnknown, as driver 580 answers one of
// /dev/null. Known differences from the card: the entry goes when the
// exporter's allocation is freed (released and unmapped there), so its
// descriptor no longer imports from then on, where the driver may still
// honour it; and the exporter's capacity is given back then, while
// on the card the memory stays allocated until the importers let go too
// (the simulator's importers keep the bytes alive, not the capacity).

package sim

import (
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.PhysicalSharing = (*Device)(nil)

// tagPhys tags a fabric handle of a physical allocation.
const tagPhys = "SAPHYS01"

// physExport is an exported physical allocation in exports.
type physExport struct {
	dev *Device
	a   *physAlloc
}

// PhysicalHandleTypes returns Config.IPCHandleTypes, as for pools.
func (d *Device) PhysicalHandleTypes() (gpu.HandleType, error) {
	if err := d.injectNamed(OpIPC, "cuDeviceGetAttribute"); err != nil {
		return 0, err
	}
	return d.b.cfg.IPCHandleTypes, nil
}

// CreateExportablePhysical makes a physical allocation exportable as t.
func (d *Device) CreateExportablePhysical(size uint64, t gpu.HandleType) (gpu.Physical, error) {
	if t == gpu.HandleNone || t&^d.b.cfg.IPCHandleTypes != 0 {
		return 0, wrap("cuMemCreate", fmt.Errorf("handle types %#x, %v offers %#x: %w", int32(t), d, int32(d.b.cfg.IPCHandleTypes), gpu.ErrNotSupported))
	}
	if size != 0 && vmAligned(size) {
		if err := d.fabricRefused("cuMemCreate", t); err != nil {
			return 0, err
		}
	}
	return d.createPhysical(size, t)
}

// ExportPhysical exports a live allocation made exportable as t.
func (d *Device) ExportPhysical(h gpu.Physical, t gpu.HandleType) (gpu.Shareable, error) {
	const call = "cuMemExportToShareableHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return gpu.Shareable{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.vmLocked().phys[h]
	var made gpu.HandleType
	if a != nil && !a.released && !a.imported {
		made = a.handles
	}
	if (t != gpu.HandlePOSIX && t != gpu.HandleFabric) || made&t == 0 {
		return gpu.Shareable{}, driverErrf(call, gpu.ErrInvalidValue, "handle type %#x of allocation %d, exportable as %#x", int32(t), uint64(h), int32(made))
	}
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if a.exportID == 0 {
		if a.handles&gpu.HandlePOSIX != 0 {
			f, err := os.CreateTemp("", "streamalloc-sim-physical-*")
			if err != nil {
				return gpu.Shareable{}, wrap(call, fmt.Errorf("the allocation's file: %v: %w", err, gpu.ErrOutOfMemory))
			}
			f.Close()
			a.file = f.Name()
		}
		a.exportID = exportLocked()
		if exports.phys == nil {
			exports.phys = make(map[uint64]physExport)
		}
		exports.phys[a.exportID] = physExport{d, a}
	}
	if t == gpu.HandleFabric {
		return gpu.Shareable{Type: t, Fabric: handle64(tagPhys, a.exportID)}, nil
	}
	f, err := os.Open(a.file)
	if err != nil {
		return gpu.Shareable{}, wrap(call, fmt.Errorf("%v: %w", err, gpu.ErrOutOfMemory))
	}
	return gpu.Shareable{Type: t, File: f}, nil
}

// unexport drops a freed allocation from the exports; its device's mu is
// held.
func (a *physAlloc) unexport() {
	if a.exportID == 0 {
		return
	}
	exports.mu.Lock()
	defer exports.mu.Unlock()
	delete(exports.phys, a.exportID)
	if a.file != "" {
		os.Remove(a.file)
	}
}

// ImportPhysical makes an allocation of d that shares the pages of the
// exported one sh names; sh.File stays open.
func (d *Device) ImportPhysical(sh gpu.Shareable) (gpu.Physical, error) {
	const call = "cuMemImportFromShareableHandle"
	var from physExport
	switch {
	case sh.Type == gpu.HandlePOSIX && sh.File != nil:
		fi, err := sh.File.Stat()
		if err != nil {
			return 0, driverErrf(call, gpu.ErrInvalidValue, "descriptor: %v", err)
		}
		if err := d.injectNamed(OpIPC, call); err != nil {
			return 0, err
		}
		exports.mu.Lock()
		for _, x := range exports.phys {
			if x.a.file == "" || x.a.handles&gpu.HandlePOSIX == 0 {
				continue
			}
			if xfi, err := os.Stat(x.a.file); err == nil && os.SameFile(fi, xfi) {
				from = x
			}
		}
		exports.mu.Unlock()
	case sh.Type == gpu.HandleFabric:
		if err := d.fabricImportRefused(call); err != nil {
			return 0, err
		}
		if err := d.injectNamed(OpIPC, call); err != nil {
			return 0, err
		}
		if w, ok := parse64(sh.Fabric, tagPhys, 1); ok {
			exports.mu.Lock()
			from = exports.phys[w[0]]
			exports.mu.Unlock()
			if from.a != nil && from.a.handles&gpu.HandleFabric == 0 {
				from = physExport{}
			}
		}
	default:
		return 0, driverErrf(call, gpu.ErrInvalidValue, "handle type %#x without its handle", int32(sh.Type))
	}
	if from.a == nil {
		if sh.Type == gpu.HandlePOSIX {
			// Driver 580 answers CUDA_ERROR_UNKNOWN to a descriptor of a
			// file that is no export (/dev/null on the H100).
			return 0, driverErrf(call, gpu.ErrUnknown, "a descriptor of no exported physical allocation")
		}
		return 0, driverErrf(call, gpu.ErrInvalidValue, "not the handle of an exported physical allocation")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	vm := d.vmLocked()
	vm.next++
	// The page slots are the exporter's: fixed at its creation, never
	// replaced, so sharing the slice needs no lock of the exporter's.
	a := &physAlloc{h: vm.next, size: from.a.size, pages: from.a.pages, imported: true}
	vm.phys[a.h] = a
	return a.h, nil
}
