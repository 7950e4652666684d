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
#     each bad call, 16 goroutines.
#
# Build here:  scripts/gpu-build.sh ./cuda ./gpu/cudagpu
# Run there:   scripts/gpu-vmm.sh [.gpubin]      (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
status=0
TEST_TIMEOUT=2m "$bin/run.sh" test cuda || status=1
TEST_TIMEOUT=2m TEST_RUN='VirtualMemory' "$bin/run.sh" test gpu_cudagpu || status=1
exit $status
