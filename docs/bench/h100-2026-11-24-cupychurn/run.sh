#!/usr/bin/env bash
# One device call: the CuPy workload under CuPy's MemoryPool, the default
# pool and the pool with split_giant, interleaved (scripts/torch-bench.sh's
# protocol), the default pool of the library before split_giant twice,
# then GPT-2 under native, the default pool and split_giant. Run from a
# folder holding build/capi/ and build/capi-old/ (scripts/build-capi.sh),
# python/ and scripts/. Logs under $1.
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
began=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$R/machine.txt"
INTERLEAVE='cupy-pool; streamalloc pool; streamalloc pool,split_giant' ROUNDS=${ROUNDS:-8} WORKLOADS=cupy \
  RUN_TIMEOUT=40 DEADLINE=${CUPY_DEADLINE:-120} scripts/torch-bench.sh "$R/cupy" build/capi/libstreamalloc.so >"$R/cupy.log" 2>&1
echo "cupy done at $(($(date +%s) - began)) s"; tail -14 "$R/cupy.log"
RUNS='cupy streamalloc pool; cupy streamalloc pool' RUN_TIMEOUT=40 \
  scripts/torch-bench.sh "$R/cupy-old" build/capi-old/libstreamalloc.so >"$R/cupy-old.log" 2>&1
echo "old library done at $(($(date +%s) - began)) s"
INTERLEAVE='native; streamalloc pool; streamalloc pool,split_giant' ROUNDS=${GPT2_ROUNDS:-2} WORKLOADS=gpt2 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=${GPT2_DEADLINE:-110} scripts/torch-bench.sh "$R/gpt2" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "gpt2 done at $(($(date +%s) - began)) s"; tail -12 "$R/gpt2.log"
for f in "$R"/cupy/results.jsonl "$R"/cupy-old/results.jsonl "$R"/gpt2/results.jsonl; do
python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print(r["workload"], r["allocator"], r.get("conf",""), "round", r.get("round"), "median ms %.3f" % r["step_ms_median"], "reserved/allocated %.3f" % (r["peak_reserved"]/max(r["peak_allocated"],1)), "calls timed", r.get("device_allocs_timed","-"), r.get("device_frees_timed","-"), "sha", r["losses_sha"])
' "$f"
done
