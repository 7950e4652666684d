#!/usr/bin/env bash
# A second call after final.sh: the workloads final.sh left unresolved at
# 2%, with more time each, under the lockstep protocol: ResNet-50 (600
# step pairs of native and the C ABI's default pool) and generation (a
# growing KV cache, 30 step pairs; final.sh's 60 s ran out before its
# first pair). Run from a folder holding build/capi/ (scripts/build-capi.sh
# DIR/build/capi), python/ and scripts/:
#     OUT=... DIR/more.sh
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/more; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
{ date -u; cat /proc/loadavg; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$R/machine.txt" 2>&1
ls() { # WORKLOAD TIMEOUT CONFIGS ARGS...
	local w=$1 t=$2 c=$3; shift 3
	timeout "$t" python3 scripts/torch-bench.py lockstep "$w" --configs "$c" --out "$R/ls.jsonl" \
		--blocks-out "$R/blocks.jsonl" --lib "$L" "$@" >>"$R/ls.log" 2>&1
	echo "$w exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
}
ls resnet50 150 'native; streamalloc pool' --warmup 12 --block-steps 1 --blocks 600
ls generate 200 'native; streamalloc pool' --warmup 5 --block-steps 1 --blocks 30
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
cat "$R/ls.log" "$R/lockstep-table.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/more.tgz" more && rm -rf "$R"
