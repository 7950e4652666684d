package mr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// TestRetryRecovers: memory held by pending frees (reaped only when
// waiting) and by a cache (dropped by Release) is recovered, in that
// order, and the request succeeds on the second retry.
func TestRetryRecovers(t *testing.T) {
	up := newRecording()
	up.capacity = 4096
	up.pending = 2048 // freed in stream order, not known complete
	up.cached = 1024  // kept for reuse by the resource
	// A Stats adaptor between Retry and the upstream: Retry must find the
	// upstream's Reap and Release through it.
	mid := mr.NewStats(up, mr.StatsOptions{})
	var calls []int
	r := mr.NewRetry(mid, mr.RetryOptions{OnOutOfMemory: func(size int, s gpu.Stream, attempt int, err error) bool {
		calls = append(calls, attempt)
		if !errors.Is(err, mr.ErrOutOfMemory) || size != 3000 {
			t.Errorf("callback got %d, %v", size, err)
		}
		return true
	}})
	s := up.stream()
	p, err := r.Allocate(3000, s)
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 1 only queried (nothing reaped) but released the cache:
	// 1024 free is not enough. Attempt 2 waited and reaped 2048.
	if !slices.Equal(up.reaps, []bool{false, true}) || up.released != 2 || !slices.Equal(calls, []int{1, 2}) {
		t.Errorf("reaps %v, releases %d, callbacks %v", up.reaps, up.released, calls)
	}
	c := r.Counts()
	if c != (mr.RetryCounts{OutOfMemory: 1, Recovered: 1, Retries: 2, Reaped: 2048}) {
		t.Errorf("counts %+v", c)
	}
	if err := r.Deallocate(p, 3000, s); err != nil {
		t.Fatal(err)
	}
	// One allocation, counted once below.
	if snap := mid.Snapshot(); snap.Allocations.Total != 1 || snap.Failures != 3-1 || snap.Bytes.Current != 0 {
		t.Errorf("stats below retry: %+v", snap)
	}
}

func TestRetryGivesUp(t *testing.T) {
	tests := []struct {
		name        string
		opts        mr.RetryOptions
		wantRetries uint64
		wantUp      int // allocation calls reaching the upstream
	}{
		{"default three attempts", mr.RetryOptions{}, 3, 4},
		{"one attempt", mr.RetryOptions{Attempts: 1}, 1, 2},
		{"no retry", mr.RetryOptions{Attempts: -1}, 0, 1},
		{"callback stops", mr.RetryOptions{OnOutOfMemory: func(int, gpu.Stream, int, error) bool { return false }}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newRecording()
			up.capacity = 1024
			r := mr.NewRetry(up, tc.opts)
			_, err := r.Allocate(2048, up.stream())
			var oom *mr.OutOfMemoryError
			if !errors.As(err, &oom) || oom.Requested != 2048 {
				t.Fatalf("got %v, want the upstream's *OutOfMemoryError", err)
			}
			if c := r.Counts(); c.Retries != tc.wantRetries || c.Failed != 1 || c.Recovered != 0 {
				t.Errorf("counts %+v", c)
			}
			if n := up.numCalls(); n != tc.wantUp {
				t.Errorf("upstream called %d times, want %d", n, tc.wantUp)
			}
		})
	}
}

func TestRetryOtherErrorsNotRetried(t *testing.T) {
	up := newRecording()
	r := mr.NewRetry(up, mr.RetryOptions{})
	up.failAllocs(fmt.Errorf("injected: %w", gpu.ErrLaunchFailed))
	if _, err := r.Allocate(100, up.stream()); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatal(err)
	}
	if up.numCalls() != 1 || len(up.reaps) != 0 || up.released != 0 {
		t.Fatalf("a non-memory error was retried: %d calls", up.numCalls())
	}
}

// failingReaper's Reap fails: recovery goes on and the error is reported
// with the final out-of-memory error.
type failingReaper struct{ calls int }

func (f *failingReaper) Reap(bool) (uint64, error) {
	f.calls++
	return 0, fmt.Errorf("injected: %w", gpu.ErrLaunchFailed)
}

func TestRetryReportsRecoveryErrors(t *testing.T) {
	up := newRecording()
	up.capacity = 100
	fr := &failingReaper{}
	r := mr.NewRetry(up, mr.RetryOptions{Attempts: 2, Reapers: []mr.Reaper{fr}})
	_, err := r.Allocate(200, up.stream())
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("got %v, want out of memory joined with the reap failure", err)
	}
	var oom *mr.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatal("lost the *OutOfMemoryError")
	}
	if fr.calls != 2 || up.released != 2 {
		t.Fatalf("reaper called %d times, releases %d", fr.calls, up.released)
	}
}
