#!/usr/bin/env bash
# The pool over Virtual under the lockstep protocol: native (CuPy: CuPy's
# MemoryPool) against the C ABI's default pool and the two configurations
# of the pool over Virtual that the replays leave (upstream=vmm, and
# upstream=vmm,mapped_slack), on GPT-2, ResNet-50, CuPy and generation,
# one process per configuration alive at once, taking turns step by step
# (scripts/torch-bench.py lockstep), inside BUDGET seconds; then, if time
# is left, the memory history of one generation process over Virtual.
# Built on the development machine into the folder it runs from:
#     scripts/build-capi.sh DIR/build/capi && cp -r python DIR/ && mkdir DIR/scripts && cp scripts/*.py scripts/*.sh DIR/scripts/
# Run on the GPU machine:
#     OUT=... DIR/run.sh      (BUDGET=seconds, default 480)
# Everything it writes is packed into $OUT/vmmstep.tgz.
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/vmmstep; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
budget=${BUDGET:-480}
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
V='streamalloc pool,upstream=vmm; streamalloc pool,upstream=vmm,mapped_slack'
ls gpt2 130 "native; streamalloc pool; $V" --warmup 18 --block-steps 1 --blocks 250
ls resnet50 90 "native; streamalloc pool; $V" --warmup 12 --block-steps 1 --blocks 300
ls cupy 45 "cupy-pool; streamalloc pool; $V" --warmup 10 --block-steps 5 --blocks 100
ls generate 170 "native; streamalloc pool; $V" --warmup 5 --block-steps 1 --blocks 40
left=$((budget - ($(date +%s) - began)))
if [ "$left" -gt 45 ]; then
	timeout $((left - 5)) python3 scripts/torch-bench.py run generate streamalloc --lib "$L" --out "$R/record.jsonl" \
		--conf "pool,upstream=vmm,log=$R/generate-vmm.csv" --warmup 5 --steps 10 >"$R/record.log" 2>&1
	echo "record exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
	gzip -9 "$R/generate-vmm.csv" 2>/dev/null
fi
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
echo "done $(date -u +%T)" >>"$R/machine.txt"
cat "$R/ls.log" | grep -v -i warn | tail -20; cat "$R/lockstep-table.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/vmmstep.tgz" vmmstep && rm -rf "$R"
