package bench

import (
	"strings"
	"testing"
)

// Every case of the suite says what its op is, with its own parameters.
func TestCaseOp(t *testing.T) {
	want := map[Workload]string{
		WorkloadPair:     "one Allocate of 4KiB and its Deallocate, on one stream",
		WorkloadStreams:  "a round: 8 goroutines on their own streams, 4096 pairs of 4KiB each on average",
		WorkloadRandom:   "one Allocate or Deallocate at random, up to 512 blocks of 1KiB to 4MiB live",
		WorkloadNotebook: "Allocate 4MiB, fill it with a kernel, Deallocate, on one stream; a sync every 100",
		WorkloadPipeline: "a 1MiB buffer filled (20µs kernel) on one stream, used (20µs) and freed on another",
	}
	seen := map[Workload]bool{}
	for _, c := range Suite() {
		op := c.Op()
		if strings.HasPrefix(op, "unknown") || len([]rune(op)) > 90 {
			t.Errorf("%s: %q (%d characters)", c.FullName(), op, len([]rune(op)))
		}
		if (c.Workload == WorkloadPair && c.Size == 4<<10) || (c.Workload == WorkloadStreams && c.Streams == 8) ||
			c.Workload == WorkloadRandom || c.Workload == WorkloadNotebook || c.Workload == WorkloadPipeline {
			if op != want[c.Workload] {
				t.Errorf("%s: %q\nwant %q", c.FullName(), op, want[c.Workload])
			}
			seen[c.Workload] = true
		}
	}
	if len(seen) != len(want) {
		t.Errorf("workloads checked %v, want all of %v", seen, want)
	}
	if op := (Case{Workload: "Nope"}).Op(); op != "unknown workload Nope" {
		t.Errorf("unknown workload: %q", op)
	}
}
