#!/usr/bin/env bash
# The device call of this folder: where a call's time goes under PyTorch.
# Runs from a folder holding build/capi (scripts/build-capi.sh),
# build/capi-noquery (the same with GOFLAGS=-tags=streamalloc_nocapturequery),
# build/capi-sym (libstreamalloc.so built without -s, for perf), python/
# and scripts/; writes its logs under $OUT.
set -u
CONF='pool,split_giant,slack=0.03'
date -u | tee "$OUT/date.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/date.txt"
echo "== capi_bench, $CONF" | tee "$OUT/capi-bench.txt"
for d in build/capi build/capi-noquery build/capi build/capi-noquery; do
	echo "== $d" >>"$OUT/capi-bench.txt"
	CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$CONF timeout 60 "$d/capi_bench" 200000 2 >>"$OUT/capi-bench.txt" 2>&1
done
cat "$OUT/capi-bench.txt"
gpt2() { # name lib mode
	TORCH_CONTROL_DETAIL="$OUT/detail-$1.txt" timeout 120 python3 scripts/torch-bench.py run gpt2 control \
		--out "$OUT/res-$1.jsonl" --lib "$2" --control-lib build/capi/libtorch_control.so \
		--conf "$3" --warmup 6 --steps 24 >"$OUT/log-$1.txt" 2>&1
	echo "== $1 rc=$?"; tail -3 "$OUT/log-$1.txt"; cat "$OUT/detail-$1.txt" 2>/dev/null
}
gpt2 sa "$PWD/build/capi/libstreamalloc.so" "sa:$CONF"
gpt2 async "$PWD/build/capi/libstreamalloc.so" "async"
gpt2 sa-noquery "$PWD/build/capi-noquery/libstreamalloc.so" "sa:$CONF"
if command -v perf >/dev/null; then
	TORCH_CONTROL_DETAIL="$OUT/detail-perf.txt" timeout 150 perf record -F 2000 -g -o /tmp/perf.data \
		python3 scripts/torch-bench.py run gpt2 control --out "$OUT/res-perf.jsonl" \
		--lib "$PWD/build/capi-sym/libstreamalloc.so" --control-lib build/capi/libtorch_control.so \
		--conf "sa:$CONF" --warmup 6 --steps 24 >"$OUT/log-perf.txt" 2>&1
	perf report -i /tmp/perf.data --no-children --sort dso,sym --stdio 2>/dev/null | head -300 >"$OUT/perf-report.txt"
	perf report -i /tmp/perf.data --no-children --dsos libstreamalloc.so --sort sym --stdio -g none 2>/dev/null | head -120 >"$OUT/perf-go.txt"
else
	echo "no perf on this machine" | tee "$OUT/perf-report.txt"
fi
date -u | tee -a "$OUT/date.txt"
