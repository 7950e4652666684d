#!/usr/bin/env bash
# The second device call: more interleaved GPT-2 rounds of the four
# allocators of run.sh, one ResNet-50 round (native, the default pool, the
# chunked pool over Virtual with wait_frees) for the reserved bytes, and
# the CuPy workload under the default pool, the same with 256 MiB chunks
# (so that every request of the workload fits a chunk: is its slowdown
# the pool's chunk churn?) and over Virtual with wait_frees. Run from a
# folder holding build/capi/, python/ and scripts/. Logs under $1.
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
began=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
C1='pool,upstream=vmm,in_place=false'
C2='pool,upstream=vmm,in_place=false,wait_frees'
INTERLEAVE="native; streamalloc pool; streamalloc $C1; streamalloc $C2" \
  ROUNDS=${ROUNDS:-4} WORKLOADS=gpt2 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 DEADLINE=${DEADLINE:-250} \
  scripts/torch-bench.sh "$R/gpt2" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "gpt2 done at $(($(date +%s) - began)) s"
tail -22 "$R/gpt2.log"
INTERLEAVE="native; streamalloc pool; streamalloc $C2" \
  ROUNDS=1 WORKLOADS=resnet50 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 \
  scripts/torch-bench.sh "$R/resnet50" build/capi/libstreamalloc.so >"$R/resnet50.log" 2>&1
echo "resnet50 done at $(($(date +%s) - began)) s"
tail -8 "$R/resnet50.log"
RUNS="cupy cupy-pool; cupy streamalloc pool; cupy streamalloc pool,chunk_size=256MiB; cupy streamalloc $C2" RUN_TIMEOUT=40 \
  scripts/torch-bench.sh "$R/cupy" build/capi/libstreamalloc.so >"$R/cupy.log" 2>&1
echo "cupy done at $(($(date +%s) - began)) s"
python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print(r["allocator"], r.get("conf",""), "median ms %.3f" % r["step_ms_median"], "reserved/allocated %.3f" % (r["peak_reserved"]/max(r["peak_allocated"],1)), "device calls timed", r.get("device_allocs_timed","-"), r.get("device_frees_timed","-"), "sha", r["losses_sha"])
' "$R/cupy/results.jsonl"
