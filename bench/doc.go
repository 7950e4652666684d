// Package bench holds streamalloc's benchmark workloads, written once and
// run two ways: by `go test -bench` (mr/resources_bench_test.go calls
// them from its Benchmark functions) and by `streamalloc bench`, which
// runs the same cases through testing.Benchmark and prints a table or
// JSON.
//
// # Workloads
//
//	Pair      one Allocate+Deallocate of one size on one stream per op
//	Streams   N goroutines, each on its own stream, PairsPerRound pairs
//	          each per op on average, taken in batches from one queue;
//	          reports the total pairs/s
//	Random    RMM-style random allocations: up to MaxLive live blocks of
//	          random sizes, a random allocate or free per op
//	Notebook  the notebook loop: allocate 4 MiB, fill it with a kernel,
//	          free, on one stream; per-iteration time including the
//	          stream synchronizations
//	Pipeline  a producer stream fills each buffer, a consumer stream uses
//	          and frees it: every free crosses streams; time per buffer
//	          and the peak reserved memory
//
// Each is a function of a *testing.B, a resource and its streams, and
// uses b.Loop and b.ReportAllocs, so the harness that calls it decides
// how long it runs. Suite lists the cases (workload, resource,
// parameters) under names that match the go test benchmarks
// (Pair/resource=pool/size=4KiB is BenchmarkPair/resource=pool/size=4KiB),
// and NewResource builds the resources they run on from the table of
// package registry (mr/registry), which the command's replay shares.
//
// # Invariants
//
//   - A workload frees everything it allocated before it returns, on
//     every path that can return (a failure included, as far as the
//     resource lets it), so a resource can be closed after it and report
//     that it holds nothing.
//   - Only allocation work is timed: setup (streams, resources, warm-up
//     pairs, Random's warm-up operations) runs before the first b.Loop
//     call and teardown after the last, except the final stream
//     synchronizations of Notebook and Pipeline, which are part of what
//     they measure.
//   - A workload fails its benchmark through fatalf or errorf, which also
//     record the error for Run: testing.Benchmark discards a benchmark's
//     log, and a command that benchmarks must still say what went wrong.
package bench
