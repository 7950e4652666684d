/* cold_lines.c: the calls whose memory accesses scripts/cold-lines.sh
 * counts, under valgrind's lackey, to tell how many distinct cache lines
 * and pages one call of the C ABI touches: what a call costs when the
 * host's own work between calls has evicted them (in PyTorch's process,
 * every call).
 *
 * usage: cold_lines INFO [steps]
 *        cold_lines INFO -seq FILE
 *
 * Before each measured call it stores to cl_mark[kind], after it to
 * cl_mark[0]: the trace's stores to those lines (a non-PIE executable, so
 * their addresses are the ELF symbol's) bound each call's window. INFO
 * receives the load address of libstreamalloc.so, so that the trace's
 * code addresses can be named from the library's symbols, and an address
 * on the calling thread's stack. Kinds, each
 * after a warm-up of the same calls:
 *   1, 2  allocation / free of a ring of 64 live blocks of varied sizes
 *         (capi_bench's ring) on the legacy default stream (NULL);
 *   3, 4  the same ring on a created stream (the simulator's raw handle,
 *         adopted by the library as a foreign stream);
 *   5, 6  allocation / free of 1 MiB on the legacy stream, in pairs;
 *   7     an empty crossing into Go and back (sa_last_error), the part of
 *         every call that is the Go runtime's entry and exit.
 * With -seq it makes instead the calls of a recorded program, a sequence
 * file that "coldlines seq" converted from its trace (scripts/coldlines/
 * seq.go says the format), on the legacy stream, from a fresh library,
 * each call marked: kinds 8 and 9, allocation and free, which INFO names
 * ("kind K NAME" lines). Live blocks left at the end are freed unmarked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "streamalloc.h"

volatile unsigned char cl_mark[16][64] __attribute__((aligned(64)));

#define MARK(k) (cl_mark[(k)][0] = 1)

enum { RING = 64 };

typedef struct {
	void *live[RING];
	size_t sz[RING];
	uint64_t x;
	long i;
} ring_t;

/* step frees the ring's oldest block and allocates a new one of the next
 * size; marked: whether the two calls are windows (kinds a, a+1). */
static int step(ring_t *r, void *s, int marked, int a) {
	int k = (int)(r->i % RING);
	if (r->live[k] != NULL) {
		void *p = r->live[k];
		size_t n = r->sz[k];
		if (marked) {
			MARK(a + 1);
		}
		sa_torch_free(p, n, 0, s);
		if (marked) {
			MARK(0);
		}
	}
	size_t n = ring_size(&r->x);
	r->sz[k] = n;
	if (marked) {
		MARK(a);
	}
	void *p = sa_torch_alloc(n, 0, s);
	if (marked) {
		MARK(0);
	}
	r->live[k] = p;
	r->i++;
	return p == NULL ? -1 : 0;
}

static void drain(ring_t *r, void *s) {
	for (int k = 0; k < RING; k++) {
		if (r->live[k] != NULL) {
			sa_torch_free(r->live[k], r->sz[k], 0, s);
			r->live[k] = NULL;
		}
	}
}

static int rings(void *s, long steps, int a) {
	ring_t r = {.x = RING_SEED};
	for (long i = 0; i < 4 * RING; i++) {
		if (step(&r, s, 0, a) != 0) {
			return -1;
		}
	}
	for (long i = 0; i < steps; i++) {
		if (step(&r, s, 1, a) != 0) {
			return -1;
		}
	}
	drain(&r, s);
	return 0;
}

/* replay makes the calls of sequence file path, each marked. */
static int replay(const char *path, FILE *info) {
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		perror(path);
		return -1;
	}
	char name[64];
	long nalloc, ncalls;
	if (fscanf(f, "cold-lines-seq 1 %63s %ld %ld", name, &nalloc, &ncalls) != 3 || nalloc <= 0 ||
	    ncalls < nalloc) {
		fprintf(stderr, "%s: not a sequence file (cold-lines-seq 1)\n", path);
		fclose(f);
		return -1;
	}
	fprintf(info, "kind 8 alloc, %s sequence\nkind 9 free, %s sequence\n", name, name);
	fflush(info);
	void **ptr = calloc((size_t)nalloc, sizeof *ptr);
	size_t *sz = calloc((size_t)nalloc, sizeof *sz);
	if (ptr == NULL || sz == NULL) {
		fprintf(stderr, "out of memory\n");
		fclose(f);
		return -1;
	}
	long na = 0, i = 0;
	int rc = 0;
	for (; i < ncalls; i++) {
		char op;
		long long v;
		if (fscanf(f, " %c %lld", &op, &v) != 2 || v < 0) {
			break;
		}
		if (op == 'a' && na < nalloc) {
			sz[na] = (size_t)v;
			MARK(8);
			ptr[na] = sa_torch_alloc(sz[na], 0, NULL);
			MARK(0);
			if (ptr[na] == NULL && sz[na] != 0) {
				fprintf(stderr, "%s: allocation %ld of %zu bytes failed\n", path, na, sz[na]);
				rc = -1;
				break;
			}
			na++;
		} else if (op == 'f' && v < na && ptr[v] != NULL) {
			MARK(9);
			sa_torch_free(ptr[v], sz[v], 0, NULL);
			MARK(0);
			ptr[v] = NULL;
		} else if (op != 'f' || v >= na) {
			break; /* a free of a block of size 0 (NULL) makes no call */
		}
	}
	if (rc == 0 && i != ncalls) {
		fprintf(stderr, "%s: call %ld: bad line\n", path, i + 1);
		rc = -1;
	}
	for (long k = 0; k < na; k++) {
		if (ptr[k] != NULL) {
			sa_torch_free(ptr[k], sz[k], 0, NULL);
		}
	}
	free(ptr);
	free(sz);
	fclose(f);
	return rc;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: cold_lines INFO [steps] | cold_lines INFO -seq FILE\n");
		return 2;
	}
	long steps = argc > 2 ? atol(argv[2]) : 1000;
	Dl_info di;
	if (dladdr((void *)sa_torch_alloc, &di) == 0) {
		fprintf(stderr, "dladdr failed\n");
		return 1;
	}
	FILE *f = fopen(argv[1], "w");
	if (f == NULL) {
		perror(argv[1]);
		return 1;
	}
	fprintf(f, "base %p\nlib %s\nstack %p\n", di.dli_fbase, di.dli_fname, (void *)&di);
	if (argc > 3 && strcmp(argv[2], "-seq") == 0) {
		int rc = replay(argv[3], f);
		fclose(f);
		sa_stats_t st;
		if (rc != 0 || sa_stats(0, &st) != 0 || st.bad_free_count != 0 || st.error_count != 0 ||
		    st.live_allocs != 0) {
			fprintf(stderr, "replay failed, or bad frees or errors or live allocations left\n");
			return 1;
		}
		printf("cold_lines ok: %llu allocations, %llu frees\n", (unsigned long long)st.allocs,
		       (unsigned long long)st.frees);
		return 0;
	}
	fclose(f);
	void *cs = sa_sim_stream_create(0);
	if (cs == NULL) {
		fprintf(stderr, "sa_sim_stream_create failed (STREAMALLOC_CONF must name backend=sim)\n");
		return 1;
	}
	char msg[256];
	if (rings(NULL, steps, 1) != 0 || rings(cs, steps, 3) != 0) {
		sa_last_error(msg, sizeof msg);
		fprintf(stderr, "ring failed: %s\n", msg);
		return 1;
	}
	for (long i = 0; i < 256 + steps; i++) {
		int m = i >= 256;
		if (m) {
			MARK(5);
		}
		void *p = sa_torch_alloc(1 << 20, 0, NULL);
		if (m) {
			MARK(0);
		}
		if (p == NULL) {
			return 1;
		}
		if (m) {
			MARK(6);
		}
		sa_torch_free(p, 1 << 20, 0, NULL);
		if (m) {
			MARK(0);
		}
	}
	for (long i = 0; i < 256 + steps; i++) {
		int m = i >= 256;
		if (m) {
			MARK(7);
		}
		sa_last_error(NULL, 0);
		if (m) {
			MARK(0);
		}
	}
	sa_stats_t st;
	if (sa_stats(0, &st) != 0 || st.bad_free_count != 0 || st.error_count != 0 || st.live_allocs != 0) {
		fprintf(stderr, "stats: bad frees or errors or live allocations left\n");
		return 1;
	}
	if (sa_sim_stream_destroy(0, cs) != 0) {
		return 1;
	}
	printf("cold_lines ok: %llu allocations, %llu frees\n", (unsigned long long)st.allocs,
	       (unsigned long long)st.frees);
	return 0;
}
