#!/usr/bin/env bash
# Third device call: native against the C ABI's default pool under the
# lockstep protocol, step by step (one step a block, ABBA), on GPT-2,
# ResNet-50, CuPy (CuPy's pool against streamalloc's; blocks of one cycle)
# and generation, inside a fixed time (generation runs only if time is
# left). Run from a folder holding build/capi/ (scripts/build-capi.sh
# DIR/build/capi), python/ and scripts/:
#     OUT=... DIR/run3.sh
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/r3; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
{ date -u; cat /proc/loadavg; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$R/machine.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv -lms 250 >"$R/smi.csv" 2>&1 &
smi=$!
ls() { # WORKLOAD TIMEOUT CONFIGS ARGS...
	local w=$1 t=$2 c=$3; shift 3
	timeout "$t" python3 scripts/torch-bench.py lockstep "$w" --configs "$c" --out "$R/ls.jsonl" \
		--blocks-out "$R/blocks.jsonl" --lib "$L" "$@" >>"$R/ls.log" 2>&1
	echo "$w exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
}
ls gpt2 60 'native; streamalloc pool' --warmup 18 --block-steps 1 --blocks 50
ls resnet50 45 'native; streamalloc pool' --warmup 12 --block-steps 1 --blocks 50
ls cupy 30 'cupy-pool; streamalloc pool' --warmup 10 --block-steps 5 --blocks 100
left=$((135 - ($(date +%s) - began)))
if [ "$left" -gt 45 ]; then
	ls generate "$left" 'native; streamalloc pool' --warmup 5 --block-steps 1 --blocks 10
else
	echo "generate skipped: $left s left" >>"$R/ls.log"
fi
kill $smi
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
cat "$R/ls.log" "$R/lockstep-table.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/r3.tgz" r3 && rm -rf "$R"
