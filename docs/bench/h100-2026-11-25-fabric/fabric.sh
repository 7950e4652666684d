#!/usr/bin/env bash
# fabric.sh: what the card answers about fabric handles, and what
# streamalloc makes of it. Built on a machine with Go:
#
#     scripts/gpu-build.sh ./ipc ./gpu/cudagpu
#     mkdir -p DIR/scripts && cp -r .gpubin DIR/ && cp scripts/fabric-probe.py DIR/scripts/
#     cp docs/bench/h100-2026-11-25-fabric/fabric.sh DIR/
#
# then on the GPU machine, in DIR: bash fabric.sh (logs in $OUT).
set -u
out=${OUT:-$PWD/fabric-out}
mkdir -p "$out"
{
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
	nvidia-smi -q | grep -iE 'CUDA Version|Fabric|IMEX|Clique|Cluster' 
	echo "== /dev/nvidia-caps-imex-channels"
	ls -la /dev/nvidia-caps-imex-channels 2>&1
	echo "== /proc/devices (imex)"
	grep -i imex /proc/devices 2>&1 || echo "no nvidia-caps-imex-channels device registered"
	echo "== nvidia-imex"
	command -v nvidia-imex nvidia-imex-ctl 2>&1 || echo "no nvidia-imex on PATH"
} >"$out/machine.txt" 2>&1
# The driver's own answers, each probe a process of its own.
timeout 60 python3 scripts/fabric-probe.py >"$out/probe-vmm.txt" 2>&1
echo "exit $?" >>"$out/probe-vmm.txt"
timeout 60 python3 scripts/fabric-probe.py pool >"$out/probe-pool.txt" 2>&1
echo "exit $?" >>"$out/probe-pool.txt"
# streamalloc: the sharing suite's fabric case (gpu/cudagpu), and every
# test of ipc (its wire parsing changed), TestFabricRefusedOnCard among them.
LOGDIR=$out TEST_RUN='TestPhysicalSharingConformance' TEST_TIMEOUT=2m .gpubin/run.sh test gpu_cudagpu >"$out/run-cudagpu.txt" 2>&1
LOGDIR=$out TEST_TIMEOUT=3m .gpubin/run.sh test ipc >"$out/run-ipc.txt" 2>&1
grep -hE -- '--- (FAIL|SKIP)|fabric|Fabric' "$out"/*.test.log >"$out/fabric-lines.txt" 2>&1
echo done
