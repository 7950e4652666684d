#!/usr/bin/env bash
# The final tree's proof on one GPU machine, in one call: the GPU test
# suite, a soak of the command, and the replay of every recorded trace on
# the registry's pool_vmm over the card.
#
# Built on the development machine, in the folder DIR this script runs
# from (carried to the GPU machine):
#     scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr ./pluggable ./buf ./sanitize ./ipc ./replay ./soak
#     go build -ldflags='-s -w' -o DIR/streamalloc ./cmd/streamalloc && cp scripts/gpu-soak.sh DIR/
# Run there from the repository's root, .gpubin and DIR carried:
#     OUT=... DIR/suite.sh   (SOAK=duration)
# Everything it writes is packed into $OUT/suite.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
out=${OUT:?}/suite
mkdir -p "$out"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$out/machine.txt" 2>&1
# 1. The suite.
LOGDIR=$out/suite TEST_TIMEOUT=6m "$root/.gpubin/run.sh" test >"$out/suite.log" 2>&1; echo "suite exit $? $(date -u +%T)" >>"$out/machine.txt"
# 2. The soak.
OUT=$out "$here/gpu-soak.sh" "${SOAK:-90s}" "$here/streamalloc" >"$out/soak.log" 2>&1; echo "soak exit $? $(date -u +%T)" >>"$out/machine.txt"
# 3. Every recorded trace on the pool over virtual memory, on the card.
timeout 90 "$here/streamalloc" replay --device cuda --resource pool_vmm,pool_vmm_holes_pair \
	"$root"/replay/testdata/*.csv.gz "$root"/pluggable/testdata/*.csv.gz "$root"/testdata/traces/*.gz >"$out/replay-pool_vmm.txt" 2>&1; echo "replay exit $? $(date -u +%T)" >>"$out/machine.txt"
cp "$out/machine.txt" "$out/suite.log" "$OUT/"
tar -C "$out/.." -czf "$OUT/suite.tgz" suite && rm -rf "$out"
