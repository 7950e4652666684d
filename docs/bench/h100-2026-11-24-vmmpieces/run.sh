#!/usr/bin/env bash
# One device call: ResNet-50 training under native, the default pool, the
# pool over Virtual with its margin, and the same with pieces=1 (each
# commit mapped as the fewest physical allocations: powers of two
# granules, not one granule each below 64), the interleaved protocol of
# scripts/torch-bench.sh. Run from a folder holding build/capi/
# (scripts/build-capi.sh), python/ and scripts/. Logs under $1.
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm,mapped_slack; streamalloc pool,upstream=vmm,mapped_slack,pieces=1' \
  ROUNDS=${ROUNDS:-3} WORKLOADS=resnet50 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 DEADLINE=${DEADLINE:-400} \
  scripts/torch-bench.sh "$R/resnet" build/capi/libstreamalloc.so >"$R/resnet.log" 2>&1
tar czf "$R/all.tar.gz" -C "$R" resnet
tail -30 "$R/resnet.log"
