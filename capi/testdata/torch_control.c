/* torch_control.c: the control of scripts/torch-bench.py, a pluggable
 * allocator written in C alone, with PyTorch's CUDAPluggableAllocator
 * signatures, over the driver's stream-ordered allocator: cuMemAllocAsync
 * and cuMemFreeAsync on the device's default pool, whose release threshold
 * it raises to the maximum so that the pool keeps what it reserved (as
 * PyTorch's own cudaMallocAsync backend does). Run in PyTorch's place of
 * libstreamalloc.so, it measures what PyTorch's pluggable path and the
 * driver's pool cost without any Go; it also times, in the host process,
 * every call it serves, and can put a Go crossing or streamalloc itself
 * behind each call, so that the cost of a call into Go is measured where
 * PyTorch makes it, with PyTorch's caches and threads around it.
 *
 * Mode, the TORCH_CONTROL environment variable, read at the first call:
 *   async     cuMemAllocAsync / cuMemFreeAsync (the default)
 *   async+go  the same, and one call into libstreamalloc.so per call
 *             (sa_last_error without a buffer: a crossing into Go and
 *             back that does nothing)
 *   sa        each call forwarded to libstreamalloc.so's sa_torch_alloc
 *             or sa_torch_free (configured by STREAMALLOC_CONF)
 * libstreamalloc.so is loaded from TORCH_CONTROL_LIB in the last two.
 * The driver is loaded with dlopen, so no CUDA toolkit is needed to build:
 *
 *   gcc -O2 -shared -fPIC -o libtorch_control.so torch_control.c -ldl
 *
 * ctl_stats reports the calls, the nanoseconds spent in them, the
 * failures, and the default pool's reserved and used high-water marks.
 *
 * Detail (ctl_detail_reset, ctl_detail_write): for each pair of stream
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

enum { MODE_ASYNC, MODE_ASYNC_GO, MODE_SA };
enum { MAX_DEVICES = 64 };
/* CUmemPool_attribute values (cuda.h). */
enum { ATTR_RELEASE_THRESHOLD = 4, ATTR_RESERVED_MEM_HIGH = 6, ATTR_USED_MEM_HIGH = 8 };

typedef struct {
	uint64_t allocs, frees, failures;
	uint64_t alloc_ns, free_ns;            /* time spent in the calls */
	uint64_t reserved_high, used_high;     /* the default pool of device 0 */
	int mode;
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
static void *(*p_sa_torch_alloc)(size_t, int, void *);
static void (*p_sa_torch_free)(void *, size_t, int, void *);
static size_t (*p_sa_last_error)(char *, size_t);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int mode = -1; /* -1: the first call failed to set up */
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[MAX_DEVICES];
static CUmemoryPool pools[MAX_DEVICES];
static uint64_t allocs, frees, failures, alloc_ns, free_ns;

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void add(uint64_t *n, uint64_t v) { __atomic_fetch_add(n, v, __ATOMIC_RELAXED); }

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

#define SYM(h, name)                                                   \
	do {                                                               \
		*(void **)(&p_##name) = dlsym(h, #name);                       \
		if (p_##name == NULL) {                                        \
			fprintf(stderr, "torch_control: no %s: %s\n", #name, dlerror()); \
			return;                                                    \
		}                                                              \
	} while (0)

static void setup(void) {
	const char *m = getenv("TORCH_CONTROL");
	int want = MODE_ASYNC;
	if (m != NULL && strcmp(m, "async+go") == 0) {
		want = MODE_ASYNC_GO;
	} else if (m != NULL && strcmp(m, "sa") == 0) {
		want = MODE_SA;
	} else if (m != NULL && *m != 0 && strcmp(m, "async") != 0) {
		fprintf(stderr, "torch_control: TORCH_CONTROL=%s: want async, async+go or sa\n", m);
		return;
	}
	if (want != MODE_ASYNC) {
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
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
		if (h == NULL) {
			fprintf(stderr, "torch_control: libcuda.so.1: %s\n", dlerror());
			return;
		}
		SYM(h, cuInit);
		SYM(h, cuDeviceGet);
		SYM(h, cuDevicePrimaryCtxRetain);
		SYM(h, cuDeviceGetDefaultMemPool);
		SYM(h, cuMemPoolSetAttribute);
		SYM(h, cuMemPoolGetAttribute);
		SYM(h, cuCtxGetCurrent);
		SYM(h, cuCtxSetCurrent);
		SYM(h, cuMemAllocAsync);
		SYM(h, cuMemFreeAsync);
		if (p_cuInit(0) != 0) {
			fprintf(stderr, "torch_control: cuInit failed\n");
			return;
		}
	}
	mode = want;
}

/* device returns device ordinal's primary context, made current on the
 * calling thread, or NULL; the first call for a device retains its
 * context and raises its default pool's release threshold. */
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
			CUmemoryPool pool;
			uint64_t max = UINT64_MAX;
			if (p_cuDeviceGet(&dev, ordinal) == 0 && p_cuDevicePrimaryCtxRetain(&ctx, dev) == 0 &&
			    p_cuCtxSetCurrent(ctx) == 0 && p_cuDeviceGetDefaultMemPool(&pool, dev) == 0 &&
			    p_cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, &max) == 0) {
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

void *ctl_alloc(size_t size, int dev, void *stream) {
	pthread_once(&once, setup);
	uint64_t t0 = now_ns();
	void *p = NULL;
	switch (mode) {
	case MODE_SA:
		p = p_sa_torch_alloc(size, dev, stream);
		break;
	case MODE_ASYNC_GO:
		p_sa_last_error(NULL, 0);
		/* fall through */
	case MODE_ASYNC:
		if (size > 0 && device(dev) != NULL) {
			CUdeviceptr d = 0;
			if (p_cuMemAllocAsync(&d, size, (CUstream)stream) == 0) {
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
	case MODE_ASYNC_GO:
		p_sa_last_error(NULL, 0);
		/* fall through */
	case MODE_ASYNC:
		ok = p != NULL && device(dev) != NULL && p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, (CUstream)stream) == 0;
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
	if (mode != MODE_SA && device(0) != NULL) {
		p_cuMemPoolGetAttribute(pools[0], ATTR_RESERVED_MEM_HIGH, &out->reserved_high);
		p_cuMemPoolGetAttribute(pools[0], ATTR_USED_MEM_HIGH, &out->used_high);
	}
	return 0;
}
