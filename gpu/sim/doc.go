// Package sim is a simulated GPU: a model of the CUDA driver that
// implements gpu.Backend for everything streamalloc touches, so the whole
// library and its tests run on machines without a GPU, and so that ordering
// mistakes show up as data races instead of rare corruptions.
//
// # Model
//
// A Backend holds Config.Devices devices of Config.Capacity bytes each.
// Device memory is real host memory: sets, copies and kernels move real
// bytes, and tests can check them. Each allocation (a cuMemAlloc region or
// a chunk reserved by a pool, in whole 32 MiB units) is a segment of a
// per-device address space; a segment's bytes are committed only when
// first touched, as one Go slice for segments up to 64 MiB and as 2 MiB
// pages above that.
// Addresses are 256-aligned (2 MiB-aligned from 2 MiB up) and never zero.
// Capacity counts cuMemAlloc, managed allocations and pool reservations;
// going over it is ErrOutOfMemory, as on the card.
//
// Each stream is a queue of operations executed in order by a worker
// goroutine that exists only while the queue is not empty. Operations are
// enqueued by the host and run asynchronously. Events complete when their
// stream reaches them; a stream that waits on an event does not run past
// the wait until the event completes. A failing operation (an access
// outside mapped memory, a kernel returning an error, panicking or ending
// its goroutine with runtime.Goexit) leaves a sticky error on its stream:
// later memory work on that stream is skipped, and Synchronize, Query and
// events recorded after it return the error. (The card makes the whole
// context unusable; the simulator confines the error to the stream so a
// test can go on.)
//
// What the driver would refuse is a *gpu.Error naming the driver call, with
// the gpu.Code the driver returns; the package imports no driver binding,
// so a program that runs only on the simulator links no cgo.
//
// # Decisions
//
// Where the driver leaves a choice or the simulator must simplify:
//
//   - size 0 is gpu.ErrInvalidValue for every allocation call (as for
//     cuMemAlloc); freeing an unknown, interior or freed pointer is
//     gpu.ErrInvalidValue;
//   - Free (cuMemFree) synchronizes the device before freeing, as the
//     driver does, and accepts pool memory; FreeAsync accepts cuMemAlloc
//     memory, unmapped once the free has run;
//   - sets and copies check their ranges when enqueued (gpu.ErrInvalidValue,
//     nothing enqueued, as the driver validates pointers) and again when
//     they run (gpu.ErrIllegalAddress, sticky);
//   - a pool grows rather than insert a dependency between two streams;
//     inserted waits are used only when it cannot grow;
//   - MallocHost is Go memory, page-locked only in the model; managed
//     memory is device memory whose pages also have a residency (host,
//     device or both), moved by kernels' touches, HostAccess and
//     prefetches, with page faults counted (managed.go); copies do not
//     move it.
//
// # Races
//
// Under `go test -race`, the simulator is built so that the race detector
// sees exactly the orderings the driver guarantees and no others:
//
//   - work enqueued by the host is ordered after what the host did before
//     enqueuing it;
//   - the operations of one stream are ordered among themselves;
//   - an event wait orders the waiting stream after the recorded work;
//   - a successful Synchronize or Query orders the host after the work it
//     covered; reuse of pool memory orders the new owner after the free.
//
// All of the simulator's own bookkeeping between the host and the stream
// workers (queues, completion counters, address lookups, page creation)
// runs with race synchronization disabled or in //go:norace functions, so
// it creates no happens-before edge of its own; the edges above are added
// explicitly. Two streams that touch the same bytes without an event
// between them are therefore reported as a DATA RACE, and correctly ordered
// code is clean. Atomic operations of kernels (Launch.AddUint32, ...) are
// relaxed, as on the card: they neither order nor race.
//
// # Capture
//
// Streams can be captured into graphs (gpu.CaptureStream): captured work is
// recorded, not run; what the driver forbids during a capture fails with
// its error and invalidates the capture, as measured on an H100; a graph
// launch replays the nodes on streams of the executable with the graph's
// edges as event waits, so the race detector checks graphs too. See
// capture.go and graph.go.
//
// # Test hooks
//
// *Device has hooks for tests: Hold blocks a stream like a long kernel,
// FailNext makes the next calls of a driver function fail, SetInjector
// decides every call (the k-th of a kind, the k-th of all, those from a
// given function: faults.go), and LastOp and
// HappensBefore expose the happens-before relation between stream
// operations (vector clocks carried by streams, events and the host).
//
// # Kernels
//
// LoadModule reads the .entry names (and parameter types) of PTX text and
// resolves each to a Go function registered with RegisterKernel; an entry
// with no registered function is an error matching gpu.ErrNotFound.
// Launch checks the arguments against the PTX parameters and enqueues the
// Go function, which reaches device memory through *Launch.
package sim
