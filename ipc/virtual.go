// Memory of another process's mr.Virtual, mapped here: the importer's
// side of mr.Virtual.Export (virtual-memory ranges, growable ones
// included, rather than a driver pool's allocations).
//
// ImportVirtual reserves the export's span of address space, imports each
// piece (gpu.PhysicalSharing.ImportPhysical), maps it at its offset, makes
// it accessible and releases its handle, so that each piece's memory goes
// with its mapping; Close unmaps every piece and frees the range. SendVirtual
// and RecvVirtual carry an export over a Unix socket (virtual_wire.go).
//
// Stream order is the caller's, as mr/virtual_export.go states: the
// importer's streams wait on an interprocess event the exporter recorded
// after its writes before they touch the memory, and the importer records
// one after its last use, which the exporter's freeing stream waits on
// before it frees or decommits the range. Close is not stream-ordered
// (cuMemUnmap is not): it comes after the importer's work with the memory
// has completed, or that work faults. Used alone, the two events and the
// messages are the caller's; an Exporter made by NewVirtualExporter lends
// Virtual memory through a Link instead, and its Importer keeps both
// rules and reaps the unmap by event (importer.go).
//
// Invariants: a VirtualImport maps every piece of its export, each whole
// at base+Offset, until Close; after Close (or a failed ImportVirtual)
// nothing of it is mapped or reserved.

package ipc

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// maxVirtualPieces bounds the pieces of an export a process accepts.
const maxVirtualPieces = 1 << 16

// VirtualImport is another process's Virtual memory mapped here.
type VirtualImport struct {
	x      gpu.PhysicalSharing
	base   gpu.DevicePtr
	span   uint64
	start  uint64
	size   uint64
	pieces []mr.VirtualPiece // offsets and sizes; handles not kept

	mu     sync.Mutex
	closed bool
}

// checkExport reports a malformed export: pieces out of order,
// overlapping or outside the span, a range outside it, too many pieces.
func checkExport(x mr.VirtualExport) error {
	if len(x.Pieces) == 0 || len(x.Pieces) > maxVirtualPieces {
		return fmt.Errorf("%d pieces: %w", len(x.Pieces), ErrProtocol)
	}
	if x.Size == 0 || x.Start > x.Span || x.Size > x.Span-x.Start {
		return fmt.Errorf("range [%d, +%d) of a span of %d: %w", x.Start, x.Size, x.Span, ErrProtocol)
	}
	var end uint64
	for i, pc := range x.Pieces {
		if pc.Size == 0 || pc.Offset < end || pc.Offset > x.Span || pc.Size > x.Span-pc.Offset {
			return fmt.Errorf("piece %d at [%d, +%d) of a span of %d: %w", i, pc.Offset, pc.Size, x.Span, ErrProtocol)
		}
		end = pc.Offset + pc.Size
	}
	return nil
}

// ImportVirtual maps x, exported by mr.Virtual.Export (in another
// process, or this one), in dev's address space. The descriptors of x
// stay open, the caller's to close (x.Close). A malformed x is
// ErrProtocol; a device that cannot import is gpu.ErrNotSupported. On
// error nothing is left mapped or reserved.
func ImportVirtual(dev gpu.Device, x mr.VirtualExport) (*VirtualImport, error) {
	if err := checkExport(x); err != nil {
		return nil, fmt.Errorf("ipc: import virtual: %w", err)
	}
	ps, err := gpu.PhysicalSharingOf(dev)
	if err != nil {
		return nil, fmt.Errorf("ipc: import virtual: %w", err)
	}
	base, err := ps.ReserveAddress(x.Span, 0)
	if err != nil {
		return nil, fmt.Errorf("ipc: import virtual: reserve %d bytes: %w", x.Span, err)
	}
	m := &VirtualImport{x: ps, base: base, span: x.Span, start: x.Start, size: x.Size}
	for i, pc := range x.Pieces {
		if err := m.mapPiece(pc); err != nil {
			return nil, errors.Join(fmt.Errorf("ipc: import virtual: piece %d: %w", i, err), m.teardown())
		}
		m.pieces = append(m.pieces, mr.VirtualPiece{Offset: pc.Offset, Size: pc.Size})
	}
	return m, nil
}

// mapPiece imports pc and maps it, accessible, at its offset; on error
// nothing of it is left.
func (m *VirtualImport) mapPiece(pc mr.VirtualPiece) error {
	h, err := m.x.ImportPhysical(pc.Handle)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	p := m.base + gpu.DevicePtr(pc.Offset)
	if err := m.x.Map(p, pc.Size, h, 0); err != nil {
		return errors.Join(fmt.Errorf("map: %w", err), m.x.ReleasePhysical(h))
	}
	// Released now, the memory goes with the mapping.
	if err := m.x.ReleasePhysical(h); err != nil {
		return errors.Join(fmt.Errorf("release the handle: %w", err), m.x.Unmap(p, pc.Size))
	}
	if err := m.x.SetAccess(p, pc.Size); err != nil {
		return errors.Join(fmt.Errorf("set access: %w", err), m.x.Unmap(p, pc.Size))
	}
	return nil
}

// teardown unmaps the pieces mapped so far and frees the range.
func (m *VirtualImport) teardown() error {
	var errs []error
	kept := m.pieces[:0]
	for _, pc := range m.pieces {
		if err := m.x.Unmap(m.base+gpu.DevicePtr(pc.Offset), pc.Size); err != nil {
			errs = append(errs, fmt.Errorf("unmap [%#x, +%d): %w", uint64(m.base)+pc.Offset, pc.Size, err))
			kept = append(kept, pc)
		}
	}
	m.pieces = kept
	if len(errs) > 0 {
		// A range with something mapped in it cannot be freed; a later
		// Close tries what is left again.
		return errors.Join(errs...)
	}
	if err := m.x.FreeAddress(m.base, m.span); err != nil {
		return fmt.Errorf("free the range: %w", err)
	}
	return nil
}

// Ptr is the exported range's first byte here.
func (m *VirtualImport) Ptr() gpu.DevicePtr { return m.base + gpu.DevicePtr(m.start) }

// Size is the exported range's length in bytes.
func (m *VirtualImport) Size() int { return int(m.size) }

// Close unmaps the memory and frees the address range. It is not
// stream-ordered: the work that used the memory must have completed. A
// second Close is ErrReleased.
func (m *VirtualImport) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("ipc: close virtual import: %w", ErrReleased)
	}
	if err := m.teardown(); err != nil {
		return fmt.Errorf("ipc: close virtual import: %w", err)
	}
	m.closed = true
	return nil
}
