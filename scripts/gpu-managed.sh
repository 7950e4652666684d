#!/usr/bin/env bash
# gpu-managed.sh runs, on a machine with an NVIDIA GPU, the checks of
# managed memory and host-located pools (issue 22) from the test binaries
# that scripts/gpu-build.sh made:
#
#   - cuda: every test of the binding (the managed-memory entry points
#     among them);
#   - gpu_cudagpu: every backend test, the managed-memory suite (gputest
#     RunManaged: prefetch around fill and check kernels, each advice, a
#     managed pool on 4 goroutines, a host-located pool's memory through
#     byte-checked copies on 4 goroutines, the driver's answer to each bad
#     call) and the _v2 entry points loaded;
#   - mr: HostPool, DriverHostPool (byte-checked copies on 8 goroutines
#     over the driver's host pool), Managed and the host summaries;
#   - the benchmarks BenchmarkHostPair (HostPool, HostPool ordered, the
#     driver's host pool with and without a stream synchronization, and
#     cuMemAllocHost) and BenchmarkManagedKernel (a fill kernel over 64 MiB
#     and 1 GiB of managed memory resident on the host, with and without a
#     prefetch to the device; event-timed).
#
# Managed allocations stay at 1 GiB or less: never ask the card for more
# managed memory than it has free.
#
# Build here:  scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr
# Run there:   scripts/gpu-managed.sh [.gpubin]   (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
status=0
TEST_TIMEOUT=2m "$bin/run.sh" test cuda || status=1
TEST_TIMEOUT=2m "$bin/run.sh" test gpu_cudagpu || status=1
TEST_TIMEOUT=2m TEST_RUN='HostPool|DriverHostPool|Managed|HostSummary' "$bin/run.sh" test mr || status=1
BENCH='HostPair|ManagedKernel' BENCH_COUNT="${BENCH_COUNT:-3}" BENCH_TIME="${BENCH_TIME:-0.3s}" "$bin/run.sh" bench mr || status=1
exit $status
