// Package mr holds streamalloc's memory resources and the adaptors that
// wrap them.
//
// A Resource hands out device memory in stream order (the pinned host
// pools hand out page-locked host memory through the same interface, by
// its unified address: host.go). Allocate(n, s) returns
// at once, and the memory may be used by any work enqueued on s after the
// call. Deallocate(p, n, s) is enqueued on s as well: the memory may be
// handed to another request on s at once (later work on s runs after the
// free), and to a request on another stream only once that stream is
// ordered after the free, by an event wait or because the free has
// completed. A resource never blocks the host to give that guarantee unless
// its documentation says so.
//
// Contracts every resource and adaptor keeps:
//
//   - It is safe for concurrent use by many goroutines on many streams.
//   - Every allocation is aligned to Alignment (256) bytes.
//   - Allocate(0, s) returns the null pointer 0 and no error, touching
//     nothing; Deallocate(0, 0, s) returns nil. (Decided once for all
//     resources, like cudaMalloc(0).)
//   - A negative size returns an error matching ErrInvalidSize; a free of a
//     pointer the resource did not hand out matches ErrUnknownPointer; a free
//     of one it handed out and has freed matches ErrDoubleFree where it can
//     tell; a free with another size than the allocation's matches
//     ErrSizeMismatch; a nil stream, or one of another device, matches
//     gpu.ErrInvalidHandle or gpu.ErrWrongDevice. None of them changes the
//     resource's state.
//   - Out of memory is an error matching ErrOutOfMemory (gpu.ErrOutOfMemory),
//     an *OutOfMemoryError carrying the request and the state of the
//     resource that refused it. A size no resource could hold, up to
//     math.MaxInt, is out of memory too, never ErrInvalidSize (which is
//     for negative sizes) and never an overflow in the resource's
//     rounding: a replay that meets one counts a failure and goes on.
//
// # Files
//
// What every resource shares:
//
//	resource.go     Resource, Alignment, the errors, Usage, UsageReporter, Releaser
//	args.go         the argument checks, in the order every Allocate and Deallocate runs them
//	ptrtable.go     live pointers and recent frees, so bad frees are refused before they go on
//	owner.go        Owner, OwnedResource: an upstream that refuses bad frees, so adaptors keep no table
//	streamtable.go  per-stream state by Stream.ID; the home-stream model of the suballocators
//	eventcache.go   cached events; orderAfter: one stream after another, the host not blocked
//	spanindex.go    which upstream chunk or superblock holds an address (Pool, FixedSize, Arena)
//	usage.go        lock-free Usage counters
//	pending.go      PendingFrees: live plus incomplete frees, reaped per stream (Async's)
//	chain.go        Wrapper, Chain and Reclaim: walking a stack of adaptors and resources
//	context.go      the forms with a context.Context of every call that blocks the host
//	current.go      Current and SetCurrent: the per-device default resource
//	summary.go      StatsOf and Summary: every statistic of a chain, and the text a person reads
//	strings.go      String methods: %v of the statistics and of every resource, one line
//	units.go        FormatBytes: sizes in IEC units, as the summary and the errors print them
//	capture.go      CUDA graph capture: BeginCapture, Capture, the rules every resource follows
//	graphpool.go    GraphPool: the private memory suballocators serve to captures
//	capture_clients.go, async_capture.go  each resource's side of the capture rules
//	capture_hooks.go  CaptureOf, CaptureHook: code above mr in a capture's end, launches, release
//
// Resources:
//
//	direct.go, managed.go  cuMemAlloc / cuMemAllocManaged with a synchronous, stream-safe free
//	async.go               the driver's stream-ordered pool (cuMemAllocAsync)
//	pinned.go              page-locked host memory for staging copies (not a Resource)
//	host.go                host memory as a Resource: HostResource, HostBytesOf, AllocateHost, FreeHost
//	hostpool.go            HostPool: page-locked staging buffers cached and freed in stream order
//	hostdriverpool.go      DriverHostPool: the driver's host-located pool
//	fixedsize.go           blocks of one size, per-stream lists
//	binning.go             power-of-two FixedSize bins, larger requests upstream
//	arena.go               per-stream arenas over a global arena of superblocks
//	pool.go                Pool: the stream-ordered suballocator (its design and invariants)
//	pool_stream.go         the Pool's per-stream state: everything its hot path touches
//	pool_quick.go          the quick cache: a freed block kept whole for a request of its size
//	pool_ptrmap.go         the live blocks of one Pool stream, by address
//	pool_tlsf.go           the free blocks of one Pool stream (two-level segregated fit)
//	pool_chunk.go          chunks and blocks
//	pool_grow.go           the Pool's slow paths: steal, growth, release, cross-stream frees
//	pool_stats.go          PoolStats
//	pool_layout.go         Pool.Layout: chunks and blocks with their states, the largest free block
//	virtual.go             Virtual: physical memory mapped on demand into one reserved range
//	virtual_grow.go        Virtual's growable ranges: granules committed and decommitted in place, in pieces
//	virtual_export.go      Virtual's memory shared with another process: the pieces under a range, exported
//	virtual_trace_*.go     a build tag's timing trace of those commits and unmaps (measurement only)
//	grower.go              Grower: the upstream interface of growth in place
//	pool_vgrow.go          the Pool over a Grower: growable chunks per stream, a long and a short one
//	pool_lifetime.go       lifetime-aware placement over a Grower: predicted short-lived blocks apart
//	pool_walk.go           which streams the slow paths visit: the cost of many streams
//	pool_largest.go        the largest free block for out-of-memory errors, without visiting every stream
//
// Adaptors: stats.go (Stats; stats_owned.go, its counters over an
// upstream that checks owners), tracking.go (Tracking; proflabel.go, the
// allocating goroutine's pprof labels; tracking_leaks.go, the
// allocations a garbage collector freed for their owners; callers_fp.go,
// its stacks read by following frame pointers on amd64), logging.go
// (Logging, RMM CSV), limit.go (Limit and Budget), retry.go (Retry;
// oom_report.go, what its out-of-memory observer gets), aligned.go
// (Aligned; aligned_slots.go, its records without a lock over an upstream
// that checks owners), history.go (History: a bounded ring of allocation events with
// their stacks; history_snapshot.go writes it as PyTorch's memory
// snapshot, with internal/pickle, a writer of a dozen pickle opcodes).
//
// Packages below: mrtest, the conformance suite every resource and
// adaptor passes; mrprom, Prometheus collectors (ForChain: a whole stack
// in one call, labelled with its device); mrpprof, the device-memory
// profile and the summary over HTTP, next to net/http/pprof; registry,
// resources by name for the command and the benchmarks.
//
// # Why the Pool is not a package of its own
//
// The Pool is the pool_*.go files, a third of the package. It stays here
// because what would be left to cross a package boundary is exactly what
// it shares with the other resources: the argument checks, the pointer and
// span indexes, the per-stream table, the event ordering, the usage
// counters, the errors and OutOfMemoryError. A mr/pool package would have
// to import those from mr, so each would become exported API of mr (or
// move to an internal package that mr re-exports), for the benefit of a
// boundary that no user crosses: the Pool's own internals (tlsf, ptrMap,
// the quick cache) are unexported either way. Instead the Pool's files
// share a prefix, so they read as one unit, and the parts that three
// resources rebuilt each are built once: streamTable holds the per-stream
// states of Pool, FixedSize and Arena, orderAfter makes a new home wait on
// the old one, spanIndex finds the chunk of an address. What moves between
// streams, and when, stays each resource's policy: the Pool steals a whole
// idle chunk, FixedSize half a free list, Arena an empty superblock from
// its global arena.
//
// # Virtual memory: an upstream and an interface, not a Pool mode
//
// Growth through virtual memory (gpu.VirtualMemory: a reserved range,
// physical memory mapped into it granule by granule) is the resource
// Virtual, which a Pool takes as its upstream like any other, not a mode
// of the Pool. The Pool already decides which chunk to grow, steal or
// release and when, in stream order; what virtual memory changes is where
// a chunk's memory comes from and how it goes back: mapped on demand, and
// unmapped once the free's event has completed, without a host
// synchronization. Those are an upstream's concerns, and as an upstream
// Virtual also serves Arena, FixedSize and Binning, and is tested by the
// same conformance suite.
//
// Growing a chunk in place, and giving back the memory of its free
// blocks without moving the live ones, needs more than Allocate and
// Deallocate: the Pool must place blocks in a range whose memory comes and
// goes granule by granule. That is the optional interface Grower
// (grower.go): AllocateGrowable reserves a range, Commit and Decommit map
// and unmap granules of it, in stream order. The Pool asks its upstream
// for it (a type assertion in NewPool) and, where the upstream implements
// it, keeps one growable chunk per stream (pool_vgrow.go); over any other
// upstream it cuts chunks as before. So a PoolOptions.Virtual mode would
// have added nothing a caller can choose: the upstream already says what
// it can do, and the growth policy stays in the Pool next to the rest of
// its policy (placement, the high-water rule, release), while the driver's
// rules (physical allocations of several granules where a commit is
// large, since the driver's cost is per allocation, each going back only
// whole; the event a decommit waits for; handing a decommitted piece's
// memory to another range's commit once ordered after it) stay in
// Virtual, which tells the Pool which part of a free block gives its
// memory back (DecommitSpan). An adaptor between the two hides Grower, and the Pool then cuts
// chunks: growth in place is for a Pool directly over Virtual.
//
// Sharing with another process belongs to Virtual too: with
// VirtualOptions.HandleTypes its physical memory is created exportable,
// and Export hands out the pieces under any live range, a Pool block
// growing in place included (the Pool's address is all it needs), as OS
// handles. The cross-process protocol (sockets, the importer's mappings)
// is package ipc's, which mr does not import (ipc.ImportVirtual).
//
// # Writing an adaptor
//
// An adaptor wraps any Resource (see stats.go or limit.go):
//
//  1. Embed passThrough, which holds the upstream and forwards Upstream,
//     Release and Reap, and keep the upstream's device and a
//     ptrTable[gpu.DevicePtr, V] with whatever the adaptor must remember
//     per allocation.
//  2. Allocate starts with checkAlloc(name, dev, size, s) and returns on
//     zero or error; wraps the upstream's errors as fmt.Errorf("name: %w",
//     err) (an *OutOfMemoryError still matches ErrOutOfMemory); records
//     the pointer with insert, undoing the old record's bookkeeping if
//     insert replaced one.
//  3. Deallocate starts with checkFree(name, dev, p, size, s) and returns
//     on null or error; then take(p, size, free) with a free that calls
//     the upstream's Deallocate and does the adaptor's bookkeeping only if
//     it succeeds. A bad free then never reaches the upstream and is never
//     counted.
//  4. Add the adaptor to adaptorCases in adaptors_test.go: that runs it
//     through the bad-input tests against a recording upstream, the
//     concurrency tests, and the conformance suite (mrtest.Run) over a
//     pool. Add it to the stack of FuzzAdaptorStack if its counters can be
//     checked against the fuzz test's model.
//  5. If the command should offer it, stack it in cmd/streamalloc behind a
//     flag, as --log stacks Logging and --sanitize the sanitizer.
//
// # Writing a resource
//
//  1. Allocate starts with checkAlloc, Deallocate with checkFree (args.go),
//     before any state is touched; the resource's own limits (a size over
//     its block size, over its budget) come after, as OutOfMemoryError;
//     round a size only after checking that the result fits in an int.
//  2. A resource that takes memory from the driver or an upstream whole
//     keeps its live pointers in a ptrTable (take with a nil free, free,
//     restore on failure). One that carves memory itself finds the chunk
//     of an address with a spanIndex, keeps per-stream state in a
//     streamTable, and moves memory between streams only after orderAfter
//     (never by blocking the host).
//  3. Keep Usage in a usageMeter and implement UsageReporter, and Releaser
//     if it caches memory; a failed operation leaves every counter as it
//     was.
//  4. Out of memory is an *OutOfMemoryError with the request and the
//     resource's reserved, used and limit.
//  5. Add it to resCases in resources_test.go and to
//     TestResourcesConformance (mrtest.Run, with the Options that say what
//     it serves); a resource that carves memory itself also goes into
//     fuzzResources in resources_fuzz_test.go, which checks operation
//     sequences against a reference model. Run go test -race ./mr/...
//     on the simulator, and the GPU suite on a device.
//  6. Add one entry to the table of mr/registry (its package doc has the
//     recipe), so that replay and bench can run it by name.
package mr
