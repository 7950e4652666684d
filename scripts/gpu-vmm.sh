#!/usr/bin/env bash
# gpu-vmm.sh runs, on a machine with an NVIDIA GPU, the checks of virtual
# memory (issue 16) from the test binaries that scripts/gpu-build.sh made:
#
#   - cuda: every test of the binding (the virtual-memory entry points
#     among them: loaded, and ErrNotSupported from a driver without them);
#   - gpu_cudagpu: the virtual-memory conformance suite (gputest
#     RunVirtualMemory), which the simulator also passes: grow and shrink
#     with fill and check across mappings, handoff of a physical
#     allocation between reservations, capacity, the driver's answer to
#     each bad call, 16 goroutines;
#   - mr (if built): the Pool over Virtual, which grows in place
#     (mr/pool_vgrow.go, mr/virtual_grow.go): the resource conformance
#     suite over it and over Virtual alone (TestVirtualConformance), the
#     replayed PyTorch traces with their bounds (TestPoolVirtualTraces),
#     then the benchmarks of a one-granule growth against an Async chunk
#     growth (BenchmarkGrowth) and of the pool's pair over Direct and over
#     Virtual (BenchmarkPoolPairModes).
#
# Build here:  scripts/gpu-build.sh ./cuda ./gpu/cudagpu [./mr]
# Run there:   scripts/gpu-vmm.sh [.gpubin]      (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
status=0
TEST_TIMEOUT=2m "$bin/run.sh" test cuda || status=1
TEST_TIMEOUT=2m TEST_RUN='VirtualMemory' "$bin/run.sh" test gpu_cudagpu || status=1
if grep -q '^mr ' "$bin/MANIFEST"; then
	TEST_TIMEOUT=4m TEST_RUN='TestVirtualConformance|TestPoolVirtualTraces' "$bin/run.sh" test mr || status=1
	BENCH='BenchmarkGrowth|BenchmarkPoolPairModes' BENCH_TIME=${BENCH_TIME:-0.2s} "$bin/run.sh" bench mr || status=1
fi
exit $status
