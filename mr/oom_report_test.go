package mr_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// TestOutOfMemoryObserver: the observer is called once per request
// refused for good, after the retries, with the error Allocate returns
// and the state of the chain below; not for a request a retry saved, nor
// for errors other than out of memory.
func TestOutOfMemoryObserver(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 1 << 30})[0]
	s := newStream(t, dev)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lim := mr.NewLimit(pool, mr.NewBudget(16<<20))
	var reports []mr.OutOfMemoryReport
	r := mr.NewRetry(lim, mr.RetryOptions{Attempts: 2, OnFailure: func(rep mr.OutOfMemoryReport) {
		reports = append(reports, rep)
	}})
	p, err := r.Allocate(10<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Allocate(10<<20, s)
	if !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("over the budget: %v", err)
	}
	if len(reports) != 1 {
		t.Fatalf("%d reports, want 1", len(reports))
	}
	rep := reports[0]
	if rep.Size != 10<<20 || rep.Stream != s.ID() || rep.Retries != 2 || rep.Err.Error() != err.Error() {
		t.Errorf("report %v, error %v", rep, err)
	}
	var oom *mr.OutOfMemoryError
	if !errors.As(rep.Err, &oom) || oom.Resource != "limit" {
		t.Errorf("report's error %v does not hold the limit's refusal", rep.Err)
	}
	if u := rep.Stats.Usage(); u.Used != 10<<20 || u.Reserved != 10<<20 {
		t.Errorf("report's usage %v", u)
	}
	sum := rep.Summary()
	if !strings.HasPrefix(sum, "streamalloc memory summary: device 0") ||
		!strings.Contains(sum, "chain: limit > pool > direct\n") ||
		!strings.Contains(sum, "budget 16.0 MiB: 10.0 MiB charged") {
		t.Errorf("report's summary:\n%s", sum)
	}
	want := fmt.Sprintf("out of memory: 10.0 MiB requested on stream %d, 2 retries: %v", s.ID(), err)
	if rep.String() != want {
		t.Errorf("report line\n%s\nwant\n%s", rep, want)
	}

	// Freed meanwhile: the retry succeeds, nothing is observed.
	r2 := mr.NewRetry(lim, mr.RetryOptions{Attempts: 1, OnFailure: func(rep mr.OutOfMemoryReport) {
		t.Errorf("observed a request a retry saved: %v", rep)
	}, OnOutOfMemory: func(int, gpu.Stream, int, error) bool {
		if err := r.Deallocate(p, 10<<20, s); err != nil {
			t.Error(err)
		}
		return true
	}})
	q, err := r2.Allocate(10<<20, s)
	if err != nil {
		t.Fatalf("retry after the callback freed: %v", err)
	}
	if err := r2.Deallocate(q, 10<<20, s); err != nil {
		t.Fatal(err)
	}

	// An error that is not out of memory is not observed.
	up := newRecording()
	up.failAllocs(gpu.ErrLaunchFailed)
	r3 := mr.NewRetry(up, mr.RetryOptions{OnFailure: func(rep mr.OutOfMemoryReport) {
		t.Errorf("observed %v", rep)
	}})
	if _, err := r3.Allocate(256, up.stream()); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("injected failure: %v", err)
	}

	// No retry left: the refusal is observed at once.
	var n int
	r4 := mr.NewRetry(lim, mr.RetryOptions{Attempts: -1, OnFailure: func(rep mr.OutOfMemoryReport) {
		n++
		if rep.Retries != 0 {
			t.Errorf("retries %d with none allowed", rep.Retries)
		}
	}})
	if _, err := r4.Allocate(32<<20, s); !errors.Is(err, mr.ErrOutOfMemory) || n != 1 {
		t.Fatalf("no retry: %v, observed %d times", err, n)
	}
}
