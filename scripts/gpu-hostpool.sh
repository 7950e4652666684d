#!/usr/bin/env bash
# gpu-hostpool.sh runs on the GPU machine the page-locked host pool's
# checks from binaries made by `scripts/gpu-build.sh ./mr ./gpu/cudagpu`:
# mr's HostPool tests (byte-checked copies on 16 goroutines through pooled
# buffers, typed slices) and the cudagpu backend's tests with
# STREAMALLOC_DEVICE=cuda, then the benchmarks BenchmarkHostPair (HostPool
# against cuMemAllocHost/cuMemFreeHost) and BenchmarkHtoD (pooled pinned
# against pageable memory). Logs go to $OUT (or .gpubin/logs).
#
# Usage: scripts/gpu-hostpool.sh [dir holding .gpubin]   (default: the repo root)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
run=$root/.gpubin/run.sh
status=0
TEST_RUN='HostPool' "$run" test mr || status=1
TEST_TIMEOUT=45s "$run" test gpu_cudagpu || status=1
BENCH='HostPair|HtoD' BENCH_COUNT="${BENCH_COUNT:-3}" BENCH_TIME="${BENCH_TIME:-0.3s}" "$run" bench mr || status=1
exit $status
