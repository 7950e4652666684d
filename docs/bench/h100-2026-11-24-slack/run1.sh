#!/usr/bin/env bash
# What the default pool's churn at the high-water mark costs GPT-2 and
# CuPy under PyTorch's loop: the lockstep protocol (one process per
# configuration, all alive, one step a block in turns, ABBA), native or
# CuPy's pool against the C ABI's default pool and two configurations that
# make no device call in GPT-2's steady steps on the simulator:
# split_giant with slack=0.03 (1.0296 of peak live on the GPT-2 traces) and
# slack=1 (a pool that gives nothing back before growing: 1.2142). Run
# from a folder holding build/capi/ (scripts/build-capi.sh DIR/build/capi),
# python/ and scripts/:
#     OUT=... DIR/run1.sh
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/s1; mkdir -p "$R"
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
ls gpt2 170 'native; streamalloc pool; streamalloc pool,split_giant,slack=0.03; streamalloc pool,slack=1' --warmup 18 --block-steps 1 --blocks 120
left=$((230 - ($(date +%s) - began)))
if [ "$left" -gt 30 ]; then
	ls cupy "$left" 'cupy-pool; streamalloc pool; streamalloc pool,slack=1' --warmup 10 --block-steps 5 --blocks 100
else
	echo "cupy skipped: $left s left" >>"$R/ls.log"
fi
kill $smi
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
cat "$R/ls.log" "$R/lockstep-table.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/s1.tgz" s1 && rm -rf "$R"
