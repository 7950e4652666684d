#!/usr/bin/env bash
# The second device call: whether the virtual-memory calls wait for a busy
# device (cuda BenchmarkVMMCallsBusy), the mr tests of Virtual and of the
# Pool over it on the card with the commit benchmark, ResNet-50 under
# native, the default pool and the pool over Virtual (interleaved), one
# GPT-2 process of the pool over Virtual with the library built with the
# tag streamalloc_vmmtrace (build/capi-trace), and more interleaved GPT-2
# rounds until the budget. Logs under $1. BUDGET: seconds (default 560).
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R"
t0=$(date +%s)
BUDGET=${BUDGET:-560}
el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/machine.txt"
cat .gpubin/BUILDINFO >>"$R/machine.txt"
for b in mr cuda; do gzip -dc .gpubin/$b.test.gz >$b/$b.test && chmod +x $b/$b.test; done
(cd cuda && STREAMALLOC_DEVICE=cuda timeout 60 ./cuda.test -test.run '^$' -test.bench 'VMMCallsBusy' -test.benchtime 10x) >"$R/cuda-busy.log" 2>&1
grep '^Benchmark' "$R/cuda-busy.log"
(cd mr && STREAMALLOC_DEVICE=cuda timeout 150 ./mr.test -test.run 'Virtual|Grow' -test.v -test.timeout 140s \
  -test.bench 'CommitLarge' -test.benchtime 10x) >"$R/mr-card.log" 2>&1
echo "mr tests rc=$? at $(el) s; passed $(grep -c -- '--- PASS' "$R/mr-card.log"), failed $(grep -c -- '--- FAIL' "$R/mr-card.log")"
grep '^Benchmark' "$R/mr-card.log"
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm' ROUNDS=${RROUNDS:-3} WORKLOADS=resnet50 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=$(( BUDGET - $(el) - 200 )) \
  scripts/torch-bench.sh "$R/resnet" build/capi/libstreamalloc.so >"$R/resnet.log" 2>&1
echo "resnet50 done at $(el) s"
RUNS='gpt2 streamalloc pool,upstream=vmm' WARMUP=6 STEPS=12 RUN_TIMEOUT=60 \
  scripts/torch-bench.sh "$R/trace" build/capi-trace/libstreamalloc.so >"$R/trace.log" 2>&1
echo "traced gpt2 done at $(el) s"
INTERLEAVE='native; streamalloc pool; streamalloc pool,upstream=vmm' ROUNDS=6 WORKLOADS=gpt2 WARMUP=6 STEPS=12 \
  RUN_TIMEOUT=60 DEADLINE=$(( BUDGET - $(el) - 60 )) \
  scripts/torch-bench.sh "$R/gpt2" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "gpt2 done at $(el) s"
tar czf "$R/all.tar.gz" -C "$R" resnet trace gpt2
tail -22 "$R/resnet.log"; tail -14 "$R/gpt2.log"
