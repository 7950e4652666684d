#!/usr/bin/env bash
# One device call: the GPU tests of mr and pluggable, then generation
# (scripts/torch-bench.py generate) under the lockstep protocol: native,
# the C ABI's default pool, pool,upstream=vmm,mapped_slack and the same
# with small_in_ranges, inside BUDGET seconds.
# Built on the development machine into the folder it runs from:
#     scripts/build-capi.sh DIR/build/capi && cp -r python DIR/ && mkdir DIR/scripts && cp scripts/*.py scripts/*.sh DIR/scripts/
#     scripts/gpu-build.sh ./mr ./pluggable && cp -r .gpubin DIR/   (with mr/testdata, pluggable/testdata, testdata/traces, replay/testdata)
# Run on the GPU machine:
#     OUT=... DIR/run.sh     (BUDGET=seconds, default 420)
# Everything it writes is packed into $OUT/vgen.tgz.
set -u
cd "$(dirname "$0")" || exit 1
R=${OUT:?}/vgen; mkdir -p "$R"
L=$PWD/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
began=$(date +%s)
budget=${BUDGET:-420}
{ date -u; cat /proc/loadavg; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$R/machine.txt" 2>&1
LOGDIR=$R/gpu TEST_TIMEOUT=100s timeout 110 .gpubin/run.sh test mr pluggable >"$R/gpu-tests.txt" 2>&1
echo "gpu tests exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
left=$((budget - ($(date +%s) - began)))
V='native; streamalloc pool; streamalloc pool,upstream=vmm,mapped_slack; streamalloc pool,upstream=vmm,mapped_slack,small_in_ranges'
timeout $((left - 15)) python3 scripts/torch-bench.py lockstep generate --configs "$V" --warmup 5 --block-steps 1 \
	--blocks "${BLOCKS:-100}" --lib "$L" --out "$R/ls.jsonl" --blocks-out "$R/blocks.jsonl" >>"$R/ls.log" 2>&1
echo "generate exit $? at $(($(date +%s) - began)) s" >>"$R/ls.log"
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" >"$R/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py lockstep-table "$R/blocks.jsonl" --ref pool >"$R/lockstep-table-vs-pool.md" 2>&1
python3 scripts/torch-bench.py table "$R/ls.jsonl" >"$R/table.md" 2>&1
echo "done $(date -u +%T)" >>"$R/machine.txt"
grep -v -i warn "$R/ls.log" | tail -12; tail -25 "$R/gpu-tests.txt"; cat "$R/lockstep-table.md" "$R/lockstep-table-vs-pool.md" "$R/table.md"
tar -C "$OUT" -czf "$OUT/vgen.tgz" vgen && rm -rf "$R"
