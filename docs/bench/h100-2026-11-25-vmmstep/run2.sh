#!/usr/bin/env bash
# The second call, on another machine: native (CuPy: CuPy's MemoryPool),
# the C ABI's default pool and pool,upstream=vmm,mapped_slack (the
# configuration of the first call, run.sh, that matched or beat the
# default pool on every workload), with more step pairs each, generation
# most, under the lockstep protocol (scripts/torch-bench.py lockstep),
# inside BUDGET seconds.
# Built on the development machine into the folder it runs from:
#     scripts/build-capi.sh DIR/build/capi && cp -r python DIR/ && mkdir DIR/scripts && cp scripts/*.py scripts/*.sh DIR/scripts/
# Run on the GPU machine:
#     OUT=... DIR/run2.sh     (BUDGET=seconds, default 540)
# Everything it writes is packed into $OUT/vmmstep2.tgz.
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/vmmstep2; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
budget=${BUDGET:-540}
{ date -u; cat /proc/loadavg; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$R/machine.txt" 2>&1
ls() { # WORKLOAD TIMEOUT CONFIGS ARGS...
	local w=$1 t=$2 c=$3; shift 3
	local left=$((budget - ($(date +%s) - began)))
	if [ "$left" -lt 30 ]; then echo "$w skipped: $left s left" >>"$R/ls.log"; return; fi
	[ "$t" -gt "$left" ] && t=$left
	timeout "$t" python3 scripts/torch-bench.py lockstep "$w" --configs "$c" --out "$R/ls.jsonl" \
		--blocks-out "$R/blocks.jsonl" --lib "$L" "$@" >>"$R/ls.log" 2>&1
	echo "$w exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
}
V='streamalloc pool; streamalloc pool,upstream=vmm,mapped_slack'
ls gpt2 150 "native; $V" --warmup 18 --block-steps 1 --blocks 400
ls resnet50 100 "native; $V" --warmup 12 --block-steps 1 --blocks 500
ls cupy 40 "cupy-pool; $V" --warmup 10 --block-steps 5 --blocks 100
ls generate 240 "native; $V" --warmup 5 --block-steps 1 --blocks 100
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
echo "done $(date -u +%T)" >>"$R/machine.txt"
cat "$R/ls.log" | grep -v -i warn | tail -20; cat "$R/lockstep-table.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/vmmstep2.tgz" vmmstep2 && rm -rf "$R"
