/* ring.h: the sizes of the ring of live allocations that capi_bench.c
 * times and cold_lines.c traces, one generator for both so that the
 * traced calls are the timed ones: xorshift64 from a fixed seed, sizes in
 * multiples of 512 bytes, three in four up to 128 KiB and the rest up to
 * 8 MiB. */
#ifndef STREAMALLOC_TESTDATA_RING_H
#define STREAMALLOC_TESTDATA_RING_H

#include <stddef.h>
#include <stdint.h>

/* RING_SEED is the generator's first state. */
#define RING_SEED 88172645463325252ull

/* ring_size advances the generator *x and returns the next size. */
static inline size_t ring_size(uint64_t *x) {
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	if ((*x >> 5) % 4 != 0) {
		return (size_t)(1 + (*x >> 17) % 256) * 512; /* most are small */
	}
	return (size_t)(1 + (*x >> 11) % (8 << 11)) * 512; /* up to 8 MiB */
}

#endif
