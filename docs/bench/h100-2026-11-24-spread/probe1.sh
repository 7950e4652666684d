#!/usr/bin/env bash
# First device call: where GPT-2's and ResNet-50's step time goes and what
# moves it (scripts/torch-bench-probe.py), and a first try of the lockstep
# protocol (torch-bench.py lockstep) on GPT-2, blocks of six steps (the
# default when this ran; --block-steps 6 keeps it). Run from a folder holding
# build/capi/ (scripts/build-capi.sh DIR/build/capi), python/ and scripts/:
#     OUT=... DIR/probe1.sh
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/p1; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
{
	date -u; nproc; lscpu; cat /proc/loadavg; uptime; free -g
	grep MHz /proc/cpuinfo | sort | uniq -c
	nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER
	ps aux --sort=-%cpu | head -15
	python3 -c 'import torch; print(torch.__version__, torch.get_num_threads(), torch.backends.cuda.matmul.allow_tf32)'
} >"$R/machine.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv -lms 200 >"$R/smi.csv" 2>&1 &
smi=$!
# The host's speed, process by process: a fixed pure-Python loop, best of 20.
for k in 1 2 3 4 5 6 7 8; do
	python3 -c 'import time,os
b=[]
for r in range(20):
    t=time.perf_counter(); s=0
    for k in range(200000): s+=k*k
    b.append(time.perf_counter()-t)
b.sort(); print("calib pid %d cpu %d best %.2f ms median %.2f ms" % (os.getpid(), os.sched_getcpu(), 1e3*b[0], 1e3*b[10]))'
done >"$R/calib.txt" 2>&1
P="python3 scripts/torch-bench-probe.py"
n=0
for a in native streamalloc native streamalloc; do
	n=$((n + 1))
	PROBE_TAG=g$n timeout 120 $P gpt2 $a --out "$R/probe.jsonl" --lib "$L" --warmup 18 --blocks 4 --variants all,2-5 >>"$R/probe.log" 2>&1
	echo "gpt2 $a exit $?" >>"$R/probe.log"
done
for a in native streamalloc; do
	PROBE_TAG=r timeout 120 $P resnet50 $a --out "$R/probe.jsonl" --lib "$L" --warmup 12 --blocks 3 --variants all,2-5 >>"$R/probe.log" 2>&1
	echo "resnet50 $a exit $?" >>"$R/probe.log"
done
$P summary "$R/probe.jsonl" >"$R/probe-summary.md" 2>&1
timeout 200 python3 scripts/torch-bench.py lockstep gpt2 --configs 'native; streamalloc pool' --out "$R/ls.jsonl" \
	--blocks-out "$R/ls-blocks.jsonl" --lib "$L" --warmup 18 --block-steps 6 --blocks 12 --pairs 2 >"$R/ls.log" 2>&1
echo "lockstep exit $?" >>"$R/ls.log"
python3 scripts/torch-bench.py lockstep-table "$R/ls-blocks.jsonl" >"$R/ls-table.md" 2>&1
kill $smi
cat "$R/calib.txt" "$R/probe-summary.md" "$R/ls-table.md"
tar -C "$OUT" -czf "$OUT/p1.tgz" p1 && rm -rf "$R"
