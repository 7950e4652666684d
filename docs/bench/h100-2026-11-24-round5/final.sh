#!/usr/bin/env bash
# The round's final proof on one GPU machine, in one call: the GPU test
# suite of the final tree, a soak of its command, and one process each of
# PyTorch (GPT-2, ResNet-50) and CuPy through the final tree's C ABI under
# the default pool, beside PyTorch's native allocator and CuPy's pool.
#
# Built on the development machine, in the folder this script runs from
# (carried to the GPU machine):
#     scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr ./pluggable ./buf ./sanitize ./ipc ./replay ./soak
#     go build -o DIR/streamalloc ./cmd/streamalloc && cp scripts/gpu-soak.sh DIR/
#     scripts/build-capi.sh DIR/build/capi && cp -r python scripts DIR/
# Run there from the repository's root, .gpubin and DIR carried:
#     OUT=... DIR/final.sh   (SOAK=duration)
# Everything it writes is packed into $OUT/final.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
out=${OUT:?}/final
mkdir -p "$out"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$out/machine.txt" 2>&1
# 1. The suite.
LOGDIR=$out/suite TEST_TIMEOUT=6m "$root/.gpubin/run.sh" test >"$out/suite.log" 2>&1; echo "suite exit $?" >>"$out/machine.txt"
# 2. The soak.
OUT=$out "$here/gpu-soak.sh" "${SOAK:-120s}" "$here/streamalloc" >"$out/soak.log" 2>&1; echo "soak exit $?" >>"$out/machine.txt"
# 3. The C ABI under PyTorch and CuPy, one process each.
cd "$here" || exit 1
RUNS='gpt2 native; gpt2 streamalloc pool; resnet50 native; resnet50 streamalloc pool; cupy cupy-pool; cupy streamalloc pool' \
  WARMUP=6 STEPS=12 RUN_TIMEOUT=60 scripts/torch-bench.sh "$out/torch" build/capi/libstreamalloc.so >"$out/torch.log" 2>&1
echo "torch exit $? $(date -u +%T)" >>"$out/machine.txt"
date -u >>"$out/machine.txt"
tar -C "$out/.." -czf "$out/../final.tgz" final && rm -rf "$out"
