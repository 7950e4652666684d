#!/usr/bin/env bash
# gpu-hostpool.sh runs on the GPU machine the page-locked host pool's
# checks from binaries made by `scripts/gpu-build.sh ./mr ./buf ./gpu/cudagpu`:
# mr's host-pool tests (byte-checked copies on 16 goroutines through pooled
# buffers, typed slices, the conformance suite over both host pools alone
# and under every adaptor, a HostPool's address taken by the driver's
# memset and device copies), buf's copies through pinned slices, and the
# cudagpu backend's tests with STREAMALLOC_DEVICE=cuda, then the
# benchmarks BenchmarkHostPair (HostPool, alone and under Stats, against
# cuMemAllocHost/cuMemFreeHost and the driver's host pool) and
# BenchmarkHtoD (pooled pinned against pageable memory). Logs go to $OUT
# (or .gpubin/logs). HOSTPOOL_NO_CUDAGPU=1 leaves the backend's tests out.
#
# Usage: scripts/gpu-hostpool.sh [dir holding .gpubin]   (default: the repo root)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
run=$root/.gpubin/run.sh
status=0
TEST_RUN='Host' "$run" test mr || status=1
TEST_RUN='Pinned' "$run" test buf || status=1
if [ -z "${HOSTPOOL_NO_CUDAGPU:-}" ]; then
	TEST_TIMEOUT=45s "$run" test gpu_cudagpu || status=1
fi
BENCH='HostPair|HtoD' BENCH_COUNT="${BENCH_COUNT:-3}" BENCH_TIME="${BENCH_TIME:-0.3s}" "$run" bench mr || status=1
exit $status
