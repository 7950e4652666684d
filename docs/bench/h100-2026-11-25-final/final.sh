#!/usr/bin/env bash
# The round's final proof on one GPU machine, in one call: the GPU test
# suite of the final tree, a soak of its command, the replay of every
# recorded trace on the registry's pool_vmm over the card, and the C ABI
# under PyTorch and CuPy with the lockstep protocol (scripts/torch-bench.py
# lockstep: one process per configuration alive at once, taking turns step
# by step in ABBA order, each step paired with the reference's), inside a
# fixed time.
#
# Built on the development machine, in the folder DIR this script runs
# from (carried to the GPU machine):
#     scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr ./pluggable ./buf ./sanitize ./ipc ./replay ./soak
#     go build -ldflags='-s -w' -o DIR/streamalloc ./cmd/streamalloc && cp scripts/gpu-soak.sh DIR/
#     scripts/build-capi.sh DIR/build/capi && cp -r python scripts DIR/  (without scripts/viewer-check)
# Run there from the repository's root, .gpubin and DIR carried:
#     OUT=... DIR/final.sh   (SOAK=duration, LOCKSTEP_SECONDS=budget of part 4)
# Everything it writes is packed into $OUT/final.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
out=${OUT:?}/final
mkdir -p "$out"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$out/machine.txt" 2>&1
# 1. The suite.
LOGDIR=$out/suite TEST_TIMEOUT=6m "$root/.gpubin/run.sh" test >"$out/suite.log" 2>&1; echo "suite exit $? $(date -u +%T)" >>"$out/machine.txt"
# 2. The soak.
OUT=$out "$here/gpu-soak.sh" "${SOAK:-120s}" "$here/streamalloc" >"$out/soak.log" 2>&1; echo "soak exit $? $(date -u +%T)" >>"$out/machine.txt"
# 3. Every recorded trace on the pool over virtual memory, on the card.
timeout 90 "$here/streamalloc" replay --device cuda --resource pool_vmm \
	"$root"/replay/testdata/*.csv.gz "$root"/pluggable/testdata/*.csv.gz "$root"/testdata/traces/*.gz >"$out/replay-pool_vmm.txt" 2>&1; echo "replay exit $? $(date -u +%T)" >>"$out/machine.txt"
# 4. The C ABI, lockstep, within LOCKSTEP_SECONDS.
cd "$here" || exit 1
L=$here/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
budget=${LOCKSTEP_SECONDS:-300}
ls() { # WORKLOAD TIMEOUT CONFIGS ARGS...
	local w=$1 t=$2 c=$3; shift 3
	local left=$((budget - ($(date +%s) - began)))
	if [ "$left" -lt 20 ]; then echo "$w skipped: $left s left" >>"$out/ls.log"; return; fi
	[ "$t" -gt "$left" ] && t=$left
	timeout "$t" python3 scripts/torch-bench.py lockstep "$w" --configs "$c" --out "$out/ls.jsonl" \
		--blocks-out "$out/blocks.jsonl" --lib "$L" "$@" >>"$out/ls.log" 2>&1
	echo "$w exit $? at $(($(date +%s) - began)) s" >>"$out/ls.log"
}
V='pool,upstream=vmm,mapped_slack,small_at_peak'
ls gpt2 120 "native; streamalloc pool; streamalloc $V" --warmup 18 --block-steps 1 --blocks 300
ls cupy 30 "cupy-pool; streamalloc pool; streamalloc $V" --warmup 10 --block-steps 5 --blocks 100
ls generate 110 "native; streamalloc pool; streamalloc $V" --warmup 5 --block-steps 1 --blocks 80
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" >"$out/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$out/ls.jsonl" >"$out/table.md" 2>&1
echo "lockstep done $(date -u +%T)" >>"$out/machine.txt"
tar -C "$out/.." -czf "$out/../final.tgz" final && rm -rf "$out"
