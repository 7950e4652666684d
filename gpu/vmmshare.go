// Physical allocations shared between processes: a VirtualMemory device
// whose physical allocations another process can import and map.
//
// The driver's model (cuMemCreate with requestedHandleTypes,
// cuMemExportToShareableHandle, cuMemImportFromShareableHandle):
//
//   - An allocation is exportable only as the handle types it was created
//     with (CreateExportablePhysical), and only types the device offers
//     (PhysicalHandleTypes: on the card the device attributes
//     HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 103, and
//     HANDLE_TYPE_FABRIC_SUPPORTED, 128). A device may offer a type and
//     still refuse it: the H100 offers fabric handles and, on a machine
//     without an IMEX channel, refuses CreateExportablePhysical of a
//     fabric allocation and a fabric pool export (ErrNotPermitted) and
//     a fabric import (ErrNotSupported); package ipc's doc and
//     docs/bench/h100-2026-11-25-fabric have the card's answers.
//   - ExportPhysical exports it as one of those types: a POSIX file
//     descriptor (Shareable.File, new at each call and the caller's to
//     close once sent, over a Unix socket with SCM_RIGHTS) or a 64-byte
//     fabric handle (plain data). The allocation must be live (not
//     released) in the exporting process.
//   - ImportPhysical in the other process returns a Physical of its own
//     for the same memory (the descriptor it is given stays open, the
//     caller's to close): mapped with Map, made accessible with
//     SetAccess, unmapped with Unmap and released with ReleasePhysical
//     like any other, and its memory counts against no capacity of the
//     importer's. An imported allocation is not exported again.
//   - The memory stays allocated until every process has released its
//     handle and unmapped it; which process created it does not matter.
//   - As with pools (gpu/ipc.go), the driver orders nothing between the
//     processes: the importer must not touch the memory before the
//     exporter's writes to it are complete, and the exporter must not
//     reuse it (map other data there, hand it to another user) before
//     the importer's uses are complete. Interprocess events (IPC) carry
//     those orderings.
//
// Bad input is refused before the driver, with the same errors on both
// backends: a handle type other than HandlePOSIX and HandleFabric, or
// one the allocation was not created with (or a handle that is not a
// live exportable allocation of this process), is ErrInvalidValue from
// ExportPhysical; CreateExportablePhysical of HandleNone or of a type the
// device does not offer is ErrNotSupported; ImportPhysical of a
// Shareable without its handle (no File, or a closed one) is
// ErrInvalidValue. The driver's own answer to a descriptor of a file that
// is no export is CUDA_ERROR_UNKNOWN (ErrUnknown; driver 580, H100), and
// the simulator's too.
//
// Measured on an H100 (driver 580): attribute 103 (POSIX) and 128
// (fabric) both say 1; an import in the exporting process itself gives a
// handle of its own, and its mapping shows the exporter's bytes.
//
// PhysicalSharing is optional, apart from VirtualMemory so that a device
// can map memory without sharing it: both backends implement it;
// PhysicalSharingOf says ErrNotSupported for a device that does not.
package gpu

import "fmt"

// PhysicalSharing is implemented by a VirtualMemory device whose physical
// allocations other processes can import. All methods are safe for
// concurrent use.
type PhysicalSharing interface {
	VirtualMemory
	// PhysicalHandleTypes is the set of handle types a physical
	// allocation of the device can be created exportable as.
	PhysicalHandleTypes() (HandleType, error)
	// CreateExportablePhysical is CreatePhysical of an allocation that
	// can be exported as the handle types t (a set of types the device
	// offers, else ErrNotSupported).
	CreateExportablePhysical(size uint64, t HandleType) (Physical, error)
	// ExportPhysical is cuMemExportToShareableHandle of h as t, a single
	// type h was created exportable as, else ErrInvalidValue.
	ExportPhysical(h Physical, t HandleType) (Shareable, error)
	// ImportPhysical is cuMemImportFromShareableHandle: a handle of this
	// process for the allocation sh was exported from. sh.File stays
	// open. Release the handle with ReleasePhysical.
	ImportPhysical(sh Shareable) (Physical, error)
}

// PhysicalSharingOf returns dev's physical-sharing interface, or an error
// matching ErrNotSupported if it has none.
func PhysicalSharingOf(dev Device) (PhysicalSharing, error) {
	if x, ok := dev.(PhysicalSharing); ok {
		return x, nil
	}
	return nil, fmt.Errorf("gpu: device %T cannot share physical allocations: %w", dev, ErrNotSupported)
}
