// Virtual's memory shared with another process: the physical allocations
// under a live range, exported as OS handles (gpu.PhysicalSharing).
//
// A Virtual made with VirtualOptions.HandleTypes creates every physical
// allocation exportable, and keeps the handle of each while it is mapped
// (a plain allocation's too, which it otherwise releases at once), so
// Export can hand out a range's memory at any time. The first POSIX
// export of an allocation keeps a descriptor of it, closed when the
// allocation is released; later exports duplicate that descriptor rather
// than ask the driver again (Virtual.exported). A range may lie over
// several physical allocations, pieces: a plain allocation is one, a
// growable allocation (Grower, virtual_grow.go) is as many as its commits
// made, and a Pool's block growing in place lies over whichever of its
// chunk's pieces hold it. Export returns each piece that holds a byte of
// the range, whole (the driver maps allocations only whole), with where
// it lies: the importer reserves the span they cover, maps each at its
// offset, and finds the range at Start. Package ipc holds the importer's
// side (ImportVirtual), carries the handles between processes, and lends
// ranges through its Link (NewVirtualExporter), keeping the stream order
// below by itself.
//
// Stream order, which the driver leaves to its users (gpu/vmmshare.go):
// the importer must not touch the memory before the exporter's writes to
// it are complete, and the exporter must not free or decommit the range
// before every use of it by the importer is complete. Export orders
// nothing by itself; an interprocess event (gpu.IPC) recorded after the
// writes, which the importer's stream waits on, gives the first; for the
// second the importer records one after its last use and the exporter's
// freeing stream waits on it before Deallocate or Decommit. Nothing
// else is needed: once the exporter frees, Virtual unmaps and releases
// its handle only after the free's event completes, and the driver keeps
// the memory while the importer maps it, so it is reused by nobody
// before the importer lets go. A piece of a growable allocation may also
// hold granules outside the range, decommitted ones included; they are
// exported with it, readable by the importer, and a later commit there
// gives them to whoever commits them: an importer uses only its range.

package mr

import (
	"errors"
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/gpu"
)

// VirtualExport is the memory of a range of a Virtual, exported for
// another process: the pieces (physical allocations) under it and where
// they lie.
type VirtualExport struct {
	// Span is the length from the first piece's start to the last one's
	// end: an importer reserves this much address space.
	Span uint64
	// Start is the offset in the span of the range's first byte, and Size
	// the range's length in bytes.
	Start, Size uint64
	// Pieces are the physical allocations, in order of address, without
	// overlaps; there may be gaps between them (not in the range).
	Pieces []VirtualPiece
}

// VirtualPiece is one physical allocation of a VirtualExport.
type VirtualPiece struct {
	// Offset is where the piece is mapped, from the span's start; Size its
	// length. Both are multiples of the granularity.
	Offset, Size uint64
	// Handle is the exported allocation. A POSIX one is a new descriptor
	// that the exporter closes (VirtualExport.Close) once it is sent.
	Handle gpu.Shareable
}

// Close closes the descriptors of x's pieces.
func (x VirtualExport) Close() error {
	var errs []error
	for _, pc := range x.Pieces {
		if pc.Handle.File != nil {
			errs = append(errs, pc.Handle.File.Close())
		}
	}
	return errors.Join(errs...)
}

// Export exports the memory of [p, p+size) as t: a live plain allocation
// from its start (size at most its own), or committed granules of a
// growable allocation, from any address in it. t must be one of
// VirtualOptions.HandleTypes (HandlePOSIX or HandleFabric alone), else
// gpu.ErrInvalidValue; a range that is not live is ErrUnknownPointer or
// gpu.ErrInvalidValue; size <= 0 is ErrInvalidSize. On error nothing is
// left open. See the file comment for the stream order the two processes
// keep.
func (v *Virtual) Export(p gpu.DevicePtr, size int, t gpu.HandleType) (VirtualExport, error) {
	if size <= 0 {
		return VirtualExport{}, fmt.Errorf("%s: export %#x: size %d: %w", virtualName, uint64(p), size, ErrInvalidSize)
	}
	if v.share == nil || (t != gpu.HandlePOSIX && t != gpu.HandleFabric) || v.handleTypes&t == 0 {
		return VirtualExport{}, fmt.Errorf("%s: export %#x as handle type %#x: the resource's memory is exportable as %#x: %w",
			virtualName, uint64(p), int32(t), int32(v.handleTypes), gpu.ErrInvalidValue)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return VirtualExport{}, fmt.Errorf("%s: export: %w", virtualName, ErrClosed)
	}
	x, hs, err := v.piecesLocked(p, uint64(size))
	if err != nil {
		return VirtualExport{}, fmt.Errorf("%s: export [%#x, +%d): %w", virtualName, uint64(p), size, err)
	}
	for i, h := range hs {
		sh, err := v.exportLocked(h, t)
		if err != nil {
			return VirtualExport{}, errors.Join(fmt.Errorf("%s: export [%#x, +%d): piece %d: %w", virtualName, uint64(p), size, i, err), x.Close())
		}
		x.Pieces[i].Handle = sh
	}
	return x, nil
}

// exportLocked exports h as t. A POSIX descriptor is made by the driver
// once per physical allocation and kept (exported): each export is a
// duplicate of it, which costs a system call where the driver's export
// costs about 550 µs (H100, driver 580); the kept descriptor is closed
// when the allocation is released (forgetExportLocked).
func (v *Virtual) exportLocked(h gpu.Physical, t gpu.HandleType) (gpu.Shareable, error) {
	if t != gpu.HandlePOSIX {
		return v.share.ExportPhysical(h, t)
	}
	if f := v.exported[h]; f != nil {
		d, err := dupFile(f)
		if err == nil {
			return gpu.Shareable{Type: t, File: d}, nil
		}
	}
	sh, err := v.share.ExportPhysical(h, t)
	if err != nil || sh.File == nil {
		return sh, err
	}
	if d, err := dupFile(sh.File); err == nil {
		if old := v.exported[h]; old != nil {
			old.Close()
		}
		if v.exported == nil {
			v.exported = make(map[gpu.Physical]*os.File)
		}
		v.exported[h] = d
	}
	return sh, nil
}

// forgetExportLocked closes the descriptor kept for h, which is being
// released: an open descriptor of an export would keep its memory.
func (v *Virtual) forgetExportLocked(h gpu.Physical) {
	if f := v.exported[h]; f != nil {
		f.Close()
		delete(v.exported, h)
	}
}

// piecesLocked finds the pieces under [p, p+size) and their handles.
func (v *Virtual) piecesLocked(p gpu.DevicePtr, size uint64) (VirtualExport, []gpu.Physical, error) {
	if p >= v.base && uint64(p-v.base) < v.size {
		r, ok := v.live.lookup(p)
		if !ok {
			return VirtualExport{}, nil, pointerError(p, ErrUnknownPointer)
		}
		n := (uint64(r.size) + v.g - 1) / v.g * v.g
		h, ok := v.handles[uint64(p-v.base)]
		if size > uint64(r.size) || !ok {
			return VirtualExport{}, nil, fmt.Errorf("beyond the allocation's %d bytes: %w", r.size, gpu.ErrInvalidValue)
		}
		return VirtualExport{Span: n, Size: size, Pieces: []VirtualPiece{{Size: n}}}, []gpu.Physical{h}, nil
	}
	var gr *vgrow
	for _, g := range v.grows {
		if !g.freed && p >= g.p && uint64(p-g.p) < g.limit {
			gr = g
			break
		}
	}
	if gr == nil {
		return VirtualExport{}, nil, pointerError(p, ErrUnknownPointer)
	}
	off := uint64(p - gr.p)
	if size > gr.limit-off {
		return VirtualExport{}, nil, fmt.Errorf("beyond the growable allocation's %d bytes: %w", gr.limit, gpu.ErrInvalidValue)
	}
	first, end := int(off/v.g), int((off+size+v.g-1)/v.g)
	var x VirtualExport
	var hs []gpu.Physical
	var last *vpiece
	for i := first; i < end; i++ {
		if i >= len(gr.gran) || gr.gran[i].pc == nil || gr.gran[i].ev != nil {
			return VirtualExport{}, nil, fmt.Errorf("granule %d of %#x is not committed: %w", i, uint64(gr.p), gpu.ErrInvalidValue)
		}
		if pc := gr.gran[i].pc; pc != last {
			x.Pieces = append(x.Pieces, VirtualPiece{Offset: uint64(pc.first) * v.g, Size: uint64(pc.n) * v.g})
			hs = append(hs, pc.h)
			last = pc
		}
	}
	// Offsets so far are from the allocation's start: make them the
	// span's.
	lo := x.Pieces[0].Offset
	for i := range x.Pieces {
		x.Pieces[i].Offset -= lo
	}
	end0 := x.Pieces[len(x.Pieces)-1]
	x.Span = end0.Offset + end0.Size
	x.Start, x.Size = off-lo, size
	return x, hs, nil
}
