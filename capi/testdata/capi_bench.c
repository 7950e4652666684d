/* capi_bench.c: the cost of an allocate/free pair through the C ABI, as a
 * host calls it (C into Go and back, twice), on whatever backend
 * STREAMALLOC_CONF names (the GPU by default). scripts/capi-bench.sh
 * builds and runs it.
 *
 * usage: capi_bench [pairs] [threads]
 * Prints one line per case: the case, pairs, nanoseconds per pair.
 *
 * Besides the pair of one size on the legacy default stream, it times the
 * pair on the calling thread's per-thread default stream and, when
 * CAPI_BENCH_CUDA is set (a GPU: the library adopts the handle, which the
 * simulator would refuse), on a stream made with cuStreamCreate: both are
 * adopted streams that the library asks the driver about capture, where
 * the legacy stream needs no question. And a ring of live allocations of
 * varied sizes, as a training step makes them, on the legacy stream: the
 * pool's path beyond its quick cache; that ring with each call timed, hot,
 * after evicting the caches, from two threads in turn, and after idle time
 * in the host (where the Go runtime's state between calls shows); and an
 * empty crossing into Go, hot, evicted and after idle time. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ring.h"
#include "streamalloc.h"

static double now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static long pairs = 1000000;

/* pairs alloc/free pairs of size bytes on stream s; ns per pair, or -1. */
static double run(size_t size, void *s, long n) {
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		void *p = sa_torch_alloc(size, 0, s);
		if (p == NULL) {
			return -1;
		}
		sa_torch_free(p, size, 0, s);
	}
	return (now_ns() - t0) / (double)n;
}

/* ring times n steps of a ring of 64 live allocations whose sizes (512 B
 * to 8 MiB, multiples of 512) come from a fixed generator: each step
 * frees the oldest and allocates a new one; ns per pair, or -1. */
static double ring(void *s, long n) {
	enum { RING = 64 };
	void *live[RING] = {0};
	size_t sz[RING] = {0};
	uint64_t x = RING_SEED;
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		int k = (int)(i % RING);
		if (live[k] != NULL) {
			sa_torch_free(live[k], sz[k], 0, s);
		}
		sz[k] = ring_size(&x);
		live[k] = sa_torch_alloc(sz[k], 0, s);
		if (live[k] == NULL) {
			return -1;
		}
	}
	double ns = (now_ns() - t0) / (double)n;
	for (int k = 0; k < RING; k++) {
		if (live[k] != NULL) {
			sa_torch_free(live[k], sz[k], 0, s);
		}
	}
	return ns;
}

/* A ring whose calls are timed one by one, with work between them that a
 * host would do: evict, touching EVICT bytes (the caches' lines the call
 * needs are then gone, as after a kernel launch's host work), or handing
 * the ring to the other of two threads every TURN steps (the lines then
 * live in another core's cache, as between PyTorch's Python thread and
 * its autograd thread). Reports ns per allocation and per free. */
enum { CRING = 64, EVICT = 8 << 20, TURN = 8 };

typedef struct {
	void *live[CRING];
	size_t sz[CRING];
	uint64_t x;
	long i, n;
	double alloc_ns, free_ns;
	int evict;
	double idle_ns; /* spinning on the clock before each call */
	int turn;       /* whose turn, for two threads */
} cring_t;

static volatile unsigned char *evict_buf;

static void evict_caches(void) {
	for (size_t i = 0; i < EVICT; i += 64) {
		evict_buf[i]++;
	}
}

/* spin waits ns on the clock, touching no memory: time in the host between
 * calls, as PyTorch spends it launching kernels. */
static void spin(double ns) {
	for (double t = now_ns(); now_ns() - t < ns;) {
	}
}

/* cstep runs one timed ring step; 0, or -1 if the allocation failed. */
static int cstep(cring_t *r) {
	int k = (int)(r->i % CRING);
	double t0;
	if (r->live[k] != NULL) {
		if (r->evict) {
			evict_caches();
		}
		spin(r->idle_ns);
		t0 = now_ns();
		sa_torch_free(r->live[k], r->sz[k], 0, NULL);
		r->free_ns += now_ns() - t0;
	}
	r->sz[k] = ring_size(&r->x);
	if (r->evict) {
		evict_caches();
	}
	spin(r->idle_ns);
	t0 = now_ns();
	r->live[k] = sa_torch_alloc(r->sz[k], 0, NULL);
	r->alloc_ns += now_ns() - t0;
	r->i++;
	return r->live[k] == NULL ? -1 : 0;
}

static void cring_drain(cring_t *r) {
	for (int k = 0; k < CRING; k++) {
		if (r->live[k] != NULL) {
			sa_torch_free(r->live[k], r->sz[k], 0, NULL);
			r->live[k] = NULL;
		}
	}
}

typedef struct {
	cring_t *r;
	int me;
	int failed;
} turn_arg_t;

static void *turns(void *arg) {
	turn_arg_t *a = arg;
	cring_t *r = a->r;
	for (;;) {
		while (__atomic_load_n(&r->turn, __ATOMIC_ACQUIRE) != a->me) {
		}
		if (r->i >= r->n) {
			__atomic_store_n(&r->turn, 1 - a->me, __ATOMIC_RELEASE);
			return NULL;
		}
		for (int j = 0; j < TURN && r->i < r->n; j++) {
			if (cstep(r) != 0) {
				a->failed = 1;
				r->n = r->i;
			}
		}
		__atomic_store_n(&r->turn, 1 - a->me, __ATOMIC_RELEASE);
	}
}

/* cring times n steps: on one thread, evicting the caches before each
 * call if evict and spinning idle_ns before each, or on two threads taking
 * turns if two. */
static int cring_idle(long n, int evict, int two, double idle_ns, const char *name) {
	cring_t r = {.x = RING_SEED, .n = n, .evict = evict, .idle_ns = idle_ns};
	if (two) {
		pthread_t th[2];
		turn_arg_t a[2] = {{&r, 0, 0}, {&r, 1, 0}};
		for (int t = 0; t < 2; t++) {
			pthread_create(&th[t], NULL, turns, &a[t]);
		}
		for (int t = 0; t < 2; t++) {
			pthread_join(th[t], NULL);
		}
		if (a[0].failed || a[1].failed) {
			return -1;
		}
	} else {
		for (long i = 0; i < n; i++) {
			if (cstep(&r) != 0) {
				return -1;
			}
		}
	}
	long frees = n > CRING ? n - CRING : 0;
	printf("%s\t%ld\talloc %.1f\tfree %.1f\n", name, n, r.alloc_ns / (double)n, frees ? r.free_ns / (double)frees : 0.0);
	cring_drain(&r);
	return 0;
}

static int cring(long n, int evict, int two, const char *name) {
	return cring_idle(n, evict, two, 0, name);
}

/* crossing times n calls into Go and back that do nothing (sa_last_error
 * without a buffer), evicting the caches before each if evict: the part
 * of a cold call that is the crossing and the Go runtime, not the pool. */
static void crossing_idle(long n, int evict, double idle_ns, const char *name);

static void crossing(long n, int evict, const char *name) {
	crossing_idle(n, evict, 0, name);
}

/* crossing_idle is crossing with idle_ns of spinning on the clock, which
 * touches no memory, before each call: whether time alone between calls
 * (the Go runtime's state, not the caches) makes the crossing dearer. */
static void crossing_idle(long n, int evict, double idle_ns, const char *name) {
	double ns = 0;
	for (long i = 0; i < n; i++) {
		if (evict) {
			evict_caches();
		}
		spin(idle_ns);
		double t0 = now_ns();
		sa_last_error(NULL, 0);
		ns += now_ns() - t0;
	}
	printf("%s\t%ld\t%.1f\n", name, n, ns / (double)n);
}

/* created returns a stream made with cuStreamCreate in device 0's primary
 * context (made current on this thread), or NULL. */
static void *created(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		return NULL;
	}
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
	int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
	int (*set)(void *) = (int (*)(void *))dlsym(h, "cuCtxSetCurrent");
	int (*mk)(void **, unsigned) = (int (*)(void **, unsigned))dlsym(h, "cuStreamCreate");
	int dev;
	void *ctx, *s = NULL;
	if (init == NULL || get == NULL || retain == NULL || set == NULL || mk == NULL || init(0) != 0 ||
	    get(&dev, 0) != 0 || retain(&ctx, dev) != 0 || set(ctx) != 0 || mk(&s, 1 /* non-blocking */) != 0) {
		return NULL;
	}
	return s;
}

static void *worker(void *arg) {
	double *ns = arg;
	run(1 << 20, (void *)2, 1000); /* warm this thread (its first callbacks) */
	*ns = run(1 << 20, (void *)2, pairs);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc > 1) {
		pairs = atol(argv[1]);
	}
	int threads = argc > 2 ? atoi(argv[2]) : 4;
	if (pairs <= 0 || threads <= 0 || threads > 64) {
		fprintf(stderr, "usage: capi_bench [pairs] [threads]\n");
		return 2;
	}
	char msg[256];
	double t0 = now_ns();
	void *p = sa_torch_alloc(1 << 20, 0, NULL);
	double first = now_ns() - t0;
	if (p == NULL) {
		sa_last_error(msg, sizeof msg);
		fprintf(stderr, "first allocation failed: %s\n", msg);
		return 1;
	}
	sa_torch_free(p, 1 << 20, 0, NULL);
	printf("first-call(open-device)\t1\t%.0f\n", first);
	run(1 << 20, NULL, 10000);
	size_t sizes[] = {512, 1 << 20, 64 << 20};
	const char *names[] = {"pair-512B", "pair-1MiB", "pair-64MiB"};
	for (int i = 0; i < 3; i++) {
		double ns = run(sizes[i], NULL, pairs);
		if (ns < 0) {
			sa_last_error(msg, sizeof msg);
			fprintf(stderr, "%s failed: %s\n", names[i], msg);
			return 1;
		}
		printf("%s\t%ld\t%.1f\n", names[i], pairs, ns);
	}
	/* Adopted streams, which the library asks about capture. */
	run(1 << 20, (void *)2, 10000);
	printf("pair-1MiB-per-thread-stream\t%ld\t%.1f\n", pairs, run(1 << 20, (void *)2, pairs));
	if (getenv("CAPI_BENCH_CUDA") != NULL) {
		void *cs = created();
		if (cs == NULL) {
			fprintf(stderr, "cuStreamCreate failed\n");
			return 1;
		}
		run(1 << 20, cs, 10000);
		printf("pair-1MiB-created-stream\t%ld\t%.1f\n", pairs, run(1 << 20, cs, pairs));
		ring(cs, 10000);
		printf("ring-varied-created-stream\t%ld\t%.1f\n", pairs, ring(cs, pairs));
	}
	/* Varied sizes, several live, as a training step: beyond the quick cache. */
	ring(NULL, 10000);
	double rn = ring(NULL, pairs);
	if (rn < 0) {
		sa_last_error(msg, sizeof msg);
		fprintf(stderr, "ring failed: %s\n", msg);
		return 1;
	}
	printf("ring-varied-legacy\t%ld\t%.1f\n", pairs, rn);
	/* The same ring, each call timed: hot, after evicting the caches,
	 * handed between two threads, and after time spent in the host. */
	evict_buf = calloc(EVICT, 1);
	if (evict_buf == NULL || cring(pairs, 0, 0, "ring-timed-hot") != 0 ||
	    cring(pairs / 40, 1, 0, "ring-timed-evicted") != 0 || cring(pairs, 0, 1, "ring-timed-two-threads") != 0 ||
	    cring_idle(pairs / 20, 0, 0, 20e3, "ring-timed-after-20us-idle") != 0 ||
	    cring_idle(pairs / 100, 0, 0, 200e3, "ring-timed-after-200us-idle") != 0 ||
	    cring_idle(pairs / 800, 0, 0, 2e6, "ring-timed-after-2ms-idle") != 0) {
		sa_last_error(msg, sizeof msg);
		fprintf(stderr, "timed ring failed: %s\n", msg);
		return 1;
	}
	crossing(pairs, 0, "crossing-hot");
	crossing(pairs / 40, 1, "crossing-evicted");
	crossing_idle(pairs / 40, 0, 10e3, "crossing-after-10us-idle");
	crossing_idle(pairs / 40, 0, 50e3, "crossing-after-50us-idle");
	crossing_idle(pairs / 100, 0, 200e3, "crossing-after-200us-idle");
	crossing_idle(pairs / 200, 0, 2e6, "crossing-after-2ms-idle");
	/* The CuPy interface: no stream, a size table. */
	t0 = now_ns();
	for (long i = 0; i < pairs; i++) {
		void *c = sa_cupy_malloc(NULL, 1 << 20, 0);
		if (c == NULL) {
			return 1;
		}
		sa_cupy_free(NULL, c, 0);
	}
	printf("cupy-pair-1MiB\t%ld\t%.1f\n", pairs, (now_ns() - t0) / (double)pairs);
	pthread_t th[64];
	double ns[64];
	for (int i = 0; i < threads; i++) {
		pthread_create(&th[i], NULL, worker, &ns[i]);
	}
	double sum = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		sum += ns[i];
	}
	printf("pair-1MiB-%d-threads-per-thread-stream\t%ld\t%.1f\n", threads, pairs, sum / threads);
	sa_stats_t st;
	if (sa_stats(0, &st) == 0) {
		printf("stats\tallocs=%llu frees=%llu reserved=%llu peak_reserved=%llu bad_frees=%llu errors=%llu\n",
		       (unsigned long long)st.allocs, (unsigned long long)st.frees,
		       (unsigned long long)st.reserved_bytes, (unsigned long long)st.peak_reserved_bytes,
		       (unsigned long long)st.bad_free_count, (unsigned long long)st.error_count);
	}
	return 0;
}
