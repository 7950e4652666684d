/* torch_control_test.c: torch_control.c on the simulator, where no driver
 * exists: in mode sa its calls reach libstreamalloc.so (configured with
 * backend=sim by the test) and are counted; a bad mode refuses every
 * call. Built with torch_control.c; run by capi_test.go as
 *   torch_control_test sa|bad
 * It prints "torch_control test ok" when every check passed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
	uint64_t allocs, frees, failures;
	uint64_t alloc_ns, free_ns;
	uint64_t reserved_high, used_high;
	int mode;
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

int main(int argc, char **argv) {
	CHECK(argc == 2);
	ctl_stats_t st;
	if (strcmp(argv[1], "bad") == 0) {
		/* TORCH_CONTROL names no mode: nothing is served. */
		CHECK(ctl_alloc(1 << 20, 0, NULL) == NULL);
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
	CHECK(st.mode == 2 && st.allocs == 4 && st.frees == 4 && st.failures == 1);
	CHECK(st.alloc_ns > 0 && st.free_ns > 0);
	CHECK(ctl_stats(NULL) == -1);
	puts("torch_control test ok");
	return 0;
}
