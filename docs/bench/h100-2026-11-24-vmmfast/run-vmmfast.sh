#!/usr/bin/env bash
# One device call: the mr tests of Virtual and of the Pool over it on the
# card, the commit benchmarks (pieces against granule by granule), then
# GPT-2 under native, the default pool and the pool over Virtual, the
# interleaved protocol (odd rounds in this order, even rounds reversed).
# Run from a folder holding .gpubin/ (scripts/gpu-build.sh ./mr ./cuda),
# mr/testdata/, build/capi/ (scripts/build-capi.sh), python/ and scripts/.
# Logs under $1. BUDGET: seconds the whole call may take (default 560).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
t0=$(date +%s)
BUDGET=${BUDGET:-560}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
cat .gpubin/BUILDINFO >>"$R/machine.txt"
for b in mr cuda; do gzip -dc .gpubin/$b.test.gz >$b/$b.test && chmod +x $b/$b.test; done
(cd mr && STREAMALLOC_DEVICE=cuda timeout 150 ./mr.test -test.run 'Virtual|Grow' -test.v -test.timeout 140s \
  -test.bench 'CommitLarge' -test.benchtime 10x) >"$R/mr-card.log" 2>&1
echo "mr tests rc=$? at $(( $(date +%s) - t0 )) s"
grep -E '^(--- |ok|FAIL|PASS)|^Benchmark' "$R/mr-card.log" | grep -v '^    ' | grep -E 'FAIL|^ok|^PASS|^Benchmark' | tail -20
grep -c -- '--- PASS' "$R/mr-card.log" | sed 's/^/passed: /'
left=$(( BUDGET - ($(date +%s) - t0) - 60 ))
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm' ROUNDS=${ROUNDS:-6} WORKLOADS=${WORKLOADS:-gpt2} WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=$left \
  scripts/torch-bench.sh "$R/rounds" build/capi/libstreamalloc.so >"$R/rounds.log" 2>&1
echo "interleave done at $(( $(date +%s) - t0 )) s"
tar czf "$R/rounds.tar.gz" -C "$R" rounds
tail -40 "$R/rounds.log"
