/* streamalloc.h: the C ABI of libstreamalloc.so, streamalloc's
 * stream-ordered pool as the device allocator of a host program.
 *
 * PyTorch (CUDAPluggableAllocator):
 *     alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *         "libstreamalloc.so", "sa_torch_alloc", "sa_torch_free")
 *     torch.cuda.memory.change_current_allocator(alloc)
 * CuPy (CFunctionAllocator): sa_cupy_malloc and sa_cupy_free, with a
 * NULL param (python/streamalloc_torch.py does both).
 *
 * Every function is safe to call from any thread at any time. None ever
 * aborts the process: failures are returned (NULL, or -1) and counted, and
 * sa_last_error tells what happened. Configure before the first
 * allocation, with sa_configure or the environment variable
 * STREAMALLOC_CONF, e.g. "pool,release_threshold=2GiB" (the chunked pool),
 * or leave both unset (or empty) for "pool,upstream=vmm,mapped_slack,
 * small_at_peak", the pool over mapped virtual memory (package pluggable's
 * Recommended; the chunked pool where the driver has no virtual memory
 * management). The grammar is package pluggable's: pool|async, backend=cuda|sim,
 * upstream=direct|async|vmm, chunk_size=, initial_size=, max_size=,
 * release_threshold=, split_big, pool=default|current|own, log=PATH, track.
 * One resource per device is made on first use.
 *
 * Streams are cudaStream_t / CUstream handles of the device's primary
 * context: NULL is the legacy default stream, (void*)2 the calling
 * thread's per-thread default stream. A free is ordered after the work
 * enqueued on its stream before it, and after the allocation's stream's
 * work if that is another stream. */
#ifndef STREAMALLOC_H
#define STREAMALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One device's figures since first use (peaks since sa_reset_peaks). */
typedef struct sa_stats {
	uint64_t reserved_bytes;      /* device memory the resource holds */
	uint64_t peak_reserved_bytes;
	uint64_t live_bytes;          /* allocations not yet freed, as requested */
	uint64_t peak_live_bytes;
	uint64_t allocs;              /* successful allocations */
	uint64_t frees;               /* successful frees */
	uint64_t live_allocs;
	uint64_t oom_count;           /* allocations refused for want of memory */
	uint64_t bad_free_count;      /* frees refused: nothing was freed */
	uint64_t error_count;         /* other failures, of every device */
	uint64_t device_allocs;       /* a pool's growths (cuMemAlloc over direct,
	                                 chunks and commits of granules over vmm) */
	uint64_t device_frees;        /* chunks it gave back (and decommits over
	                                 vmm); 0 for async */
	uint64_t address_space_bytes; /* upstream=vmm: virtual address space
	                                 reserved, no memory (reserved_bytes is
	                                 what is mapped in it); 0 otherwise */
	uint64_t vmm_fallback;        /* 1: upstream=vmm was asked for and the
	                                 driver has no virtual memory management,
	                                 so the pool is over cuMemAlloc */
} sa_stats_t;

#ifndef SA_NO_PROTOTYPES

/* PyTorch's pluggable allocator. Returns NULL when out of memory (counted)
 * or on another failure (counted; see sa_last_error). Size 0 returns NULL.
 * PyTorch passes sa_torch_free the allocation's own size and stream. */
void *sa_torch_alloc(size_t size, int device, void *stream);
void sa_torch_free(void *ptr, size_t size, int device, void *stream);

/* CuPy's CFunctionAllocator (param is unused). CuPy passes no stream: the
 * memory is allocated and freed on the legacy default stream. */
void *sa_cupy_malloc(void *param, size_t size, int device);
void sa_cupy_free(void *param, void *ptr, int device);

/* Configuration before the first allocation: 0, or -1 (a bad string, or
 * already in use). */
int sa_configure(const char *conf);

/* Fills *out with device's figures: 0, or -1 (bad device or NULL out). */
int sa_stats(int device, sa_stats_t *out);
/* Lowers device's peaks to the current values: 0 or -1. */
int sa_reset_peaks(int device);
/* Gives cached memory back to the device (device -1: all), as
 * torch.cuda.empty_cache: 0 or -1. */
int sa_release(int device);
/* Writes the live allocations as a pprof profile (needs "track"): 0 or -1. */
int sa_write_profile(const char *path);
/* Writes the buffered memory history (the "log" option): 0 or -1. */
int sa_flush(void);
/* Copies the last failure's message, NUL-terminated, into buf (at most n
 * bytes) and returns its full length (0: none). */
size_t sa_last_error(char *buf, size_t n);

/* Tests without a GPU (backend=sim): a stream made as another library
 * would make it, and its destruction. NULL / -1 on another backend. */
void *sa_sim_stream_create(int device);
int sa_sim_stream_destroy(int device, void *stream);

#endif /* SA_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif

#endif /* STREAMALLOC_H */
