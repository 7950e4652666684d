// sa_arena.cu: the kernels that streamalloc's own tests and benchmarks
// launch on a device arena. It is the documented source of sa_arena.ptx,
// which is written by hand from it (instruction for instruction, with
// sa_arena_alloc inlined into each entry) so that the repository needs no
// CUDA toolkit. To compare with what nvcc makes of it, on a machine with
// the toolkit:
//
//   nvcc -arch=sm_70 -ptx -o /tmp/sa_arena_nvcc.ptx devarena/sa_arena.cu
//
// The Go package runs both entries on the simulator as Go functions with
// the same arguments and the same algorithm (devarena/simkernels.go).

#include "sa_arena.cuh"

// sa_arena_tag: logical thread i (grid-stride over n) asks for
// 4 * (1 + i % span) bytes, stores the pointer it got (or 0) in out[i], and
// fills every 32-bit word of its allocation with the low 32 bits of i. The
// host then checks that the allocations are disjoint, inside the region,
// hold their owner's id, and that the high-water mark is the sum of the
// rounded requests. A span of 0 counts as 1.
extern "C" __global__ void sa_arena_tag(struct sa_arena* a, unsigned long long* out,
                                        unsigned long long n, unsigned int span) {
    if (span == 0) {
        span = 1;
    }
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const unsigned long long bytes = 4ull * (1ull + i % span);
        unsigned int* p = (unsigned int*)sa_arena_alloc(a, bytes);
        out[i] = (unsigned long long)p;
        if (p != NULL) {
            for (unsigned int* w = p; w < p + bytes / 4; w++) {
                *w = (unsigned int)i;
            }
        }
    }
}

// sa_arena_bump: logical thread i (grid-stride over n) asks for bytes bytes
// and, if it got them, writes the low 32 bits of i at the start (every
// allocation is at least align >= 8 bytes, so the word is inside it even
// when bytes < 4). The benchmark's kernel: one allocation per thread.
extern "C" __global__ void sa_arena_bump(struct sa_arena* a, unsigned long long n,
                                         unsigned long long bytes) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned int* p = (unsigned int*)sa_arena_alloc(a, bytes);
        if (p != NULL) {
            *p = (unsigned int)i;
        }
    }
}
