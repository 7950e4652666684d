// Package devarena is device-side suballocation: a region of device memory
// that the threads of a kernel allocate from themselves, by an atomic add on
// a 64-bit counter kept in device memory beside the region.
//
// The host creates an arena from any mr.Resource on a stream (New), hands
// kernels the address of its header (Arena.Header, a struct sa_arena*), and
// between epochs of kernels resets the counter (Reset) and reads the
// high-water mark and the overflow flag (Stats). Kernels include
// sa_arena.cuh and call sa_arena_alloc(arena, n), which returns n bytes
// aligned to the arena's alignment (256 by default) or NULL, setting the
// overflow flag, when they do not fit. Nothing is ever written outside the
// region: a request is served only if it lies entirely inside it.
//
// # Streams
//
// Everything the host does to an arena is enqueued on the arena's stream:
// the allocation of header and region, the header's initialisation, Reset,
// the read-back of Stats, and the free in Close. Kernels on that stream are
// therefore ordered around all of it. A kernel on another stream that uses
// the arena is ordered by nothing the package does: order it with an event,
// or it may allocate while a Reset zeroes the counter (and get memory that
// the next epoch hands out again) or while Close frees the region.
//
// Several streams bumping one counter contend for one address and cannot
// be reset independently: a Reset enqueued on one stream is not ordered
// with the kernels of the others, which may be allocating meanwhile. Set
// avoids the race: one arena per stream (Set.For), each used and reset
// only in its own stream's order.
//
// # The counter
//
// A request that fails on the counter (others got there first) still
// leaves its add there: undoing it would let a later request land on a
// live allocation. With two failed adds on the counter, undoing the first
// lets a request be served from the lowered counter; undoing the second
// then lowers the counter below the end of that served range, and the
// next request gets part of it again. So the counter may pass the
// region's size; from then on every request of the epoch fails, Stats
// reports the region as full (HighWater = Size) with Overflow set, and
// Reset starts over. Requests refused before the add (larger than the
// region, or made after the counter had visibly passed the end) set
// Overflow but claim nothing.
// sa_arena.cuh states why the counter cannot wrap (it stays below
// (T+1)*Size for T failing threads, Size <= MaxSize).
//
// # Kernels for tests
//
// sa_arena.ptx, hand-written from sa_arena.cu, holds two kernels that this
// package's tests and benchmarks launch (LoadKernels): Tag, in which every
// thread allocates a few bytes and writes its id there, and Bump, one
// allocation per thread. On the simulator they run as Go functions
// (simkernels.go).
package devarena
