// Interprocess memory between simulated "processes": two Backends of one
// test binary stand for two processes on the same GPU.
//
// An export puts the exported object in a exports of this (real) process,
// under a number; what crosses between the "processes" is exactly what
// crosses on the card, so the protocol above is tested as it runs there:
//
//   - a pool exported as HandlePOSIX is a real file descriptor (of a
//     temporary file the pool keeps while it lives), which may travel over a
//     Unix socket with SCM_RIGHTS; an import finds the pool by the file's
//     identity (os.SameFile), so a descriptor of anything else is refused;
//     as HandleFabric it is 64 bytes naming the exports entry;
//   - an allocation's export data and an event's handle are 64 bytes: a
//     tag, the exports number, and for an allocation its address and size
//     in the exporter.
//
// An imported allocation is a segment of the importer's device, at an
// address of its own (the upper half of the device's range, so an
// exporter's address never works there by accident), that shows the
// exporter's bytes (segment.view): kernels and copies of both processes
// touch the same memory, and under -race an access of one that no event
// orders after the other's is a data race, as within one process. The
// exporter's block stays what it is: freeing it while an importer still
// maps it hands the bytes to the exporter's next allocation while the
// importer can still write them (the driver leaves that undefined; this is
// the breakage package ipc's protocol prevents). A view keeps the bytes
// alive, as the driver keeps memory mapped by another process.
//
// An imported event (ipcEvent) is the exporter's event seen from the
// importer: waiting on it waits for the exporter's latest record,
// vector clocks included; recording it is gpu.ErrNotSupported.
//
// Not modelled: process exit. A Backend standing for a process that died
// simply stops being used; the protocol above handles the lost peer.

package sim

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.IPC = (*Device)(nil)

// The exports of exported pools, events and legacy allocations of the
// real process, shared by every Backend in it. None keeps a device alive
// for the rest of the process:
//
//   - destroying a pool, or freeing an allocation exported with
//     cuIpcGetMemHandle, drops its entry; a handle of it then no longer
//     opens (ErrInvalidValue), as OpenMem of freed memory already answered;
//   - a destroyed event stays importable, the last maxDestroyedEvents of
//     them only. The driver documents any use of an imported event after
//     the exporter destroyed it as undefined, and says nothing of opening
//     its handle then; a handshake may open a peer's event just as the
//     peer gives up and destroys it, so the simulator goes on opening the
//     recently destroyed ones, as it did when it kept them all, and
//     refuses older ones.
//
// Lock order: a Device's mu, then an event's mu, before exports.mu.
var exports struct {
	mu     sync.Mutex
	next   uint64
	pools  map[uint64]*memPool
	events map[uint64]*event
	mems   map[uint64]legacyExport
	// phys are the exported physical allocations (vmmshare.go).
	phys map[uint64]physExport
	// destroyed holds the IDs of destroyed events still in events, oldest
	// first, at most maxDestroyedEvents.
	destroyed []uint64
}

// maxDestroyedEvents bounds the destroyed events that stay importable.
const maxDestroyedEvents = 256

type legacyExport struct {
	dev *Device
	a   *allocation
}

// Tags of the 64-byte handles.
const (
	tagPool  = "SAPOOL01"
	tagPtr   = "SAPTR001"
	tagEvent = "SAEVENT1"
	tagMem   = "SAMEM001"
)

func exportLocked() uint64 {
	if exports.pools == nil {
		exports.pools = make(map[uint64]*memPool)
		exports.events = make(map[uint64]*event)
		exports.mems = make(map[uint64]legacyExport)
	}
	exports.next++
	return exports.next
}

// handle64 writes tag and the words into 64 bytes.
func handle64(tag string, words ...uint64) (h [64]byte) {
	copy(h[:8], tag)
	for i, w := range words {
		binary.LittleEndian.PutUint64(h[8+8*i:], w)
	}
	return h
}

// parse64 reads n words of a handle with tag, or reports false.
func parse64(h [64]byte, tag string, n int) ([]uint64, bool) {
	if string(h[:8]) != tag {
		return nil, false
	}
	w := make([]uint64, n)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(h[8+8*i:])
	}
	return w, true
}

// ExportHandleTypes returns Config.IPCHandleTypes.
func (d *Device) ExportHandleTypes() (gpu.HandleType, error) {
	if err := d.injectNamed(OpIPC, "cuDeviceGetAttribute"); err != nil {
		return 0, err
	}
	return d.b.cfg.IPCHandleTypes, nil
}

// NewExportableMemPool creates a pool exportable as t. Under
// Config.NoIMEXChannel, handle types with gpu.HandleFabric are refused
// with gpu.ErrNotPermitted and nothing is made, as the CUDA backend
// refuses them once the driver has said so (fabric.go).
func (d *Device) NewExportableMemPool(t gpu.HandleType) (gpu.MemPool, error) {
	const call = "cuMemPoolCreate"
	if t == gpu.HandleNone || t&^d.b.cfg.IPCHandleTypes != 0 {
		return nil, wrap(call, fmt.Errorf("handle types %#x, %v offers %#x: %w", int32(t), d, int32(d.b.cfg.IPCHandleTypes), gpu.ErrNotSupported))
	}
	if err := d.fabricRefused(call, t); err != nil {
		return nil, err
	}
	if err := d.inject(OpMemPoolCreate); err != nil {
		return nil, err
	}
	return d.createMemPool(func(p *memPool) { p.handles = t }), nil
}

// ExportMemPool exports a pool made by NewExportableMemPool as t.
func (d *Device) ExportMemPool(gp gpu.MemPool, t gpu.HandleType) (gpu.Shareable, error) {
	const call = "cuMemPoolExportToShareableHandle"
	p, err := d.pool(call, gp)
	if err != nil {
		return gpu.Shareable{}, err
	}
	if err := p.checkLive(call); err != nil {
		return gpu.Shareable{}, err
	}
	if (t != gpu.HandlePOSIX && t != gpu.HandleFabric) || p.handles&t == 0 {
		return gpu.Shareable{}, driverErrf(call, gpu.ErrInvalidValue, "handle type %#x of a pool exportable as %#x", int32(t), int32(p.handles))
	}
	if err := d.injectNamed(OpIPC, call); err != nil {
		return gpu.Shareable{}, err
	}
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if p.exportID == 0 {
		if t == gpu.HandlePOSIX || p.handles&gpu.HandlePOSIX != 0 {
			f, err := os.CreateTemp("", "streamalloc-sim-pool-*")
			if err != nil {
				return gpu.Shareable{}, wrap(call, fmt.Errorf("the pool's file: %v: %w", err, gpu.ErrOutOfMemory))
			}
			f.Close()
			p.file = f.Name()
		}
		p.exportID = exportLocked()
		exports.pools[p.exportID] = p
	}
	if t == gpu.HandleFabric {
		return gpu.Shareable{Type: t, Fabric: handle64(tagPool, p.exportID)}, nil
	}
	f, err := os.Open(p.file)
	if err != nil {
		return gpu.Shareable{}, wrap(call, fmt.Errorf("%v: %w", err, gpu.ErrOutOfMemory))
	}
	return gpu.Shareable{Type: t, File: f}, nil
}

// unexport drops a destroyed pool from the exports.
func (p *memPool) unexport() {
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if p.exportID == 0 {
		return
	}
	delete(exports.pools, p.exportID)
	if p.file != "" {
		os.Remove(p.file)
	}
}

// ImportMemPool imports an exported pool; h.File stays open.
func (d *Device) ImportMemPool(h gpu.Shareable) (gpu.MemPool, error) {
	const call = "cuMemPoolImportFromShareableHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return nil, err
	}
	var from *memPool
	switch {
	case h.Type == gpu.HandlePOSIX && h.File != nil:
		fi, err := h.File.Stat()
		if err != nil {
			return nil, driverErrf(call, gpu.ErrInvalidValue, "descriptor: %v", err)
		}
		exports.mu.Lock()
		for _, p := range exports.pools {
			if p.file == "" {
				continue
			}
			if pfi, err := os.Stat(p.file); err == nil && os.SameFile(fi, pfi) {
				from = p
			}
		}
		exports.mu.Unlock()
	case h.Type == gpu.HandleFabric:
		if err := d.fabricImportRefused(call); err != nil {
			return nil, err
		}
		if w, ok := parse64(h.Fabric, tagPool, 1); ok {
			exports.mu.Lock()
			from = exports.pools[w[0]]
			exports.mu.Unlock()
			if from != nil && from.handles&gpu.HandleFabric == 0 {
				from = nil
			}
		}
	default:
		return nil, driverErrf(call, gpu.ErrInvalidValue, "handle type %#x without its handle", int32(h.Type))
	}
	if from == nil {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "not the handle of an exported pool")
	}
	return d.createMemPool(func(p *memPool) { p.from = from }), nil
}

// ExportPointer exports a live allocation of an exported pool of d.
func (d *Device) ExportPointer(ptr gpu.DevicePtr) (gpu.PtrExportData, error) {
	const call = "cuMemPoolExportPointer"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return gpu.PtrExportData{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.allocs[uint64(ptr)]
	if a == nil || a.kind != allocPool || a.blk.pool.handles == gpu.HandleNone {
		return gpu.PtrExportData{}, driverErrf(call, gpu.ErrInvalidValue, "%#x is not a live allocation of an exportable pool of %v", uint64(ptr), d)
	}
	p := a.blk.pool
	exports.mu.Lock()
	if p.exportID == 0 {
		p.exportID = exportLocked()
		exports.pools[p.exportID] = p
	}
	id := p.exportID
	exports.mu.Unlock()
	return gpu.PtrExportData(handle64(tagPtr, id, a.ptr, a.size)), nil
}

// ImportPointer maps the allocation data describes, from the imported
// pool gp, at an address of d's.
func (d *Device) ImportPointer(gp gpu.MemPool, data gpu.PtrExportData) (gpu.DevicePtr, error) {
	const call = "cuMemPoolImportPointer"
	p, err := d.pool(call, gp)
	if err != nil {
		return 0, err
	}
	if err := p.checkLive(call); err != nil {
		return 0, err
	}
	if p.from == nil {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "the pool was not imported")
	}
	if err := d.injectNamed(OpIPC, call); err != nil {
		return 0, err
	}
	w, ok := parse64(data, tagPtr, 3)
	if !ok || w[0] != p.from.exportID {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "export data of another pool")
	}
	// The exporter's block, looked up under its device's lock alone.
	ed := p.from.dev
	ed.mu.Lock()
	a := ed.allocs[w[1]]
	var view *segment
	var off uint64
	if a != nil && a.kind == allocPool && a.blk.pool == p.from && a.size == w[2] {
		view, off = a.blk.heap.seg, a.ptr-a.blk.heap.seg.base
	}
	ed.mu.Unlock()
	if view == nil {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "%#x is no longer allocated in the exporter", w[1])
	}
	return d.mapImport(call, view, off, w[2], false)
}

// mapImport maps size bytes of view from off at an address of d's import
// range.
func (d *Device) mapImport(call string, view *segment, off, size uint64, legacy bool) (gpu.DevicePtr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	base, ok := d.importVA.alloc(roundUp(size, align), bigAlign)
	if !ok {
		return 0, driverErrf(call, gpu.ErrOutOfMemory, "import address space exhausted")
	}
	seg := &segment{base: base, size: size, view: view, viewOff: off}
	d.segs.add(seg)
	d.allocs[base] = &allocation{ptr: base, size: size, kind: allocImport, seg: seg, legacy: legacy}
	return gpu.DevicePtr(base), nil
}

// NewIPCEvent creates an event another process can open.
func (d *Device) NewIPCEvent() (gpu.Event, error) {
	if err := d.inject(OpEventCreate); err != nil {
		return nil, err
	}
	e := &event{dev: d, raw: newRaw(), ipc: true}
	d.foreign.addEvent(e)
	return e, nil
}

// ExportEvent exports an event made by NewIPCEvent.
func (d *Device) ExportEvent(ge gpu.Event) (gpu.IPCEventHandle, error) {
	const call = "cuIpcGetEventHandle"
	if _, ok := ge.(*ipcEvent); ok {
		return gpu.IPCEventHandle{}, driverErrf(call, gpu.ErrInvalidValue, "an event imported from another process")
	}
	e, err := d.event(call, ge)
	if err != nil {
		return gpu.IPCEventHandle{}, err
	}
	if !e.ipc {
		return gpu.IPCEventHandle{}, driverErrf(call, gpu.ErrInvalidValue, "not an interprocess event")
	}
	if err := d.injectNamed(OpIPC, call); err != nil {
		return gpu.IPCEventHandle{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return gpu.IPCEventHandle{}, wrap(call, gpu.ErrDestroyed)
	}
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if e.exportID == 0 {
		e.exportID = exportLocked()
		exports.events[e.exportID] = e
	}
	return gpu.IPCEventHandle(handle64(tagEvent, e.exportID)), nil
}

// unexport notes that an exported event was destroyed, and drops the
// oldest destroyed events beyond maxDestroyedEvents; e.mu is held.
func (e *event) unexport() {
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if e.exportID == 0 {
		return
	}
	exports.destroyed = append(exports.destroyed, e.exportID)
	if n := len(exports.destroyed) - maxDestroyedEvents; n > 0 {
		for _, id := range exports.destroyed[:n] {
			delete(exports.events, id)
		}
		exports.destroyed = append(exports.destroyed[:0], exports.destroyed[n:]...)
	}
}

// ImportEvent opens an exported event.
func (d *Device) ImportEvent(h gpu.IPCEventHandle) (gpu.Event, error) {
	const call = "cuIpcOpenEventHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return nil, err
	}
	w, ok := parse64(h, tagEvent, 1)
	var e *event
	if ok {
		exports.mu.Lock()
		e = exports.events[w[0]]
		exports.mu.Unlock()
	}
	if e == nil {
		return nil, driverErrf(call, gpu.ErrInvalidValue, "not the handle of an exported event")
	}
	return &ipcEvent{dev: d, e: e}, nil
}

// ExportMem is cuIpcGetMemHandle of a Malloc allocation.
func (d *Device) ExportMem(ptr gpu.DevicePtr) (gpu.IPCMemHandle, error) {
	const call = "cuIpcGetMemHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return gpu.IPCMemHandle{}, err
	}
	// d.mu is held until the entry is in: a Free after this call drops it.
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.allocs[uint64(ptr)]
	if a == nil || a.kind != allocMalloc {
		return gpu.IPCMemHandle{}, driverErrf(call, gpu.ErrInvalidValue, "%#x is not a cuMemAlloc allocation of %v", uint64(ptr), d)
	}
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if a.exportID == 0 {
		a.exportID = exportLocked()
		exports.mems[a.exportID] = legacyExport{d, a}
	}
	return gpu.IPCMemHandle(handle64(tagMem, a.exportID, a.ptr)), nil
}

// unexport drops a freed allocation from the exports.
func (a *allocation) unexport() {
	exports.mu.Lock()
	defer exports.mu.Unlock()
	if a.exportID != 0 {
		delete(exports.mems, a.exportID)
	}
}

// OpenMem is cuIpcOpenMemHandle.
func (d *Device) OpenMem(h gpu.IPCMemHandle) (gpu.DevicePtr, error) {
	const call = "cuIpcOpenMemHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return 0, err
	}
	w, ok := parse64(h, tagMem, 2)
	var x legacyExport
	if ok {
		exports.mu.Lock()
		x = exports.mems[w[0]]
		exports.mu.Unlock()
	}
	if x.a == nil {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "not the handle of an exported allocation")
	}
	x.dev.mu.Lock()
	live := x.dev.allocs[x.a.ptr] == x.a
	x.dev.mu.Unlock()
	if !live {
		return 0, driverErrf(call, gpu.ErrInvalidValue, "%#x is no longer allocated in the exporter", x.a.ptr)
	}
	return d.mapImport(call, x.a.seg, 0, x.a.size, true)
}

// CloseMem is cuIpcCloseMemHandle: it waits for the device's work, then
// unmaps.
func (d *Device) CloseMem(p gpu.DevicePtr) error {
	const call = "cuIpcCloseMemHandle"
	if err := d.injectNamed(OpIPC, call); err != nil {
		return err
	}
	d.mu.Lock()
	a := d.allocs[uint64(p)]
	if a == nil || a.kind != allocImport || !a.legacy {
		d.mu.Unlock()
		return driverErrf(call, gpu.ErrInvalidValue, "%#x is not memory opened with cuIpcOpenMemHandle", uint64(p))
	}
	delete(d.allocs, uint64(p))
	d.mu.Unlock()
	_ = d.syncAll(call)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unmapLocked(a.seg, 0)
	return nil
}

// ipcEvent is an event of another process, opened by ImportEvent.
type ipcEvent struct {
	dev  *Device
	e    *event
	dead atomic.Bool
}

func (x *ipcEvent) Device() gpu.Device { return x.dev }

func (x *ipcEvent) resolve(call string) (*event, error) {
	if x == nil {
		return nil, wrap(call, fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	if x.dead.Load() {
		return nil, wrap(call, fmt.Errorf("imported event: %w", gpu.ErrDestroyed))
	}
	if err := x.e.self(call); err != nil {
		return nil, fmt.Errorf("%w (destroyed by its exporter)", err)
	}
	return x.e, nil
}

// Record is refused: an imported event is only waited on.
func (x *ipcEvent) Record(gpu.Stream) error {
	const call = "cuEventRecord"
	if _, err := x.resolve(call); err != nil {
		return err
	}
	return wrap(call, fmt.Errorf("an event imported from another process: %w", gpu.ErrNotSupported))
}

// Query reports whether the exporter's latest record has completed; on
// nil the importer's host is ordered after it.
func (x *ipcEvent) Query() error {
	e, err := x.resolve("cuEventQuery")
	if err != nil {
		return err
	}
	if err := e.Query(); err != nil {
		return err
	}
	x.observed(e)
	return nil
}

// Synchronize waits for the exporter's latest record.
func (x *ipcEvent) Synchronize() error {
	e, err := x.resolve("cuEventSynchronize")
	if err != nil {
		return err
	}
	if err := e.Synchronize(); err != nil {
		return err
	}
	x.observed(e)
	return nil
}

// observed orders the importer's host after e's record.
func (x *ipcEvent) observed(e *event) {
	if r := e.current(); r != nil && r.seq != 0 {
		x.dev.b.hostJoin(r)
	}
}

// ElapsedSince is refused: interprocess events do not time.
func (x *ipcEvent) ElapsedSince(gpu.Event) (time.Duration, error) {
	return 0, driverErrf("cuEventElapsedTime", gpu.ErrInvalidHandle, "event created without timing")
}

// Destroy closes the imported event; the exporter's lives on.
func (x *ipcEvent) Destroy() error {
	if x == nil {
		return wrap("cuEventDestroy", fmt.Errorf("nil event: %w", gpu.ErrInvalidHandle))
	}
	if !x.dead.CompareAndSwap(false, true) {
		return wrap("cuEventDestroy", gpu.ErrDestroyed)
	}
	return nil
}
