#!/usr/bin/env bash
# The first device call of this folder (logs in a/): the C ABI's per-call
# cost, second pass. Runs from a folder holding three builds of
# scripts/build-capi.sh,
#   old/  (main at 0b113a8), keep/ (keep-experiment.patch applied: a yield
#   every 5 ms per calling thread, not merged), new/ (that patch and the
#   legacy stream kept in the device's state),
# each with the same capi_bench (the newest capi_bench.c) and
# libtorch_control.so, plus python/ and scripts/; writes under $OUT.
#  1. capi_bench 100000 2, CAPI_BENCH_CUDA=1, old/keep/new alternated, two
#     rounds, and old once with GODEBUG=schedtrace=2000000000 (the Go
#     runtime's monitor then never sleeps: the part of the crossing after
#     idle that is waking it).
#  2. GPT-2 behind the C control (which times every call), one process per
#     library, alternated.
#  3. GPT-2 lockstep: native, old, new (LOCKSTEP_BLOCKS blocks).
set -u
CONF='pool,split_giant,slack=0.03'
o=$OUT/percall2
mkdir -p "$o"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
  lscpu | grep -E 'Model name|^CPU\(s\)|L2|L3|Socket'; } >"$o/machine.txt" 2>&1
for rep in 1 2; do
	for d in old keep new; do
		echo "== $d, $CONF, round $rep"
		CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$CONF timeout 60 "$d/capi_bench" 100000 2
	done
done >"$o/capi-bench.txt" 2>&1
echo "== old, GODEBUG=schedtrace=2000000000" >>"$o/capi-bench.txt"
GODEBUG=schedtrace=2000000000 CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$CONF timeout 60 old/capi_bench 100000 2 >>"$o/capi-bench.txt" 2>&1
echo "capi_bench done $(date -u +%T)" >>"$o/machine.txt"
gpt2() { # name dir
	TORCH_CONTROL_DETAIL="$o/detail-$1.txt" timeout 100 python3 scripts/torch-bench.py run gpt2 control \
		--out "$o/res-control.jsonl" --lib "$PWD/$2/libstreamalloc.so" --control-lib "$2/libtorch_control.so" \
		--conf "sa:$CONF" --warmup 6 --steps 24 >"$o/log-$1.txt" 2>&1
	echo "== $1 rc=$?" >>"$o/machine.txt"
}
gpt2 old old; gpt2 new new; gpt2 keep keep; gpt2 new2 new; gpt2 old2 old
echo "control done $(date -u +%T)" >>"$o/machine.txt"
export PYTHONUNBUFFERED=1
timeout "${LOCKSTEP_TIMEOUT:-130}" python3 scripts/torch-bench.py lockstep gpt2 \
	--configs "native; streamalloc $CONF STREAMALLOC_LIB=$PWD/old/libstreamalloc.so; streamalloc $CONF STREAMALLOC_LIB=$PWD/new/libstreamalloc.so" \
	--out "$o/ls.jsonl" --blocks-out "$o/blocks.jsonl" --warmup 12 --block-steps 1 --blocks "${LOCKSTEP_BLOCKS:-240}" >"$o/ls.log" 2>&1
echo "lockstep exit $? $(date -u +%T)" >>"$o/machine.txt"
python3 scripts/torch-bench.py lockstep-table "$o/blocks.jsonl" >"$o/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$o/ls.jsonl" >"$o/table.md" 2>&1
python3 scripts/torch-bench.py table "$o/res-control.jsonl" >"$o/table-control.md" 2>&1
tar -C "$OUT" -czf "$OUT/percall2.tgz" percall2 && cp "$o/capi-bench.txt" "$o/machine.txt" "$o/lockstep-table.md" "$OUT/"
rm -rf "$o"
