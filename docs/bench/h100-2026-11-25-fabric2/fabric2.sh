#!/usr/bin/env bash
# fabric2.sh: the fabric pool refusal in the CUDA backend, on the card.
# Built on a machine with Go:
#
#     scripts/gpu-build.sh ./gpu/cudagpu ./ipc ./mr
#     mkdir -p DIR && cp -r .gpubin DIR/ && cp docs/bench/h100-2026-11-25-fabric2/fabric2.sh DIR/
#
# then on the GPU machine, in DIR: bash fabric2.sh (logs in $OUT).
# Runs gpu/cudagpu's interprocess and sharing tests (TestIPCFabricPool,
# the conformance suite's fabric pool case, among them), every test of
# ipc (TestFabricRefusedOnCard among them), and mr's Async and Export
# tests (TestAsyncExportableFabric among them), each binary with
# STREAMALLOC_DEVICE=cuda.
set -u
out=${OUT:-$PWD/fabric2-out}
mkdir -p "$out"
{
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
	echo "== /dev/nvidia-caps-imex-channels"
	ls -la /dev/nvidia-caps-imex-channels 2>&1
} >"$out/machine.txt" 2>&1
LOGDIR=$out TEST_RUN='IPC|Fabric|PhysicalSharing' TEST_TIMEOUT=2m .gpubin/run.sh test gpu_cudagpu >"$out/run-cudagpu.txt" 2>&1
LOGDIR=$out TEST_TIMEOUT=3m .gpubin/run.sh test ipc >"$out/run-ipc.txt" 2>&1
LOGDIR=$out TEST_RUN='Async|Export' TEST_TIMEOUT=2m .gpubin/run.sh test mr >"$out/run-mr.txt" 2>&1
grep -hE -- '--- (FAIL|SKIP)|fabric|Fabric|IMEX|refused|summary|^[a-z_]+ +(ok|FAIL) ' "$out"/run-*.txt "$out"/*.test.log >"$out/fabric-lines.txt" 2>&1
echo done
