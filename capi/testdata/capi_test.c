/* capi_test.c: the C ABI on the simulated GPU, as a host program sees it.
 * Built and run by capi_test.go (go test ./capi); prints "capi test ok" and
 * exits 0, or names the first failed check and exits 1. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streamalloc.h"

static int failures;

#define CHECK(cond, ...)                                            \
	do {                                                            \
		if (!(cond)) {                                              \
			fprintf(stderr, "capi_test.c:%d: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			failures++;                                             \
		}                                                           \
	} while (0)

static sa_stats_t stats(void) {
	sa_stats_t st;
	memset(&st, 0xff, sizeof st);
	int rc = sa_stats(0, &st);
	CHECK(rc == 0, "sa_stats rc %d", rc);
	return st;
}

static const char *last_error(void) {
	static char buf[512];
	sa_last_error(buf, sizeof buf);
	return buf;
}

enum { THREADS = 4, ITERS = 2000 };

/* Each thread allocates and frees on its own raw stream. */
static void *worker(void *arg) {
	void *s = arg;
	for (int i = 0; i < ITERS; i++) {
		size_t n = 256 * (size_t)(1 + i % 64);
		void *p = sa_torch_alloc(n, 0, s);
		if (p == NULL) {
			fprintf(stderr, "worker: alloc %zu: %s\n", n, last_error());
			return (void *)1;
		}
		sa_torch_free(p, n, 0, s);
	}
	return NULL;
}

/* The optional argument is a configuration item added to the pool's
 * (upstream=vmm: the pool over mapped virtual memory). */
int main(int argc, char **argv) {
	const char *extra = argc > 1 ? argv[1] : NULL;
	int vmm = extra != NULL && strcmp(extra, "upstream=vmm") == 0;
	char conf[256];
	snprintf(conf, sizeof conf, "pool,backend=sim,sim_capacity=256MiB%s%s", extra ? "," : "", extra ? extra : "");
	CHECK(sa_configure("pool,bogus") == -1, "a bad configuration was accepted");
	CHECK(strstr(last_error(), "bad configuration") != NULL, "last error %s", last_error());
	CHECK(sa_configure("pool,upstream=vmmm") == -1, "a bad upstream was accepted");
	CHECK(strstr(last_error(), "want one of direct, async, vmm") != NULL, "last error %s", last_error());
	CHECK(sa_configure(conf) == 0, "%s: %s", conf, last_error());

	/* Raw streams of another library, the legacy and per-thread streams. */
	void *s1 = sa_sim_stream_create(0), *s2 = sa_sim_stream_create(0);
	CHECK(s1 != NULL && s2 != NULL && s1 != s2, "raw streams %p %p: %s", s1, s2, last_error());
	void *streams[] = {NULL, s1, s2, (void *)2};
	void *ptrs[4];
	for (int i = 0; i < 4; i++) {
		ptrs[i] = sa_torch_alloc((size_t)(i + 1) << 20, 0, streams[i]);
		CHECK(ptrs[i] != NULL && ((uintptr_t)ptrs[i] & 255) == 0, "alloc on stream %p: %p %s", streams[i], ptrs[i], last_error());
	}
	sa_stats_t st = stats();
	CHECK(st.live_bytes == 10u << 20 && st.peak_live_bytes == 10u << 20, "live %llu peak %llu",
	      (unsigned long long)st.live_bytes, (unsigned long long)st.peak_live_bytes);
	CHECK(st.allocs == 4 && st.live_allocs == 4 && st.frees == 0, "counts %llu %llu %llu",
	      (unsigned long long)st.allocs, (unsigned long long)st.live_allocs, (unsigned long long)st.frees);
	CHECK(st.reserved_bytes >= st.live_bytes && st.peak_reserved_bytes >= st.reserved_bytes, "reserved %llu peak %llu",
	      (unsigned long long)st.reserved_bytes, (unsigned long long)st.peak_reserved_bytes);
	if (vmm) {
		/* Reserved is the memory mapped, in whole 2 MiB granules of the
		 * simulator; the address space around it holds none. */
		CHECK(st.vmm_fallback == 0 && st.reserved_bytes % (2u << 20) == 0 && st.address_space_bytes > st.reserved_bytes,
		      "vmm: fallback %llu reserved %llu address space %llu", (unsigned long long)st.vmm_fallback,
		      (unsigned long long)st.reserved_bytes, (unsigned long long)st.address_space_bytes);
	} else {
		CHECK(st.vmm_fallback == 0 && st.address_space_bytes == 0, "direct: fallback %llu address space %llu",
		      (unsigned long long)st.vmm_fallback, (unsigned long long)st.address_space_bytes);
	}
	CHECK(sa_configure("async,backend=sim") == -1, "configured after first use");

	/* Freed on their own stream (as PyTorch does) and across streams. */
	sa_torch_free(ptrs[0], 1 << 20, 0, NULL);
	sa_torch_free(ptrs[1], 2 << 20, 0, s2);
	sa_torch_free(ptrs[2], 3 << 20, 0, s1);
	sa_torch_free(ptrs[3], 4 << 20, 0, (void *)2);
	st = stats();
	CHECK(st.live_bytes == 0 && st.frees == 4 && st.live_allocs == 0 && st.bad_free_count == 0,
	      "after frees: live %llu frees %llu bad %llu", (unsigned long long)st.live_bytes,
	      (unsigned long long)st.frees, (unsigned long long)st.bad_free_count);

	/* Bad frees: counted, reported, nothing freed, the process goes on. */
	void *p = sa_torch_alloc(4096, 0, s1);
	CHECK(p != NULL, "%s", last_error());
	sa_torch_free((char *)p + 256, 4096, 0, s1);   /* interior pointer */
	sa_torch_free((void *)0xdead000, 64, 0, s1);  /* never allocated */
	sa_torch_free(p, 8192, 0, s1);                /* wrong size */
	sa_torch_free(p, 4096, 0, (void *)0x5151);    /* a stream that does not exist */
	st = stats();
	CHECK(st.bad_free_count == 4 && st.live_bytes == 4096, "bad frees %llu live %llu",
	      (unsigned long long)st.bad_free_count, (unsigned long long)st.live_bytes);
	CHECK(strlen(last_error()) > 0, "no message for a bad free");
	sa_torch_free(p, 4096, 0, s1);
	sa_torch_free(p, 4096, 0, s1); /* double free */
	st = stats();
	CHECK(st.bad_free_count == 5 && st.live_bytes == 0 && st.frees == 5, "after double free: bad %llu live %llu frees %llu",
	      (unsigned long long)st.bad_free_count, (unsigned long long)st.live_bytes, (unsigned long long)st.frees);

	/* Out of memory: NULL, counted, nothing else changes. */
	CHECK(sa_torch_alloc((size_t)1 << 30, 0, NULL) == NULL, "1 GiB on a 256 MiB device");
	CHECK(sa_torch_alloc((size_t)-1, 0, NULL) == NULL, "SIZE_MAX bytes");
	st = stats();
	CHECK(st.oom_count == 2 && st.allocs == 5, "oom %llu allocs %llu", (unsigned long long)st.oom_count,
	      (unsigned long long)st.allocs);
	CHECK(sa_torch_alloc(0, 0, NULL) == NULL, "zero bytes");
	CHECK(sa_torch_alloc(256, 7, NULL) == NULL, "a device that does not exist");

	/* CuPy's interface: no stream, no size on free. */
	void *c = sa_cupy_malloc(NULL, 12345, 0);
	CHECK(c != NULL, "%s", last_error());
	sa_cupy_free(NULL, c, 0);
	sa_cupy_free(NULL, c, 0); /* double free */
	st = stats();
	CHECK(st.bad_free_count == 6 && st.live_bytes == 0, "cupy: bad %llu live %llu",
	      (unsigned long long)st.bad_free_count, (unsigned long long)st.live_bytes);

	/* Threads, each on its own raw stream. */
	pthread_t th[THREADS];
	void *ts[THREADS];
	for (int i = 0; i < THREADS; i++) {
		ts[i] = i == 0 ? (void *)2 : sa_sim_stream_create(0);
		pthread_create(&th[i], NULL, worker, ts[i]);
	}
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(th[i], &r);
		CHECK(r == NULL, "worker %d failed", i);
	}
	st = stats();
	CHECK(st.allocs == 6 + THREADS * ITERS && st.frees == st.allocs && st.live_bytes == 0,
	      "after threads: allocs %llu frees %llu live %llu", (unsigned long long)st.allocs,
	      (unsigned long long)st.frees, (unsigned long long)st.live_bytes);

	/* Bad arguments of the other calls. */
	CHECK(sa_stats(0, NULL) == -1, "sa_stats(NULL)");
	sa_stats_t junk;
	CHECK(sa_stats(99, &junk) == -1, "sa_stats of device 99");
	CHECK(sa_write_profile("/nonexistent/x") == -1, "profile without track");
	CHECK(sa_write_profile(NULL) == -1, "profile to NULL");
	CHECK(sa_flush() == 0, "flush without a history");
	CHECK(sa_last_error(NULL, 0) > 0, "length of the last error");

	/* empty_cache: nothing live, nothing kept. */
	CHECK(sa_release(-1) == 0, "%s", last_error());
	st = stats();
	CHECK(st.reserved_bytes == 0, "after release: %llu reserved", (unsigned long long)st.reserved_bytes);
	CHECK(st.device_allocs > 0 && (vmm ? st.device_frees > 0 : st.device_frees == st.device_allocs), "device allocs %llu frees %llu",
	      (unsigned long long)st.device_allocs, (unsigned long long)st.device_frees);
	CHECK(sa_reset_peaks(0) == 0, "reset peaks");
	st = stats();
	CHECK(st.peak_live_bytes == 0 && st.peak_reserved_bytes == 0, "peaks after reset: %llu %llu",
	      (unsigned long long)st.peak_live_bytes, (unsigned long long)st.peak_reserved_bytes);

	CHECK(sa_sim_stream_destroy(0, s1) == 0 && sa_sim_stream_destroy(0, s2) == 0, "%s", last_error());
	CHECK(sa_sim_stream_destroy(0, s1) == -1, "destroyed twice");
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("capi test ok\n");
	return 0;
}
