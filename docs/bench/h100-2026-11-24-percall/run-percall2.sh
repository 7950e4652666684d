#!/usr/bin/env bash
# The second device call of this folder: capi_bench with each call of a
# ring of varied sizes timed hot, after evicting the caches, and handed
# between two threads (build/capi from scripts/build-capi.sh).
set -u
CONF='pool,split_giant,slack=0.03'
date -u | tee "$OUT/date2.txt"
for rep in ${REPS:-1 2 3}; do
	echo "== build/capi, $CONF, round $rep"
	CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$CONF timeout 60 build/capi/capi_bench 200000 2
done 2>&1 | tee "$OUT/capi-bench${SUFFIX:-2}.txt"
lscpu | grep -E 'Model name|^CPU\(s\)|L2|L3|Socket' | tee "$OUT/cpu.txt"
date -u | tee -a "$OUT/date2.txt"
