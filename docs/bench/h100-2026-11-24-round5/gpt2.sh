#!/usr/bin/env bash
# GPT-2 step time under PyTorch's native allocator, the C ABI's default
# pool and the pool with split_giant (the giant chunks split at the
# high-water mark for sizes seen before), interleaved round by round in one
# device call. Run from a folder holding build/capi/, python/ and scripts/
# (built with scripts/build-capi.sh DIR/build/capi; cp -r python scripts DIR/):
#     OUT=... DIR/gpt2.sh   (ROUNDS=n, DEADLINE=seconds)
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/gpt2; mkdir -p "$R"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$R/machine.txt"
INTERLEAVE='native; streamalloc pool; streamalloc pool,split_giant' \
  ROUNDS=${ROUNDS:-6} WORKLOADS=gpt2 WARMUP=6 STEPS=12 RUN_TIMEOUT=60 DEADLINE=${DEADLINE:-470} \
  scripts/torch-bench.sh "$R/out" build/capi/libstreamalloc.so >"$R/gpt2.log" 2>&1
echo "exit $?" >>"$R/machine.txt"
python3 scripts/torch-bench.py rounds "$R/out/results.jsonl" >"$R/rounds.txt" 2>&1
tar -C "$R/.." -czf "$R/../gpt2.tgz" gpt2 && rm -rf "$R"
