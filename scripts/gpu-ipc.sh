#!/usr/bin/env bash
# gpu-ipc.sh runs, on a machine with an NVIDIA GPU, the checks of peer
# access and interprocess memory (issue 14) from the test binaries that
# scripts/gpu-build.sh made:
#
#   - ipc: every test; on the GPU the ones with two real processes (the
#     test binary re-executes itself as the importer): 1 GiB filled in 64
#     pieces, checked and rewritten by the importer, checked again by the
#     exporter (TestTwoProcessesFill); an importer killed while it maps
#     512 MiB of loans, then the exporter's pool and the device's free
#     memory (TestKilledImporter); the round trip of a loan against the
#     legacy cuIpcGetMemHandle path (TestRoundTripCost, figures in the
#     log); a Virtual range of three pieces shared with a child
#     (TestTwoProcessesVirtual); eight Virtual ranges of 4 KiB to 128 MiB
#     lent through a Link, checked, rewritten and unmapped by a child, and
#     a 2 MiB Virtual loan's round trip (TestTwoProcessesVirtualLend); the
#     driver calls of a Virtual loan timed (TestVirtualImportCost); the
#     simulator's tests of the protocol run too;
#   - gpu_cudagpu: the one-process interprocess refusals (RunIPCBadInput)
#     and the handle types the device offers; the peer-access suite, which
#     skips with one GPU;
#   - ipc again, the fabric-handle round trip alone (its log under
#     fabric/), since a driver abort there would end the binary.
#
# Build here:  scripts/gpu-build.sh ./ipc ./gpu/cudagpu
# Run there:   scripts/gpu-ipc.sh [.gpubin]      (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
status=0
TEST_TIMEOUT=5m "$bin/run.sh" test ipc || status=1
TEST_TIMEOUT=2m TEST_RUN='IPCBadInput|PeerConformance' "$bin/run.sh" test gpu_cudagpu || status=1
logs=${LOGDIR:-${OUT:-$bin/logs}}
mkdir -p "$logs/fabric"
STREAMALLOC_IPC_FABRIC=1 LOGDIR="$logs/fabric" TEST_TIMEOUT=2m TEST_RUN='Fabric' "$bin/run.sh" test ipc || status=1
exit $status
