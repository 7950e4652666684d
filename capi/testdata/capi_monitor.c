/* capi_monitor.c: whether the Go runtime inside libstreamalloc.so keeps its
 * monitor (sysmon) awake while the host process idles, as
 * scripts/build-capi.sh links it to (see the comment there: a monitor
 * asleep makes the next call into Go wake it, microseconds a call).
 *
 * It makes one call into the library, which starts the Go runtime, lets
 * the runtime settle for 200 ms, then sleeps 500 ms in C and prints how
 * many voluntary context switches the process's threads made meanwhile
 * (the sum over the status files of /proc/self/task). An awake monitor ticks every
 * 10 ms once idle, about 50 switches; a monitor in deep sleep waits for
 * the next timer or a call, about none. Linux only.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "streamalloc.h"

static long switches(void) {
	DIR *d = opendir("/proc/self/task");
	if (d == NULL) {
		perror("/proc/self/task");
		exit(2);
	}
	long sum = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[288], line[256];
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* a thread that ended meanwhile */
		while (fgets(line, sizeof line, f) != NULL)
			if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0)
				sum += atol(line + 24);
		fclose(f);
	}
	closedir(d);
	return sum;
}

static void nap(long ms) {
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&t, &t) != 0) {
	}
}

int main(void) {
	char buf[8];
	sa_last_error(buf, sizeof buf);
	nap(200);
	long before = switches();
	nap(500);
	printf("switches %ld\n", switches() - before);
	return 0;
}
