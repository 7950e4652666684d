#!/usr/bin/env bash
# The second device call of this folder (logs in b/). Runs from a folder
# holding two builds of scripts/build-capi.sh, old/ (main at 0b113a8) and
# new/ (this branch: the legacy stream kept in the device's state), with the same capi_bench
# (the newest capi_bench.c) and libtorch_control.so, plus python/ and
# scripts/; writes under $OUT.
#  1. capi_bench 100000 2, CAPI_BENCH_CUDA=1, old/new alternated, two rounds.
#  2. GPT-2 behind the C control (which times every call), one process per
#     run: old, new, new with GODEBUG=schedtrace=2000000000 (the Go
#     runtime's monitor then never sleeps, so no call has to wake it), twice.
#  3. GPT-2 lockstep: native, old, new, new with that GODEBUG.
set -u
CONF='pool,split_giant,slack=0.03'
SCHED=schedtrace=2000000000
o=$OUT/percall2b
mkdir -p "$o"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } >"$o/machine.txt" 2>&1
for rep in 1 2; do
	for d in old new; do
		echo "== $d, $CONF, round $rep"
		CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$CONF timeout 60 "$d/capi_bench" 100000 2
	done
done >"$o/capi-bench.txt" 2>&1
echo "capi_bench done $(date -u +%T)" >>"$o/machine.txt"
gpt2() { # name dir [GODEBUG]
	GODEBUG=${3:-} TORCH_CONTROL_DETAIL="$o/detail-$1.txt" timeout 100 python3 scripts/torch-bench.py run gpt2 control \
		--out "$o/res-control.jsonl" --lib "$PWD/$2/libstreamalloc.so" --control-lib "$2/libtorch_control.so" \
		--conf "sa:$CONF" --warmup 6 --steps 18 >"$o/log-$1.txt" 2>&1
	echo "== $1 rc=$? $(date -u +%T)" >>"$o/machine.txt"
}
gpt2 old1 old; gpt2 new1 new; gpt2 sched1 new $SCHED; gpt2 old2 old; gpt2 new2 new; gpt2 sched2 new $SCHED
export PYTHONUNBUFFERED=1
timeout "${LOCKSTEP_TIMEOUT:-90}" python3 scripts/torch-bench.py lockstep gpt2 \
	--configs "native; streamalloc $CONF STREAMALLOC_LIB=$PWD/old/libstreamalloc.so; streamalloc $CONF STREAMALLOC_LIB=$PWD/new/libstreamalloc.so; streamalloc $CONF STREAMALLOC_LIB=$PWD/new/libstreamalloc.so GODEBUG=$SCHED" \
	--out "$o/ls.jsonl" --blocks-out "$o/blocks.jsonl" --warmup 12 --block-steps 1 --blocks "${LOCKSTEP_BLOCKS:-150}" >"$o/ls.log" 2>&1
echo "lockstep exit $? $(date -u +%T)" >>"$o/machine.txt"
python3 scripts/torch-bench.py lockstep-table "$o/blocks.jsonl" >"$o/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$o/ls.jsonl" >"$o/table.md" 2>&1
python3 scripts/torch-bench.py table "$o/res-control.jsonl" >"$o/table-control.md" 2>&1
tar -C "$OUT" -czf "$OUT/percall2b.tgz" percall2b && cp "$o/capi-bench.txt" "$o/machine.txt" "$o/lockstep-table.md" "$o/table-control.md" "$OUT/"
rm -rf "$o"
