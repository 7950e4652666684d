// The hot calls against a stand-in driver that counts its entry points.
//
// TestHotCallsDoNotAllocate proves the hot calls allocate nothing on a real
// GPU, which CI does not have. This test proves the same thing everywhere,
// CI included, against a few lines of C that play the driver: each hot call
// (MemAllocAsync, MemFreeAsync, EventRecord, StreamWaitEvent, and the
// not-ready answers of EventQuery and StreamQuery) must reach its driver
// entry point exactly once, check the current context exactly once, bind
// the context only on the first call of the thread, and allocate nothing
// in Go. The stand-in hands its counters back as the device's name, so
// that the test needs no cgo of its own.

package cuda_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
)

// hotCallsDriver is the stand-in: a context that is current per thread,
// the hot entry points, and counters. Every call made with the wrong
// context current fails with CUDA_ERROR_INVALID_CONTEXT, so a missing
// bind cannot pass.
const hotCallsDriver = `
#include <stdio.h>
#include <stddef.h>
#define CTX ((void *)0x1000)
#define PTR 0x7f0000000000ull
static __thread void *current;
static long n_get, n_set, n_alloc, n_free, n_record, n_wait, n_equery, n_squery;
static int in(long *n) { __atomic_fetch_add(n, 1, __ATOMIC_RELAXED); return current == CTX ? 0 : 201; }
int cuInit(unsigned f) { (void)f; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuCtxGetCurrent(void **c) { __atomic_fetch_add(&n_get, 1, __ATOMIC_RELAXED); *c = current; return 0; }
int cuCtxSetCurrent(void *c) { __atomic_fetch_add(&n_set, 1, __ATOMIC_RELAXED); current = c; return 0; }
int cuMemAllocAsync(unsigned long long *p, size_t n, void *s) { (void)n; (void)s; *p = PTR; return in(&n_alloc); }
int cuMemFreeAsync(unsigned long long p, void *s) { (void)s; int r = in(&n_free); return r ? r : (p == PTR ? 0 : 1); }
int cuEventRecord(void *e, void *s) { (void)e; (void)s; return in(&n_record); }
int cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return in(&n_wait); }
int cuEventQuery(void *e) { (void)e; int r = in(&n_equery); return r ? r : 600; }
int cuStreamQuery(void *s) { (void)s; int r = in(&n_squery); return r ? r : 600; }
int cuDeviceGetName(char *buf, int len, int dev) {
	(void)dev;
	snprintf(buf, len, "%ld %ld %ld %ld %ld %ld %ld %ld",
		n_get, n_set, n_alloc, n_free, n_record, n_wait, n_equery, n_squery);
	return 0;
}
`

func TestHotCallsStandIn(t *testing.T) {
	lib := fakeDriver(t, hotCallsDriver)
	runChild(t, "hotcalls", cuda.LibraryEnv+"="+lib)
}

// hotCalls is the child side of TestHotCallsStandIn; it returns what went
// wrong.
func hotCalls() []string {
	const runs = 1000
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if err := cuda.Init(); err != nil {
		return []string{fmt.Sprintf("Init with the stand-in: %v", err)}
	}
	ctx, s, s2, e := cuda.Context(0x1000), cuda.Stream(0x2000), cuda.Stream(0x3000), cuda.Event(0x4000)

	// One thread throughout, so that the context is bound exactly once.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	allocs := testing.AllocsPerRun(runs, func() {
		p, err := ctx.MemAllocAsync(1<<20, s)
		note(err)
		note(ctx.MemFreeAsync(p, s))
		note(ctx.EventRecord(e, s))
		note(ctx.StreamWaitEvent(s2, e))
		if err := ctx.EventQuery(e); !errors.Is(err, cuda.ErrNotReady) {
			note(fmt.Errorf("EventQuery: %v, want ErrNotReady", err))
		}
		if err := ctx.StreamQuery(s); !errors.Is(err, cuda.ErrNotReady) {
			note(fmt.Errorf("StreamQuery: %v, want ErrNotReady", err))
		} else if !errors.Is(err, statusNumber(cuda.ErrNotReady)) {
			// The layers above match their own status of the same number.
			note(fmt.Errorf("StreamQuery: %v does not match a status numbered %d", err, cuda.ErrNotReady))
		}
	})
	if first != nil {
		fail("hot calls: %v", first)
	}
	if allocs != 0 {
		fail("hot calls allocate %v times per round, want 0", allocs)
	}

	name, err := cuda.Device(0).Name()
	if err != nil {
		return append(bad, fmt.Sprintf("reading the stand-in's counters: %v", err))
	}
	var get, set, alloc, free, record, wait, equery, squery int
	if _, err := fmt.Sscan(name, &get, &set, &alloc, &free, &record, &wait, &equery, &squery); err != nil {
		return append(bad, fmt.Sprintf("stand-in counters %q: %v", name, err))
	}
	const calls = runs + 1 // AllocsPerRun runs f once more, to warm up
	for _, c := range []struct {
		what string
		got  int
	}{
		{"cuMemAllocAsync", alloc}, {"cuMemFreeAsync", free}, {"cuEventRecord", record},
		{"cuStreamWaitEvent", wait}, {"cuEventQuery", equery}, {"cuStreamQuery", squery},
	} {
		if c.got != calls {
			fail("%s called %d times in %d rounds, want once a round", c.what, c.got, calls)
		}
	}
	if get != 6*calls {
		fail("cuCtxGetCurrent called %d times for %d calls, want once a call", get, 6*calls)
	}
	if set != 1 {
		fail("cuCtxSetCurrent called %d times on one thread, want once", set)
	}
	return bad
}
