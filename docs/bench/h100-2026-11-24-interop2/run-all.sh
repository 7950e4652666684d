#!/usr/bin/env bash
# Device driver for the issue-13 runs (detached with setsid; logs under $R).
set -u
cd "$(dirname "$0")"
R=${R:-/tmp/torch13}
mkdir -p "$R"
exec >"$R/driver.log" 2>&1
t0=$(date +%s)
el() { echo "== $1 at $(( $(date +%s) - t0 )) s ($(date -u +%FT%TZ))"; }
el start
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv,noheader
nproc; uptime
lib=build/capi/libstreamalloc.so
el capi-bench
CONFS="pool pool,upstream=vmm" scripts/capi-bench.sh build/capi 200000 4 >"$R/capi-bench.txt" 2>&1
el vmm-runs
WARMUP=6 STEPS=12 RUN_TIMEOUT=120 RUNS='resnet50 streamalloc pool,upstream=vmm; resnet50 expandable; resnet50 streamalloc pool,upstream=vmm; gpt2 streamalloc pool,upstream=vmm; gpt2 expandable; gpt2 streamalloc pool,upstream=vmm' scripts/torch-bench.sh "$R/vmm" $lib
el gen-cupy
WARMUP=5 STEPS=10 RUN_TIMEOUT=120 RUNS='generate native; generate streamalloc pool; generate streamalloc pool,upstream=vmm; cupy cupy-pool; cupy streamalloc pool; cupy streamalloc pool,upstream=vmm' scripts/torch-bench.sh "$R/gen" $lib
el interleave
INTERLEAVE='native; streamalloc pool' ROUNDS=6 WORKLOADS='resnet50 gpt2' WARMUP=6 STEPS=12 RUN_TIMEOUT=120 scripts/torch-bench.sh "$R/rounds" $lib
el compile
WORKLOADS=compile RUN_TIMEOUT=170 scripts/record-snapshots.sh "$R/snap"
el done
echo done >"$R/done"
