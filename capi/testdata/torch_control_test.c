/* torch_control_test.c: torch_control.c where no driver exists: in mode
 * sa its calls reach libstreamalloc.so (configured with backend=sim by the
 * test) and are counted; in mode cache it runs over fake_cuda.c (loaded
 * through TORCH_CONTROL_DRIVER, its limit FAKE_CUDA_LIMIT set by the test)
 * (in cache+go too, crossing into libstreamalloc.so on every call) and
 * must reuse blocks on their own stream only, make no driver call
 * once warm, count bad frees, give its cached blocks back when the driver
 * is out of memory, and keep its reserved bytes equal to what the driver
 * holds for it; a bad mode, or cache+go without the library, refuses
 * every call. Built with torch_control.c;
 * run by capi_test.go as
 *   torch_control_test sa|cache|cache+go|bad
 * It prints "torch_control test ok" when every check passed. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
	uint64_t allocs, frees, failures;
	uint64_t alloc_ns, free_ns;
	uint64_t reserved_high, used_high;
	int mode;
	uint64_t device_allocs, device_frees;
	uint64_t reserved;
	uint64_t zero_allocs, null_frees;
	uint64_t go_calls;
} ctl_stats_t;

void *ctl_alloc(size_t size, int dev, void *stream);
void ctl_free(void *p, size_t size, int dev, void *stream);
int ctl_stats(ctl_stats_t *out);

#define CHECK(cond)                                                 \
	do {                                                            \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                               \
		}                                                           \
	} while (0)

enum { MODE_SA = 2, MODE_CACHE = 3, MODE_CACHE_GO = 4 };

/* Three streams, as PyTorch passes them: raw handles (never dereferenced). */
#define STREAM_A ((void *)0x1000)
#define STREAM_B ((void *)0x2000)
#define STREAM_C ((void *)0x3000)

enum { THREAD_PAIRS = 20000, GROWN = 3000 };

/* churn allocates and frees on its own stream from one thread, checking
 * that no two of its live blocks share an address. */
static void *churn(void *stream) {
	for (int i = 0; i < THREAD_PAIRS; i++) {
		size_t n = (size_t)(1 + i % 7) << 12;
		void *a = ctl_alloc(n, 0, stream);
		void *b = ctl_alloc(n, 0, stream);
		if (a == NULL || b == NULL || a == b) {
			return (void *)1;
		}
		ctl_free(b, n, 0, stream);
		ctl_free(a, n, 0, stream);
	}
	return NULL;
}

typedef void (*counts_fn)(uint64_t *, uint64_t *, uint64_t *, uint64_t *);

/* driver_holds returns the bytes the fake driver holds. */
static uint64_t driver_holds(counts_fn counts) {
	uint64_t held, a, f, r;
	counts(&held, &a, &f, &r);
	return held;
}

/* crossings checks the crossings into Go the control made: one for every
 * call in cache+go (a counted failure, a request for 0 bytes and a free of
 * NULL included), none in cache; and that cache+go, and only it, loaded
 * libstreamalloc.so (with RTLD_GLOBAL: its export is then found from
 * here), the library the crossings enter. */
static int crossings(const ctl_stats_t *st, int mode) {
	uint64_t calls = st->allocs + st->frees + st->failures + st->zero_allocs + st->null_frees;
	CHECK(st->mode == mode);
	CHECK((dlsym(RTLD_DEFAULT, "sa_last_error") != NULL) == (mode == MODE_CACHE_GO));
	CHECK(st->go_calls == (mode == MODE_CACHE_GO ? calls : 0));
	return 0;
}

/* test_cache runs the cache's checks in mode (cache or cache+go: the same
 * cache, with a crossing into Go on every call). */
static int test_cache(int mode) {
	ctl_stats_t st;
	/* An allocation takes a block from the driver, rounded to 512. */
	void *p = ctl_alloc(1000, 0, STREAM_A);
	CHECK(p != NULL && (uintptr_t)p % 512 == 0);
	CHECK(ctl_stats(&st) == 0);
	CHECK(st.mode == mode && st.allocs == 1 && st.device_allocs == 1);
	CHECK(st.reserved == 1024 && st.reserved_high == 1024 && st.used_high == 1000);
	counts_fn counts = (counts_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "fake_cuda_counts");
	CHECK(counts != NULL); /* the fake driver was loaded, with RTLD_GLOBAL */
	CHECK(driver_holds(counts) == 1024);

	/* Freed, it serves the next request of its rounded size on its
	 * stream, without the driver. */
	ctl_free(p, 1000, 0, STREAM_A);
	void *q = ctl_alloc(600, 0, STREAM_A);
	CHECK(q == p);
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 1 && st.reserved == 1024);
	/* ...and not a request of another size, nor one on another stream. */
	ctl_free(q, 600, 0, STREAM_A);
	void *other = ctl_alloc(1536, 0, STREAM_A);
	void *onb = ctl_alloc(1000, 0, STREAM_B);
	CHECK(other != NULL && other != p && onb != NULL && onb != p);
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 3 && st.reserved == 1024 + 1536 + 1024);
	/* A free that names another stream than the allocation's returns the
	 * block to the allocation's stream. */
	ctl_free(onb, 1000, 0, STREAM_A);
	void *again = ctl_alloc(1000, 0, STREAM_A);
	CHECK(again == p);
	void *onb2 = ctl_alloc(1000, 0, STREAM_B);
	CHECK(onb2 == onb);
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 3);

	/* Bad frees: a double free, an address never handed out. Each is
	 * counted and changes nothing. A request for 0 bytes is NULL and a
	 * free of NULL does nothing, each counted apart. */
	ctl_free(other, 1536, 0, STREAM_A);
	ctl_free(other, 1536, 0, STREAM_A);
	ctl_free((void *)0xdead000, 4096, 0, STREAM_A);
	CHECK(ctl_alloc(1, 5, STREAM_A) == NULL); /* no such device */
	CHECK(ctl_stats(&st) == 0 && st.failures == 3 && st.frees == 4 && st.allocs == 6);
	CHECK(ctl_alloc(0, 0, STREAM_A) == NULL);
	ctl_free(NULL, 0, 0, STREAM_A);
	CHECK(ctl_stats(&st) == 0 && st.failures == 3 && st.frees == 4 && st.allocs == 6);
	CHECK(st.zero_allocs == 1 && st.null_frees == 1);
	CHECK(crossings(&st, mode) == 0);
	CHECK(ctl_alloc(1536, 0, STREAM_A) == other); /* the double free pushed it once */
	CHECK(ctl_alloc(1536, 0, STREAM_A) != other);
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 4);

	/* Warm: churn on many sizes makes no driver call after the first
	 * round, and allocates one block per size and live request. */
	void *ring[8];
	for (int round = 0; round < 1000; round++) {
		for (int i = 0; i < 8; i++) {
			ring[i] = ctl_alloc((size_t)(i + 1) * 100000, 0, STREAM_C);
			CHECK(ring[i] != NULL);
		}
		for (int i = 0; i < 8; i++) {
			ctl_free(ring[i], (size_t)(i + 1) * 100000, 0, STREAM_C);
		}
		if (round == 0) {
			CHECK(ctl_stats(&st) == 0 && st.device_allocs == 12);
		}
	}
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 12 && st.failures == 3);

	/* Both tables grow past their first size: GROWN live blocks of
	 * distinct sizes; freed and asked for again, the same blocks come
	 * back, without the driver. */
	static void *grown[GROWN];
	for (int i = 0; i < GROWN; i++) {
		grown[i] = ctl_alloc((size_t)(i + 1) * 512, 0, STREAM_B);
		CHECK(grown[i] != NULL);
	}
	for (int i = 0; i < GROWN; i++) {
		ctl_free(grown[i], (size_t)(i + 1) * 512, 0, STREAM_B);
	}
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 12 + GROWN);
	for (int i = GROWN - 1; i >= 0; i--) {
		CHECK(ctl_alloc((size_t)(i + 1) * 512, 0, STREAM_B) == grown[i]);
	}
	for (int i = 0; i < GROWN; i++) {
		ctl_free(grown[i], (size_t)(i + 1) * 512, 0, STREAM_B);
	}
	CHECK(ctl_stats(&st) == 0 && st.device_allocs == 12 + GROWN && st.device_frees == 0);
	CHECK(st.reserved == driver_holds(counts) && st.reserved == st.reserved_high);

	/* Two threads at once, each on its own stream: 14 new blocks on A, and
	 * 7 on B, where the grown blocks hold one of each size already. */
	pthread_t t1, t2;
	void *r1, *r2;
	CHECK(pthread_create(&t1, NULL, churn, STREAM_A) == 0);
	CHECK(pthread_create(&t2, NULL, churn, STREAM_B) == 0);
	CHECK(pthread_join(t1, &r1) == 0 && pthread_join(t2, &r2) == 0);
	CHECK(r1 == NULL && r2 == NULL);
	ctl_stats_t after;
	CHECK(ctl_stats(&after) == 0 && after.failures == 3 && after.device_allocs == st.device_allocs + 21);
	CHECK(after.allocs - st.allocs == 4 * THREAD_PAIRS && after.frees - st.frees == 4 * THREAD_PAIRS);
	CHECK(crossings(&after, mode) == 0);

	/* Out of memory: the driver refuses what the cache holds plus the
	 * request (the test sets the fake's limit to 3 GiB), so the cache
	 * gives back every free block, and the request succeeds. */
	uint64_t reserved = after.reserved;
	CHECK(reserved > (uint64_t)2 << 30);
	void *big = ctl_alloc((size_t)1 << 30, 0, STREAM_A);
	CHECK(big != NULL);
	CHECK(ctl_stats(&st) == 0 && st.device_frees > GROWN && st.reserved == driver_holds(counts));
	/* Still live: p (as again), onb2, both 1536-byte blocks and big. */
	CHECK(st.reserved == 1024 + 1024 + 1536 + 1536 + ((uint64_t)1 << 30));
	/* A freed block given back is no longer the cache's to free. */
	ctl_free(grown[0], 512, 0, STREAM_B);
	CHECK(ctl_stats(&st) == 0 && st.failures == 4);
	/* The tables still find the live blocks after the removals. */
	ctl_free(again, 1000, 0, STREAM_A);
	ctl_free(onb2, 1000, 0, STREAM_B);
	CHECK(ctl_stats(&st) == 0 && st.failures == 4);
	/* More than the driver holds: NULL, counted, after a second trim. */
	CHECK(ctl_alloc((size_t)4 << 30, 0, STREAM_A) == NULL);
	CHECK(ctl_stats(&st) == 0 && st.failures == 5 && st.reserved == ((uint64_t)1 << 30) + 3072);
	CHECK(st.reserved == driver_holds(counts));
	/* big, freed, serves its size again. */
	ctl_free(big, (size_t)1 << 30, 0, STREAM_A);
	CHECK(ctl_alloc((size_t)1 << 30, 0, STREAM_A) == big);
	CHECK(ctl_stats(&after) == 0 && after.device_allocs == st.device_allocs);
	CHECK(crossings(&after, mode) == 0);
	CHECK(ctl_stats(NULL) == -1);
	return 0;
}

int main(int argc, char **argv) {
	CHECK(argc == 2);
	ctl_stats_t st;
	if (strcmp(argv[1], "cache") == 0 || strcmp(argv[1], "cache+go") == 0) {
		if (test_cache(strcmp(argv[1], "cache") == 0 ? MODE_CACHE : MODE_CACHE_GO) != 0) {
			return 1;
		}
		puts("torch_control test ok");
		return 0;
	}
	if (strcmp(argv[1], "bad") == 0) {
		/* TORCH_CONTROL names no mode, or one that crosses into Go
		 * without TORCH_CONTROL_LIB: nothing is served, and a free
		 * changes nothing. */
		CHECK(ctl_alloc(1 << 20, 0, NULL) == NULL);
		ctl_free((void *)0x1000, 1 << 20, 0, NULL);
		CHECK(ctl_stats(&st) == -1);
		puts("torch_control test ok");
		return 0;
	}
	void *ps[4];
	for (int i = 0; i < 4; i++) {
		ps[i] = ctl_alloc((size_t)(i + 1) << 20, 0, NULL);
		CHECK(ps[i] != NULL);
	}
	for (int i = 0; i < 4; i++) {
		ctl_free(ps[i], (size_t)(i + 1) << 20, 0, NULL);
	}
	CHECK(ctl_alloc(0, 0, NULL) == NULL); /* streamalloc returns NULL for 0 bytes */
	CHECK(ctl_stats(&st) == 0);
	CHECK(st.mode == MODE_SA && st.allocs == 4 && st.frees == 4 && st.failures == 1 && st.go_calls == 0);
	CHECK(st.alloc_ns > 0 && st.free_ns > 0);
	CHECK(ctl_stats(NULL) == -1);
	puts("torch_control test ok");
	return 0;
}
