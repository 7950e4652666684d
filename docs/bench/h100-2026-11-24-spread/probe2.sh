#!/usr/bin/env bash
# Second device call: the probe (scripts/torch-bench-probe.py) of GPT-2
# (native and the default pool), ResNet-50 and generation (native), and
# the lockstep protocol with the collector frozen after the warm-up on
# GPT-2 and ResNet-50. Run from a folder holding build/capi/
# (scripts/build-capi.sh DIR/build/capi), python/ and scripts/:
#     OUT=... DIR/probe2.sh
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/p2; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
{ date -u; nproc; cat /proc/loadavg; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } >"$R/machine.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv -lms 200 >"$R/smi.csv" 2>&1 &
smi=$!
P="python3 scripts/torch-bench-probe.py"
PROBE_TAG=g1 timeout 100 $P gpt2 native --out "$R/probe.jsonl" --lib "$L" --warmup 18 --blocks 4 --variants all,2-5 >>"$R/probe.log" 2>&1
PROBE_TAG=g2 timeout 100 $P gpt2 streamalloc --out "$R/probe.jsonl" --lib "$L" --warmup 18 --blocks 4 --variants all,2-5 >>"$R/probe.log" 2>&1
PROBE_TAG=r1 timeout 100 $P resnet50 native --out "$R/probe.jsonl" --lib "$L" --warmup 12 --blocks 3 --variants all,2-5 >>"$R/probe.log" 2>&1
PROBE_TAG=k1 timeout 100 $P generate native --out "$R/probe.jsonl" --lib "$L" --warmup 5 --blocks 2 --variants all >>"$R/probe.log" 2>&1
$P summary "$R/probe.jsonl" >"$R/probe-summary.md" 2>&1
for w in gpt2 resnet50; do
	timeout 150 python3 scripts/torch-bench.py lockstep $w --configs 'native; streamalloc pool' --out "$R/ls.jsonl" \
		--blocks-out "$R/ls-blocks.jsonl" --lib "$L" --warmup 18 --block-steps 6 --blocks 12 --pairs 1 --gc freeze >>"$R/ls.log" 2>&1
	echo "lockstep $w exit $?" >>"$R/ls.log"
done
python3 scripts/torch-bench.py lockstep-table "$R/ls-blocks.jsonl" >"$R/ls-table.md" 2>&1
kill $smi
cat "$R/probe-summary.md" "$R/ls-table.md"; tail -3 "$R/probe.log"
tar -C "$OUT" -czf "$OUT/p2.tgz" p2 && rm -rf "$R"
