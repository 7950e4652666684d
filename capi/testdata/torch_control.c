/* torch_control.c: the control of scripts/torch-bench.py, a pluggable
 * allocator written in C alone, with PyTorch's CUDAPluggableAllocator
 * signatures. Run in PyTorch's place of libstreamalloc.so, it measures what
 * PyTorch's pluggable path costs without any Go: over the driver's
 * stream-ordered allocator (the async modes), or as an ideal caching
 * allocator that makes no driver call once warm (cache), the floor of any
 * allocator PyTorch reaches through CUDAPluggableAllocator. It also times,
 * in the host process, every call it serves, and can put a Go crossing or
 * streamalloc itself behind each call, so that the cost of a call into Go
 * is measured where PyTorch makes it, with PyTorch's caches and threads
 * around it.
 *
 * Mode, the TORCH_CONTROL environment variable, read at the first call:
 *   async     cuMemAllocAsync / cuMemFreeAsync on the device's default
 *             pool, whose release threshold it raises to the maximum so
 *             that the pool keeps what it reserved (as PyTorch's own
 *             cudaMallocAsync backend does) (the default)
 *   async+go  the same, and one call into libstreamalloc.so per call
 *             (sa_last_error without a buffer: a crossing into Go and
 *             back that does nothing)
 *   sa        each call forwarded to libstreamalloc.so's sa_torch_alloc
 *             or sa_torch_free (configured by STREAMALLOC_CONF)
 *   cache     a caching allocator in C: one free list per (device, stream,
 *             size rounded up to 512 bytes, as PyTorch rounds); see below
 *   cache+go  the same, and one call into libstreamalloc.so per call, the
 *             requests for 0 bytes and frees of NULL included (as
 *             async+go): the cache's floor with the price of entering Go
 *             that any allocator written in Go pays on every call
 * libstreamalloc.so is loaded from TORCH_CONTROL_LIB in async+go, cache+go
 * and sa.
 * The driver is loaded with dlopen (TORCH_CONTROL_DRIVER, default
 * libcuda.so.1; the tests load a fake), so no CUDA toolkit is needed to
 * build:
 *
 *   gcc -O2 -shared -fPIC -o libtorch_control.so torch_control.c -ldl
 *
 * The cache. An allocation pops a block of its exact rounded size from the
 * list of its (device, stream); on a miss it takes the block from the
 * driver with cuMemAlloc, the call PyTorch's native allocator makes on a
 * miss (the memory belongs to no stream and no pool, so nothing but this
 * file decides when it is reused, and the reserved bytes are exactly the
 * sum of the blocks). A free pushes the block onto the list of the stream
 * it was allocated on (PyTorch passes that stream to every free; a free
 * naming another is served the same way), so a block is reused only on
 * the stream it was allocated on, after the work that stream queued before
 * the free: the rule PyTorch's native allocator keeps for a block whose
 * use on other streams was not recorded. Blocks are never given
 * back, except when cuMemAlloc fails: then every cached block goes back to
 * the driver (cuMemFree) and the allocation is tried once more, as
 * PyTorch's native allocator does before it reports out of memory. One
 * mutex guards the cache (PyTorch calls from its Python thread and the
 * autograd engine's); a hit takes it, looks its class up in an
 * open-addressing table keyed by (device, stream, size), and pops; a free
 * looks the block up in an open-addressing table keyed by pointer, and
 * pushes. Descriptors, classes and the tables' slots are made only on a
 * miss (which also calls the driver), so a warm cache allocates nothing
 * and calls no driver function. Sizes are not split or merged: blocks of
 * one size serve only that size, so the cache reserves more than a
 * splitting allocator (on GPT-2's sequence lengths about 2.4 times the
 * peak of live bytes); it is a floor for time, not for memory.
 *
 * ctl_stats reports the calls, the nanoseconds spent in them, the
 * failures (an allocation that returns NULL, a free of a pointer the mode
 * does not hold), the driver's allocation and free calls, and reserved and
 * used high-water marks: the default pool's in the async modes, the
 * cache's own in cache and cache+go (reserved: the bytes of its blocks;
 * used: the requested bytes of its live allocations), and the crossings
 * into Go made (go_calls). In cache and cache+go a request for 0 bytes
 * (PyTorch makes them for empty tensors) returns NULL and a free of NULL
 * does nothing; each is counted apart (zero_allocs, null_frees), not as a
 * failure, and not timed (in cache+go its crossing is made all the same).
 *
 * Detail (ctl_detail_reset, ctl_detail_write; recorded only when
 * TORCH_CONTROL_DETAIL is set at the first call, so that a run that does
 * not ask pays no lock for it): for each pair of stream
 * handle and calling thread (the first DETAIL_SLOTS pairs seen), the
 * calls and their nanoseconds, and a histogram of every call's time in
 * powers of two, allocations and frees apart. It answers where a call's
 * mean comes from: the stream PyTorch passes (the legacy default stream
 * or another, which streamalloc asks about capture), the thread (the
 * autograd engine's or Python's), and whether the mean is the typical
 * call or a few long ones. Recording happens outside the timed window,
 * under a lock.
 * Like streamalloc, an allocation that fails returns NULL and is counted.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef unsigned long long CUdeviceptr;

enum { MODE_ASYNC, MODE_ASYNC_GO, MODE_SA, MODE_CACHE, MODE_CACHE_GO };
enum { MAX_DEVICES = 64 };
/* CUmemPool_attribute values (cuda.h). */
enum { ATTR_RELEASE_THRESHOLD = 4, ATTR_RESERVED_MEM_HIGH = 6, ATTR_USED_MEM_HIGH = 8 };

typedef struct {
	uint64_t allocs, frees, failures;
	uint64_t alloc_ns, free_ns;            /* time spent in the calls */
	uint64_t reserved_high, used_high;     /* device 0's default pool; the cache's own in cache, cache+go */
	int mode;
	uint64_t device_allocs, device_frees;  /* driver allocation and free calls made */
	uint64_t reserved;                     /* cache, cache+go: the bytes of its blocks now */
	uint64_t zero_allocs, null_frees;      /* cache, cache+go: requests for 0 bytes, frees of NULL */
	uint64_t go_calls;                     /* async+go, cache+go: the crossings into Go made */
} ctl_stats_t;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
static CUresult (*p_cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
static CUresult (*p_cuMemPoolGetAttribute)(CUmemoryPool, int, void *);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
static CUresult (*p_cuMemFreeAsync)(CUdeviceptr, CUstream);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static void *(*p_sa_torch_alloc)(size_t, int, void *);
static void (*p_sa_torch_free)(void *, size_t, int, void *);
static size_t (*p_sa_last_error)(char *, size_t);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int mode = -1; /* -1: the first call failed to set up */
static int detail_on;  /* TORCH_CONTROL_DETAIL was set */
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[MAX_DEVICES];
static CUmemoryPool pools[MAX_DEVICES];
static uint64_t allocs, frees, failures, alloc_ns, free_ns, device_allocs, device_frees, zero_allocs, null_frees, go_calls;

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void add(uint64_t *n, uint64_t v) { __atomic_fetch_add(n, v, __ATOMIC_RELAXED); }

/* cross calls into Go and back, doing nothing there, and counts it. */
static void cross(void) {
	p_sa_last_error(NULL, 0);
	add(&go_calls, 1);
}

enum { DETAIL_SLOTS = 32, HIST_BUCKETS = 40 };

/* detail is one (stream, thread) pair's calls. */
typedef struct {
	void *stream;
	pthread_t thread;
	uint64_t n[2], ns[2]; /* [0] allocations, [1] frees */
} detail_t;

static pthread_mutex_t detail_mu = PTHREAD_MUTEX_INITIALIZER;
static detail_t details[DETAIL_SLOTS];
static int ndetails;
static uint64_t detail_other[2];           /* calls of pairs past the table */
static uint64_t hist[2][HIST_BUCKETS];     /* calls by floor(log2(ns)) */

static void record(int kind, void *stream, uint64_t ns) {
	if (!detail_on) {
		return;
	}
	pthread_t self = pthread_self();
	int b = 0;
	while (b < HIST_BUCKETS - 1 && (ns >> (b + 1)) != 0) {
		b++;
	}
	pthread_mutex_lock(&detail_mu);
	hist[kind][b]++;
	int i = 0;
	for (; i < ndetails; i++) {
		if (details[i].stream == stream && pthread_equal(details[i].thread, self)) {
			break;
		}
	}
	if (i == ndetails && ndetails < DETAIL_SLOTS) {
		details[ndetails].stream = stream;
		details[ndetails].thread = self;
		ndetails++;
	}
	if (i < ndetails) {
		details[i].n[kind]++;
		details[i].ns[kind] += ns;
	} else {
		detail_other[kind]++;
	}
	pthread_mutex_unlock(&detail_mu);
}

/* ctl_detail_reset forgets the detail recorded so far (the warm-up's). */
void ctl_detail_reset(void) {
	pthread_mutex_lock(&detail_mu);
	memset(details, 0, sizeof details);
	ndetails = 0;
	memset(detail_other, 0, sizeof detail_other);
	memset(hist, 0, sizeof hist);
	pthread_mutex_unlock(&detail_mu);
}

/* ctl_detail_write writes the detail to path as text: one line per
 * (stream, thread) pair, then the histograms; 0, or -1 if it cannot. */
int ctl_detail_write(const char *path) {
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		return -1;
	}
	pthread_mutex_lock(&detail_mu);
	fprintf(f, "# stream\tthread\tallocs\talloc_ns_mean\tfrees\tfree_ns_mean\n");
	for (int i = 0; i < ndetails; i++) {
		detail_t *d = &details[i];
		fprintf(f, "pair\t%p\t%lx\t%llu\t%.0f\t%llu\t%.0f\n", d->stream, (unsigned long)d->thread,
		        (unsigned long long)d->n[0], d->n[0] ? (double)d->ns[0] / (double)d->n[0] : 0.0,
		        (unsigned long long)d->n[1], d->n[1] ? (double)d->ns[1] / (double)d->n[1] : 0.0);
	}
	fprintf(f, "other\t%llu\t%llu\n", (unsigned long long)detail_other[0], (unsigned long long)detail_other[1]);
	fprintf(f, "# histogram: bucket b holds calls of [2^b, 2^(b+1)) ns\n");
	for (int b = 0; b < HIST_BUCKETS; b++) {
		if (hist[0][b] || hist[1][b]) {
			fprintf(f, "hist\t%llu\t%llu\t%llu\n", 1ull << b, (unsigned long long)hist[0][b],
			        (unsigned long long)hist[1][b]);
		}
	}
	pthread_mutex_unlock(&detail_mu);
	return fclose(f) == 0 ? 0 : -1;
}

#define SYMBOL(h, var, name)                                           \
	do {                                                               \
		*(void **)(&p_##var) = dlsym(h, name);                         \
		if (p_##var == NULL) {                                         \
			fprintf(stderr, "torch_control: no %s: %s\n", name, dlerror()); \
			return;                                                    \
		}                                                              \
	} while (0)
#define SYM(h, name) SYMBOL(h, name, #name)

static void setup(void) {
	const char *m = getenv("TORCH_CONTROL");
	int want = MODE_ASYNC;
	if (m != NULL && strcmp(m, "async+go") == 0) {
		want = MODE_ASYNC_GO;
	} else if (m != NULL && strcmp(m, "sa") == 0) {
		want = MODE_SA;
	} else if (m != NULL && strcmp(m, "cache") == 0) {
		want = MODE_CACHE;
	} else if (m != NULL && strcmp(m, "cache+go") == 0) {
		want = MODE_CACHE_GO;
	} else if (m != NULL && *m != 0 && strcmp(m, "async") != 0) {
		fprintf(stderr, "torch_control: TORCH_CONTROL=%s: want async, async+go, sa, cache or cache+go\n", m);
		return;
	}
	if (want == MODE_ASYNC_GO || want == MODE_CACHE_GO || want == MODE_SA) {
		const char *lib = getenv("TORCH_CONTROL_LIB");
		void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_GLOBAL) : NULL;
		if (h == NULL) {
			fprintf(stderr, "torch_control: TORCH_CONTROL_LIB=%s: %s\n", lib ? lib : "(unset)", lib ? dlerror() : "");
			return;
		}
		SYM(h, sa_torch_alloc);
		SYM(h, sa_torch_free);
		SYM(h, sa_last_error);
	}
	if (want != MODE_SA) {
		const char *drv = getenv("TORCH_CONTROL_DRIVER");
		if (drv == NULL || *drv == 0) {
			drv = "libcuda.so.1";
		}
		void *h = dlopen(drv, RTLD_NOW | RTLD_GLOBAL);
		if (h == NULL) {
			fprintf(stderr, "torch_control: %s: %s\n", drv, dlerror());
			return;
		}
		SYM(h, cuInit);
		SYM(h, cuDeviceGet);
		SYM(h, cuDevicePrimaryCtxRetain);
		SYM(h, cuCtxGetCurrent);
		SYM(h, cuCtxSetCurrent);
		if (want == MODE_CACHE || want == MODE_CACHE_GO) {
			/* cuda.h maps cuMemAlloc and cuMemFree to their _v2
			 * forms, the ones with 64-bit sizes. */
			SYMBOL(h, cuMemAlloc, "cuMemAlloc_v2");
			SYMBOL(h, cuMemFree, "cuMemFree_v2");
		} else {
			SYM(h, cuDeviceGetDefaultMemPool);
			SYM(h, cuMemPoolSetAttribute);
			SYM(h, cuMemPoolGetAttribute);
			SYM(h, cuMemAllocAsync);
			SYM(h, cuMemFreeAsync);
		}
		if (p_cuInit(0) != 0) {
			fprintf(stderr, "torch_control: cuInit failed\n");
			return;
		}
	}
	detail_on = getenv("TORCH_CONTROL_DETAIL") != NULL;
	mode = want;
}

/* device returns device ordinal's primary context, made current on the
 * calling thread, or NULL; the first call for a device retains its
 * context and, in the async modes, raises its default pool's release
 * threshold. */
static CUcontext device(int ordinal) {
	if (ordinal < 0 || ordinal >= MAX_DEVICES) {
		return NULL;
	}
	CUcontext ctx = __atomic_load_n(&ctxs[ordinal], __ATOMIC_ACQUIRE);
	if (ctx == NULL) {
		pthread_mutex_lock(&dev_mu);
		ctx = ctxs[ordinal];
		if (ctx == NULL) {
			CUdevice dev;
			CUmemoryPool pool = NULL;
			uint64_t max = UINT64_MAX;
			if (p_cuDeviceGet(&dev, ordinal) == 0 && p_cuDevicePrimaryCtxRetain(&ctx, dev) == 0 &&
			    p_cuCtxSetCurrent(ctx) == 0 &&
			    (mode == MODE_CACHE || mode == MODE_CACHE_GO || (p_cuDeviceGetDefaultMemPool(&pool, dev) == 0 &&
			                            p_cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &max) == 0))) {
				pools[ordinal] = pool;
				__atomic_store_n(&ctxs[ordinal], ctx, __ATOMIC_RELEASE);
			} else {
				ctx = NULL;
			}
		}
		pthread_mutex_unlock(&dev_mu);
		if (ctx == NULL) {
			return NULL;
		}
	}
	CUcontext cur = NULL;
	if (p_cuCtxGetCurrent(&cur) != 0 || cur != ctx) {
		if (p_cuCtxSetCurrent(ctx) != 0) {
			return NULL;
		}
	}
	return ctx;
}

/* The cache (modes cache and cache+go). Every field below is guarded by
 * cache_mu.
 *
 * A block is one cuMemAlloc: its bytes, its class (the device, stream
 * and rounded size it serves), and, while free, its place on the class's
 * free list; live says whether PyTorch holds it. A class is one (device,
 * stream, size) key with the head of its free list; classes and blocks
 * are never freed (a trim moves blocks' descriptors to the spare list),
 * so pointers to them stay valid while the tables that index them grow.
 *
 * Two open-addressing tables with linear probing, capacities powers of
 * two, at most half full: by_ptr maps a block's device pointer to the
 * block (every block the cache holds, live or free), by_key a class's key
 * to the class. They grow only on a miss, before the driver is called, so
 * a failure to grow leaves the cache as it was. */
typedef struct class_s class_t;
typedef struct block_s {
	CUdeviceptr ptr;
	size_t size;      /* rounded: the bytes of the block */
	size_t requested; /* while live, the size PyTorch asked for */
	class_t *cls;
	struct block_s *next; /* the class's free list, or the spare list */
	int live;
} block_t;

struct class_s {
	int dev;
	void *stream;
	size_t size;
	block_t *free; /* the head of the free list */
};

enum { ROUND = 512, TABLE_MIN = 1024 };

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static block_t **by_ptr;   /* NULL: empty slot */
static size_t ptr_cap, ptr_n;
static class_t **by_key;
static size_t key_cap, key_n;
static block_t *spare;     /* descriptors of blocks given back by a trim */
static uint64_t cache_reserved, cache_reserved_high, cache_used, cache_used_high;

static size_t mix(uint64_t x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x;
}

static size_t ptr_hash(CUdeviceptr p) { return mix((uint64_t)p); }

static size_t key_hash(int dev, void *stream, size_t size) {
	return mix((uint64_t)(uintptr_t)stream * 0x9e3779b97f4a7c15ull ^ (uint64_t)size ^ ((uint64_t)dev << 56));
}

/* ptr_find returns the block at p, or NULL. */
static block_t *ptr_find(CUdeviceptr p) {
	if (ptr_cap == 0) {
		return NULL;
	}
	for (size_t i = ptr_hash(p) & (ptr_cap - 1);; i = (i + 1) & (ptr_cap - 1)) {
		block_t *b = by_ptr[i];
		if (b == NULL || b->ptr == p) {
			return b;
		}
	}
}

static void ptr_put(block_t **slots, size_t cap, block_t *b) {
	size_t i = ptr_hash(b->ptr) & (cap - 1);
	while (slots[i] != NULL) {
		i = (i + 1) & (cap - 1);
	}
	slots[i] = b;
}

/* ptr_reserve makes room for one more block; 0, or -1 without memory. */
static int ptr_reserve(void) {
	if (2 * (ptr_n + 1) <= ptr_cap) {
		return 0;
	}
	size_t cap = ptr_cap ? 2 * ptr_cap : TABLE_MIN;
	block_t **slots = calloc(cap, sizeof *slots);
	if (slots == NULL) {
		return -1;
	}
	for (size_t i = 0; i < ptr_cap; i++) {
		if (by_ptr[i] != NULL) {
			ptr_put(slots, cap, by_ptr[i]);
		}
	}
	free(by_ptr);
	by_ptr = slots;
	ptr_cap = cap;
	return 0;
}

/* ptr_remove takes b out of by_ptr, shifting back the blocks after it in
 * its run so that no lookup stops early (no tombstones). */
static void ptr_remove(block_t *b) {
	size_t mask = ptr_cap - 1, i = ptr_hash(b->ptr) & mask;
	while (by_ptr[i] != b) {
		i = (i + 1) & mask;
	}
	for (size_t j = (i + 1) & mask; by_ptr[j] != NULL; j = (j + 1) & mask) {
		size_t home = ptr_hash(by_ptr[j]->ptr) & mask;
		/* Move j to the hole at i if its home is not in (i, j]. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			by_ptr[i] = by_ptr[j];
			i = j;
		}
	}
	by_ptr[i] = NULL;
	ptr_n--;
}

/* key_find returns the class of (dev, stream, size), or NULL. */
static class_t *key_find(int dev, void *stream, size_t size) {
	if (key_cap == 0) {
		return NULL;
	}
	for (size_t i = key_hash(dev, stream, size) & (key_cap - 1);; i = (i + 1) & (key_cap - 1)) {
		class_t *c = by_key[i];
		if (c == NULL || (c->size == size && c->stream == stream && c->dev == dev)) {
			return c;
		}
	}
}

static void key_put(class_t **slots, size_t cap, class_t *c) {
	size_t i = key_hash(c->dev, c->stream, c->size) & (cap - 1);
	while (slots[i] != NULL) {
		i = (i + 1) & (cap - 1);
	}
	slots[i] = c;
}

/* key_add makes the class of (dev, stream, size); NULL without memory. */
static class_t *key_add(int dev, void *stream, size_t size) {
	if (2 * (key_n + 1) > key_cap) {
		size_t cap = key_cap ? 2 * key_cap : TABLE_MIN;
		class_t **slots = calloc(cap, sizeof *slots);
		if (slots == NULL) {
			return NULL;
		}
		for (size_t i = 0; i < key_cap; i++) {
			if (by_key[i] != NULL) {
				key_put(slots, cap, by_key[i]);
			}
		}
		free(by_key);
		by_key = slots;
		key_cap = cap;
	}
	class_t *c = calloc(1, sizeof *c);
	if (c == NULL) {
		return NULL;
	}
	c->dev = dev;
	c->stream = stream;
	c->size = size;
	key_put(by_key, key_cap, c);
	key_n++;
	return c;
}

/* trim gives every free block back to the driver. A block whose free
 * fails stays cached (it is still the driver's allocation). */
static void trim(void) {
	for (size_t i = 0; i < key_cap; i++) {
		class_t *c = by_key[i];
		if (c == NULL) {
			continue;
		}
		block_t **link = &c->free;
		while (*link != NULL) {
			block_t *b = *link;
			if (device(c->dev) == NULL || p_cuMemFree(b->ptr) != 0) {
				link = &b->next;
				continue;
			}
			add(&device_frees, 1);
			*link = b->next;
			ptr_remove(b);
			cache_reserved -= b->size;
			b->next = spare;
			spare = b;
		}
	}
}

static void *cache_alloc(size_t size, int dev, void *stream) {
	if (size == 0 || size > SIZE_MAX - ROUND) {
		return NULL;
	}
	size_t rounded = (size + ROUND - 1) & ~(size_t)(ROUND - 1);
	void *p = NULL;
	pthread_mutex_lock(&cache_mu);
	class_t *c = key_find(dev, stream, rounded);
	block_t *b = c != NULL ? c->free : NULL;
	if (b != NULL) {
		c->free = b->next;
	} else {
		/* A miss: every table and descriptor first, then the driver. */
		if (c == NULL) {
			c = key_add(dev, stream, rounded);
		}
		if (spare == NULL && c != NULL) {
			spare = calloc(1, sizeof *spare);
		}
		CUdeviceptr d = 0;
		if (c != NULL && spare != NULL && ptr_reserve() == 0 && device(dev) != NULL) {
			CUresult r = p_cuMemAlloc(&d, rounded);
			if (r != 0) {
				trim();
				r = p_cuMemAlloc(&d, rounded);
			}
			if (r == 0) {
				add(&device_allocs, 1);
				b = spare;
				spare = b->next;
				b->ptr = d;
				b->size = rounded;
				b->cls = c;
				ptr_put(by_ptr, ptr_cap, b);
				ptr_n++;
				cache_reserved += rounded;
				if (cache_reserved > cache_reserved_high) {
					cache_reserved_high = cache_reserved;
				}
			}
		}
	}
	if (b != NULL) {
		b->next = NULL;
		b->live = 1;
		b->requested = size;
		cache_used += size;
		if (cache_used > cache_used_high) {
			cache_used_high = cache_used;
		}
		p = (void *)(uintptr_t)b->ptr;
	}
	pthread_mutex_unlock(&cache_mu);
	return p;
}

/* cache_free returns 1, or 0 for a pointer the cache does not hold live
 * (a bad free, counted by the caller and otherwise ignored). */
static int cache_free(void *p) {
	int ok = 0;
	pthread_mutex_lock(&cache_mu);
	block_t *b = ptr_find((CUdeviceptr)(uintptr_t)p);
	if (b != NULL && b->live) {
		b->live = 0;
		cache_used -= b->requested;
		b->next = b->cls->free;
		b->cls->free = b;
		ok = 1;
	}
	pthread_mutex_unlock(&cache_mu);
	return ok;
}

void *ctl_alloc(size_t size, int dev, void *stream) {
	pthread_once(&once, setup);
	uint64_t t0 = now_ns();
	void *p = NULL;
	switch (mode) {
	case MODE_SA:
		p = p_sa_torch_alloc(size, dev, stream);
		break;
	case MODE_CACHE_GO:
		cross();
		/* fall through */
	case MODE_CACHE:
		if (size == 0) {
			add(&zero_allocs, 1);
			return NULL;
		}
		p = cache_alloc(size, dev, stream);
		break;
	case MODE_ASYNC_GO:
		cross();
		/* fall through */
	case MODE_ASYNC:
		if (size > 0 && device(dev) != NULL) {
			CUdeviceptr d = 0;
			if (p_cuMemAllocAsync(&d, size, (CUstream)stream) == 0) {
				add(&device_allocs, 1);
				p = (void *)(uintptr_t)d;
			}
		}
		break;
	}
	uint64_t ns = now_ns() - t0;
	add(&alloc_ns, ns);
	add(p != NULL ? &allocs : &failures, 1);
	record(0, stream, ns);
	return p;
}

void ctl_free(void *p, size_t size, int dev, void *stream) {
	pthread_once(&once, setup);
	uint64_t t0 = now_ns();
	int ok = 0;
	switch (mode) {
	case MODE_SA:
		p_sa_torch_free(p, size, dev, stream);
		ok = 1;
		break;
	case MODE_CACHE_GO:
		cross();
		/* fall through */
	case MODE_CACHE:
		if (p == NULL) {
			add(&null_frees, 1);
			return;
		}
		ok = cache_free(p);
		break;
	case MODE_ASYNC_GO:
		cross();
		/* fall through */
	case MODE_ASYNC:
		ok = p != NULL && device(dev) != NULL && p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, (CUstream)stream) == 0;
		if (ok) {
			add(&device_frees, 1);
		}
		break;
	}
	uint64_t ns = now_ns() - t0;
	add(&free_ns, ns);
	add(ok ? &frees : &failures, 1);
	record(1, stream, ns);
}

/* ctl_stats fills out; it returns 0, or -1 before a successful setup. */
int ctl_stats(ctl_stats_t *out) {
	pthread_once(&once, setup);
	if (out == NULL || mode < 0) {
		return -1;
	}
	memset(out, 0, sizeof *out);
	out->mode = mode;
	out->allocs = __atomic_load_n(&allocs, __ATOMIC_RELAXED);
	out->frees = __atomic_load_n(&frees, __ATOMIC_RELAXED);
	out->failures = __atomic_load_n(&failures, __ATOMIC_RELAXED);
	out->alloc_ns = __atomic_load_n(&alloc_ns, __ATOMIC_RELAXED);
	out->free_ns = __atomic_load_n(&free_ns, __ATOMIC_RELAXED);
	out->device_allocs = __atomic_load_n(&device_allocs, __ATOMIC_RELAXED);
	out->device_frees = __atomic_load_n(&device_frees, __ATOMIC_RELAXED);
	out->zero_allocs = __atomic_load_n(&zero_allocs, __ATOMIC_RELAXED);
	out->null_frees = __atomic_load_n(&null_frees, __ATOMIC_RELAXED);
	out->go_calls = __atomic_load_n(&go_calls, __ATOMIC_RELAXED);
	if (mode == MODE_CACHE || mode == MODE_CACHE_GO) {
		pthread_mutex_lock(&cache_mu);
		out->reserved = cache_reserved;
		out->reserved_high = cache_reserved_high;
		out->used_high = cache_used_high;
		pthread_mutex_unlock(&cache_mu);
	} else if (mode != MODE_SA && device(0) != NULL) {
		p_cuMemPoolGetAttribute(pools[0], ATTR_RESERVED_MEM_HIGH, &out->reserved_high);
		p_cuMemPoolGetAttribute(pools[0], ATTR_USED_MEM_HIGH, &out->used_high);
	}
	return 0;
}
