// Package ipc shares device memory between processes: an Exporter lends
// allocations of its driver pool to importers in other processes over Unix
// sockets, and the ordering rules the driver leaves to its users hold by
// construction.
//
// # The driver's rules
//
// A pool created exportable (a POSIX file descriptor handle; fabric where
// the system offers it) is exported once per importer; each allocation is
// exported as 64 bytes of data and imported at an address of the
// importer's own (gpu.IPC). The driver then asks two things it does not
// check: the importer must not use the memory before the exporter's writes
// to it are complete, and the exporter must not free it before every
// importer's free of it has completed. Breaking either is a data race
// between two processes on the card (TestBrokenProtocol shows the second
// on the simulator: the exporter's next allocation gets the bytes an
// importer is still writing).
//
// # The protocol
//
// One Unix stream socket per importer carries fixed-size frames (wire.go).
// The exporter's Serve sends the pool's descriptor (SCM_RIGHTS, fd.go) and
// the handle of its lend event; the importer's Accept answers with the
// handle of its return event. Both events are interprocess events made
// once per connection, each recorded only on a stream of its own side:
//
//   - Lend(ctx, p, size, s): the lend stream waits on s (an event of the
//     exporter's cache), the lend event is recorded on the lend stream, the
//     frame goes out. Receive(s) in the importer imports the pointer and
//     makes s wait on the lend event. The lend event is only ever recorded
//     on the one lend stream, so its latest record, which a wait takes,
//     comes after every lent allocation's writes: one event serves every
//     loan, and the importer never reads before the exporter's writes.
//   - Release(s) in the importer: the import is freed on s (cuMemFreeAsync
//     of an import only unmaps it), the return stream waits on s, the
//     return event is recorded there, and the give-back frame goes out. The
//     exporter makes the loan's stream wait on the return event before the
//     loan counts as returned; until then Deallocate refuses the pointer
//     (ErrLent), and after it a free on another stream is ordered after the
//     loan's stream. So the exporter's free always runs after the
//     importer's free and every use before it.
//   - Every frame is written under one write lock per side, taken and
//     written until a context ends: Lend's, or byeWait for a goodbye. An
//     importer that stops calling Receive fills its queue and then the
//     socket; Lend then fails with ctx's error and lends nothing. A frame
//     that ctx cut part-way ends the link (the write side is shut, so the
//     importer reads the connection's end, not half a frame).
//   - A buf.Buffer is lent with its block-use state (LendBuffer): the loan
//     is a write use on the buffer's stream, after its last write and
//     reads; when it comes back, the buffer's next users wait on the
//     return.
//
// # A lost peer
//
// When a process exits, the driver destroys its contexts: an importer's
// mappings of the exporter's memory are released with it, and the memory
// stays allocated in the exporter's pool, the exporter's to free. The
// socket reports the loss (end of stream) as the process's descriptors
// close, which may come before the driver has finished tearing its context
// down; so the exporter, where the system tells it the peer's process
// (Linux: SO_PEERCRED), waits until that process has finished exiting
// before it takes the loans back (Loan.Wait then returns ErrPeerLost and
// the pointers may be freed). An importer that loses its exporter keeps its
// imports mapped (the driver keeps the memory while any process maps it)
// until Release or Close unmaps them. Neither side leaks: the H100 run
// (scripts/gpu-ipc.sh) kills an importer holding 512 MiB of loans; the
// exporter frees them and its pool trims to 0 bytes reserved, and the
// device's free memory is back to its baseline once the pool is destroyed.
// Driver 580 keeps imported blocks' memory on the device after the
// exporter frees them and trims (the pool says 0 reserved) until the pool
// is destroyed, whether the importer was killed or gave everything back,
// so a long-lived exporter's footprint does not shrink with Trim once its
// blocks have been imported.
//
// # Handle types
//
// The caller picks the handle type (ExporterOptions.Handle,
// VirtualExporterOptions.Handle with mr.VirtualOptions.HandleTypes);
// nothing picks one for it. POSIX, the default, passes a descriptor over
// the socket (SCM_RIGHTS), for processes of one machine. Fabric passes
// 64 bytes in the frames (the pool's handle in the hello, a piece's in
// its message, no descriptor), which the driver honours across the
// nodes of an NVLink fabric, and only in processes that have an IMEX
// channel (/dev/nvidia-caps-imex-channels); a device's attributes say
// whether it offers fabric handles, not whether the process may use
// them. The protocol is the same for both, and the simulator runs the
// round trips, refusals, lost peers and handshake faults with each
// (processes that offer both, as the H100 does), FuzzVirtualLoans too.
//
// The H100 this project is tested on (driver 580) offers both (pools
// 0x9; attributes 103 and 128 say 1) and has no IMEX channel, so it
// refuses fabric: cuMemCreate requesting fabric handles and a fabric
// pool's export are CUDA_ERROR_NOT_PERMITTED, the import of a fabric
// handle CUDA_ERROR_NOT_SUPPORTED, and destroying a pool made exportable
// as fabric after its export was refused ends the process (SIGSEGV in
// cuMemPoolDestroy). So the CUDA backend never makes a pool requesting
// fabric handles before the driver has said the process may make fabric
// memory (a fabric cuMemCreate of one granule, asked once per device):
// gpu.IPC.NewExportableMemPool, and with it mr.NewAsync and NewExporter,
// returns gpu.ErrNotPermitted with no pool made; an mr.Virtual made with
// fabric handle types refuses each allocation with gpu.ErrNotPermitted;
// an importer without a channel refuses a fabric hello (Accept) or a
// fabric Virtual loan (Receive, which gives it back at once) with
// gpu.ErrNotSupported. TestFabricRefusedOnCard checks the first two on
// the card (docs/bench/h100-2026-11-25-fabric has the driver's answers
// and the crash; docs/bench/h100-2026-11-25-fabric2 the refusal in the
// backend); sim.Config.NoIMEXChannel answers all of it on the simulator
// (TestFabricWithoutIMEX). A fabric round trip between two processes on
// a machine with a channel (TestTwoProcessesFabric) has not been run.
//
// # Virtual memory
//
// Memory of an mr.Virtual made with VirtualOptions.HandleTypes (growable
// ranges and a Pool growing in place over it included) is shared by
// physical allocation instead (gpu.PhysicalSharing): Virtual.Export
// gives the pieces under a range, SendVirtual and RecvVirtual carry them
// over the socket with their descriptors, and ImportVirtual maps them in
// the importer (virtual.go). Used alone, the two rules above are the
// caller's there: an interprocess event recorded after the exporter's
// writes, waited on by the importer, and one recorded after the
// importer's last use, waited on by the exporter's stream before it frees
// or decommits the range. On the H100 a child process reads and rewrites
// a range of three pieces with zero mismatches (TestTwoProcessesVirtual).
//
// NewVirtualExporter makes an Exporter of such memory, and the protocol
// above carries it with the same Link, Loan and Import: the hello has no
// pool (handle type HandleNone), and each lend frame is followed by the
// range's export, its pieces' descriptors attached. The importer maps a
// loan with ImportVirtual. Unmapping is not stream-ordered (cuMemUnmap
// acts at once), so Release(s) records an event on s, gives the loan back
// at once (the exporter's stream waits for that work through the return
// event) and unmaps only once the event has completed: Reap, which
// Receive and Release also run, queries the events and unmaps what is
// done, never waiting on the host; Unmapping counts what is left, and
// Close waits for it. An unmap before that work completes would make it
// an illegal address (TestLendVirtualUnmapWaits on the simulator). The
// exporter refuses to free a lent range (ErrLent) rather than deferring
// the free until it comes back, so that a Deallocate either frees or
// changes nothing. Only memory Virtual.Export can give is lendable (a
// plain allocation from its start, committed granules of a growable
// one). On the H100 a child process takes eight ranges of 4 KiB to 128
// MiB, checks and rewrites them with zero mismatches and unmaps them all
// once its stream has run (TestTwoProcessesVirtualLend); a loan of one
// 2 MiB range is back on the exporter's host in about 225 µs; the
// importer's driver calls cost about 64 µs to map it (ImportVirtual) and
// 33 µs to unmap it, after the give-back (TestVirtualImportCost;
// BENCHMARKS.md). mr.Virtual keeps a descriptor of each allocation it has
// exported, so a lend duplicates it instead of asking the driver again
// (about 550 µs).
//
// # Costs
//
// A loan costs an export of 64 bytes, an event record and wait on each
// side and one frame each way; the pool's descriptor crosses once per
// importer. BENCHMARKS.md compares the round trip with the legacy
// cuIpcGetMemHandle path.
package ipc

import "errors"

// Errors of the protocol; each is wrapped with context.
var (
	// ErrLent: the allocation is lent to an importer and not yet given
	// back, so it cannot be freed or lent again.
	ErrLent = errors.New("ipc: allocation is lent to another process")
	// ErrPeerLost: the other process closed the connection or exited.
	ErrPeerLost = errors.New("ipc: peer process lost")
	// ErrProtocol: a malformed message, or one out of turn.
	ErrProtocol = errors.New("ipc: protocol error")
	// ErrReleased: the import was released already.
	ErrReleased = errors.New("ipc: import already released")
	// ErrNotLendable: the memory is not a live allocation of the exporter
	// (or the buffer's resource is not the exporter).
	ErrNotLendable = errors.New("ipc: not an allocation of this exporter")
	// ErrClosed: the exporter, link or importer was closed.
	ErrClosed = errors.New("ipc: closed")
)
