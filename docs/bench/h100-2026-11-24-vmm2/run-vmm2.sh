#!/usr/bin/env bash
# One device call: ResNet-50, then GPT-2, under native, the default pool
# and the pool over Virtual with its margin (pluggable.VMMMappedSlack),
# the interleaved protocol (odd rounds in this order, even rounds
# reversed). Run from a folder holding build/capi/ (scripts/build-capi.sh),
# python/ and scripts/. Logs under $1. BUDGET: seconds the whole call may
# take (default 330).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
t0=$(date +%s)
BUDGET=${BUDGET:-330}
el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm' ROUNDS=${RROUNDS:-3} WORKLOADS=resnet50 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=$(( BUDGET / 2 - 20 )) \
  scripts/torch-bench.sh "$R/resnet" build/capi/libstreamalloc.so >"$R/resnet.log" 2>&1
echo "resnet50 done at $(el) s"
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm' ROUNDS=${GROUNDS:-4} WORKLOADS=gpt2 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=$(( BUDGET - $(el) - 45 )) \
  scripts/torch-bench.sh "$R/gpt2" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "gpt2 done at $(el) s"
tar czf "$R/all.tar.gz" -C "$R" resnet gpt2
tail -24 "$R/resnet.log"; tail -24 "$R/gpt2.log"
