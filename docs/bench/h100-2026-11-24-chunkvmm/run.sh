#!/usr/bin/env bash
# One device call: the cost of one large chunk from cuMemAlloc/cuMemFree
# against Virtual's plain Allocate/Deallocate (mr's BenchmarkChunkUpstream),
# then GPT-2 training under native, the default pool and the chunked pool
# over Virtual's physical allocations (pool,upstream=vmm,in_place=false,
# without and with wait_frees), the interleaved protocol of
# scripts/torch-bench.sh, then the CuPy workload once per allocator. Run
# from a folder holding build/capi/ (scripts/build-capi.sh), bin/mr.test.gz
# (go test -c ./mr), python/ and scripts/. Logs under $1 (the device
# command tars them).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
began=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
gunzip -kf bin/mr.test.gz
(cd bin && STREAMALLOC_DEVICE=cuda ./mr.test -test.run '^$' -test.bench ChunkUpstream -test.benchtime ${BENCHTIME:-5x} -test.count ${COUNT:-2}) >"$R/chunk-bench.txt" 2>&1
echo "bench done at $(($(date +%s) - began)) s"; grep -E 'ns/op|FAIL|ok' "$R/chunk-bench.txt" | sed 's/  */ /g' | cut -c1-220
C1='pool,upstream=vmm,in_place=false'
C2='pool,upstream=vmm,in_place=false,wait_frees'
INTERLEAVE="native; streamalloc pool; streamalloc $C1; streamalloc $C2" \
  ROUNDS=${ROUNDS:-6} WORKLOADS=gpt2 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 DEADLINE=${DEADLINE:-380} \
  scripts/torch-bench.sh "$R/gpt2" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "gpt2 done at $(($(date +%s) - began)) s"
tail -25 "$R/gpt2.log"
if [ $(($(date +%s) - began)) -lt ${CUPY_BY:-470} ]; then
  RUNS="cupy cupy-pool; cupy streamalloc pool; cupy streamalloc $C1; cupy streamalloc $C2" RUN_TIMEOUT=40 \
    scripts/torch-bench.sh "$R/cupy" build/capi/libstreamalloc.so >"$R/cupy.log" 2>&1
  echo "cupy done at $(($(date +%s) - began)) s"
  python3 -c '
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); print(r["allocator"], r.get("conf",""), "median ms %.3f" % r["step_ms_median"], "reserved/allocated %.3f" % (r["peak_reserved"]/max(r["peak_allocated"],1)), "device calls timed", r.get("device_allocs_timed","-"), r.get("device_frees_timed","-"), "sha", r["losses_sha"])
' "$R/cupy/results.jsonl"
fi
