#!/usr/bin/env bash
# GPT-2 under native, the default pool (over cuMemAlloc: frees that wait for
# the device) and the pool over a driver pool of its own (the same calls,
# frees that do not wait), the interleaved protocol in one call: odd rounds
# in this order, even rounds reversed. Logs under $1 (rounds.tar.gz holds
# every process's log and results.jsonl).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=async' ROUNDS=6 WORKLOADS=gpt2 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=${DEADLINE:-300} \
  scripts/torch-bench.sh "$R/rounds" build/capi/libstreamalloc.so > "$R/rounds.log" 2>&1
echo "interleave done at $(( $(date +%s) - t0 )) s"
tar czf "$R/rounds.tar.gz" -C "$R" rounds
cat "$R/rounds.log"
