#!/usr/bin/env bash
# GPT-2 under native and the pool over a driver pool of its own (frees that do not synchronize),
# the interleaved protocol, one call (logs under $1).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader
INTERLEAVE='native; streamalloc pool,upstream=async' ROUNDS=6 WORKLOADS=gpt2 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 DEADLINE=235 \
  scripts/torch-bench.sh "$R/rounds" build/capi/libstreamalloc.so > "$R/rounds.log" 2>&1
echo "interleave done at $(( $(date +%s) - t0 )) s"
tail -30 "$R/rounds.log"
cat "$R/rounds/rounds.md" 2>/dev/null
