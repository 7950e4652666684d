/* fake_cuda.c: the few driver entry points torch_control.c's cache mode
 * calls, for the tests, where no driver exists; built as a shared library
 * and loaded by torch_control.c through TORCH_CONTROL_DRIVER:
 *
 *   gcc -O2 -shared -fPIC -o libfakecuda.so fake_cuda.c -lpthread
 *
 * Device memory is addresses only: cuMemAlloc_v2 hands out 512-aligned
 * addresses from a counter (nothing is ever read or written there), and
 * keeps each live allocation in a table so that cuMemFree_v2 can refuse an
 * address it did not hand out. It holds at most FAKE_CUDA_LIMIT bytes
 * (read by cuInit; default 1 GiB) and answers out of memory past that, so
 * a test can make the cache give its blocks back. One device (ordinal 0),
 * one context, current per thread: cuMemAlloc_v2 and cuMemFree_v2 refuse
 * to run on a thread where no context is current, as the driver does.
 * fake_cuda_counts reports what was asked of it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

/* CUresult values (cuda.h). */
enum {
	SUCCESS = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	INVALID_DEVICE = 101,
	INVALID_CONTEXT = 201,
};

typedef struct {
	CUdeviceptr ptr;
	size_t size;
} fake_alloc_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc_t *live;
static size_t nlive, caplive;
static uint64_t limit = 1ull << 30, held, allocs, frees, refused;
static CUdeviceptr next = 1ull << 40;
static char the_context;
static __thread void *current;

CUresult cuInit(unsigned flags) {
	const char *s = getenv("FAKE_CUDA_LIMIT");
	if (s != NULL) {
		limit = strtoull(s, NULL, 10);
	}
	return flags == 0 ? SUCCESS : INVALID_VALUE;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
	if (ordinal != 0) {
		return INVALID_DEVICE;
	}
	*dev = 0;
	return SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
	if (dev != 0) {
		return INVALID_DEVICE;
	}
	*ctx = &the_context;
	return SUCCESS;
}

CUresult cuCtxGetCurrent(void **ctx) {
	*ctx = current;
	return SUCCESS;
}

CUresult cuCtxSetCurrent(void *ctx) {
	if (ctx != NULL && ctx != &the_context) {
		return INVALID_CONTEXT;
	}
	current = ctx;
	return SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
	if (current == NULL) {
		return INVALID_CONTEXT;
	}
	if (size == 0) {
		return INVALID_VALUE;
	}
	size_t rounded = (size + 511) & ~(size_t)511;
	CUresult r = SUCCESS;
	pthread_mutex_lock(&mu);
	if (rounded > limit - held) {
		refused++;
		r = OUT_OF_MEMORY;
	} else if (nlive == caplive) {
		size_t cap = caplive ? 2 * caplive : 1024;
		fake_alloc_t *grown = realloc(live, cap * sizeof *grown);
		if (grown == NULL) {
			r = OUT_OF_MEMORY;
		} else {
			live = grown;
			caplive = cap;
		}
	}
	if (r == SUCCESS) {
		*p = next;
		next += rounded;
		live[nlive++] = (fake_alloc_t){*p, rounded};
		held += rounded;
		allocs++;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	if (current == NULL) {
		return INVALID_CONTEXT;
	}
	CUresult r = INVALID_VALUE;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nlive; i++) {
		if (live[i].ptr == p) {
			held -= live[i].size;
			live[i] = live[--nlive];
			frees++;
			r = SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}

/* fake_cuda_counts reports the bytes held, the successful allocations and
 * frees, and the allocations refused for the limit. */
void fake_cuda_counts(uint64_t *held_out, uint64_t *allocs_out, uint64_t *frees_out, uint64_t *refused_out) {
	pthread_mutex_lock(&mu);
	*held_out = held;
	*allocs_out = allocs;
	*frees_out = frees;
	*refused_out = refused;
	pthread_mutex_unlock(&mu);
}
