#!/usr/bin/env bash
# One device call: the CuPy workload of scripts/torch-bench.py under the
# default pool with its memory history (log=), 5 warm-up and 20 timed
# steps. Run from a folder holding build/capi/ (scripts/build-capi.sh),
# python/ and scripts/. Logs under $1.
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/machine.txt"
timeout 60 python3 scripts/torch-bench.py run cupy streamalloc --lib build/capi/libstreamalloc.so \
  --conf "pool,log=$R/cupy-pool.csv" --warmup 5 --steps 20 --out "$R/results.jsonl" >"$R/run.log" 2>&1
echo "rc $?"; tail -5 "$R/run.log"; cat "$R/results.jsonl" | cut -c1-600
gzip -9 "$R/cupy-pool.csv"; ls -la "$R"
