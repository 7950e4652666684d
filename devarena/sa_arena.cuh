// sa_arena.cuh: the device side of streamalloc's device arena (Go package
// devarena).
//
// A device arena is a region of device memory that the threads of a kernel
// allocate from themselves, by an atomic add on a 64-bit offset counter that
// lives in device memory next to the region. The host creates the arena
// (devarena.New or Set.For), resets it between epochs of kernels, and reads
// its high-water mark and overflow flag; kernels receive a pointer to the
// header below (Arena.Header() on the host) and call sa_arena_alloc.
//
// Header layout (32 bytes, little-endian, 8-byte aligned; the Go package's
// layout.go states the same offsets and its tests check them):
//
//   offset  0  u64 base      device address of the region; a multiple of align
//   offset  8  u64 size      bytes in the region; nothing is written at or past base+size
//   offset 16  u64 offset    bump counter: bytes claimed this epoch (may pass size, see below)
//   offset 24  u32 overflow  0, or 1 once any request of this epoch failed
//   offset 28  u32 align     alignment of every allocation: a power of two, 8 to 65536
//
// base, size and align never change while the arena lives; offset and
// overflow are what the host's Reset sets back to zero.
//
// Invariants and why they hold:
//
//   * Every pointer returned is base + k*align and [p, p + round(n)) lies
//     inside [base, base + size): a request is served only when the value
//     the atomic add returned (old) satisfies old <= size - round(n).
//   * No two allocations of one epoch overlap: each is the range
//     [old, old + round(n)) of a distinct atomic add on one counter.
//   * The counter may pass size: the add that fails is not undone (undoing
//     would let a later request land on top of a live one). Once it has
//     passed size every later request fails, so the served requests are a
//     prefix of the adds and the host reports min(offset, size) as the
//     high-water mark.
//   * A failing request never adds more than size bytes (larger requests
//     fail before the add), and a thread reads the counter before adding, so
//     after its own failed add it never adds again in that epoch. The
//     counter therefore stays below (T + 1) * size, T being the number of
//     threads that fail in the epoch; with size at most 2^40 (the host's
//     limit) it cannot wrap unless more than 2^24 threads each ask for about
//     the whole region.
//   * A request of 0 bytes returns NULL without setting overflow.
//
// Memory order: the add is relaxed. sa_arena_alloc hands out addresses; it
// does not publish data, so a kernel that passes an allocation to another
// thread must fence as it would for any other pointer.
//
// Streams: one arena's counter must be used by one epoch at a time. The
// host's Reset is enqueued on the arena's own stream, so kernels on that
// stream are ordered around it; a kernel on another stream that uses the
// arena must be ordered by an event, or it may see the counter reset under
// it. devarena.Set gives every stream its own arena so that streams never
// share a counter.
//
// This header is the documented source of the hand-written PTX in
// sa_arena.ptx (see sa_arena.cu for the kernels).
#ifndef SA_ARENA_CUH
#define SA_ARENA_CUH

#include <stddef.h>

struct sa_arena {
    unsigned long long base;
    unsigned long long size;
    unsigned long long offset;
    unsigned int overflow;
    unsigned int align;
};

static_assert(sizeof(struct sa_arena) == 32, "sa_arena is 32 bytes");
static_assert(offsetof(struct sa_arena, base) == 0, "base at 0");
static_assert(offsetof(struct sa_arena, size) == 8, "size at 8");
static_assert(offsetof(struct sa_arena, offset) == 16, "offset at 16");
static_assert(offsetof(struct sa_arena, overflow) == 24, "overflow at 24");
static_assert(offsetof(struct sa_arena, align) == 28, "align at 28");

// sa_arena_fail marks the epoch as overflowed. Every failing thread stores
// the same value, so a plain (volatile) store is enough and costs no atomic.
__device__ inline void sa_arena_fail(struct sa_arena* a) {
    *(volatile unsigned int*)&a->overflow = 1u;
}

// sa_arena_alloc returns n bytes from the arena, aligned to a->align, or
// NULL if they do not fit (and then sets a->overflow). The bytes are not
// initialised. Safe to call from any number of threads at once.
__device__ inline void* sa_arena_alloc(struct sa_arena* a, unsigned long long n) {
    if (n == 0) {
        return NULL;
    }
    const unsigned long long size = a->size;
    const unsigned long long mask = (unsigned long long)a->align - 1ull;
    // n <= size keeps the rounding from wrapping.
    if (n > size) {
        sa_arena_fail(a);
        return NULL;
    }
    n = (n + mask) & ~mask;
    if (n > size) {
        sa_arena_fail(a);
        return NULL;
    }
    const unsigned long long last = size - n;  // the highest offset at which n bytes fit
    // Read before adding: once this thread has seen the counter past the
    // end it adds nothing more, which bounds the counter (see above).
    if (*(volatile unsigned long long*)&a->offset > last) {
        sa_arena_fail(a);
        return NULL;
    }
    const unsigned long long old = atomicAdd(&a->offset, n);
    if (old > last) {
        sa_arena_fail(a);
        return NULL;
    }
    return (void*)(a->base + old);
}

// sa_arena_overflowed reports whether a request of the current epoch has
// failed so far.
__device__ inline bool sa_arena_overflowed(const struct sa_arena* a) {
    return *(const volatile unsigned int*)&a->overflow != 0u;
}

// sa_arena_high_water is the number of bytes of the region claimed so far
// this epoch, clamped to the region's size.
__device__ inline unsigned long long sa_arena_high_water(const struct sa_arena* a) {
    const unsigned long long off = *(const volatile unsigned long long*)&a->offset;
    return off < a->size ? off : a->size;
}

#endif  // SA_ARENA_CUH
