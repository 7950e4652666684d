#!/usr/bin/env bash
# The device call of this folder. Runs from a folder holding two builds of
# scripts/build-capi.sh, old/ (main at da52350) and new/ (the branch), each
# with a capi_bench built from the same capi_bench.c and libtorch_control.so
# from the same torch_control.c, plus python/, scripts/ and the branch's
# .gpubin/ (scripts/gpu-build.sh pluggable mr); packs its logs into
# $OUT/cold.tgz after each step.
#  1. The branch's GPU tests of pluggable and mr (run from the repository
#     root, whose testdata they read).
#  2. capi_bench 100000 2, CAPI_BENCH_CUDA=1, STREAMALLOC_CONF unset (the
#     recommended pool over Virtual), old/new alternated: three rounds with
#     GODEBUG=schedtrace=2000000000 (the Go runtime's monitor never sleeps,
#     so a cold call does not pay for waking it and shows what it touches),
#     then one round without.
#  3. GPT-2 behind the C control (which times every call), the recommended
#     configuration, one process per run: old, new, three times.
set -u
CONF='pool,upstream=vmm,mapped_slack,small_at_peak'
SCHED=schedtrace=2000000000
here=$PWD
o=/tmp/cold # logs; packed into $OUT/cold.tgz after each step
rm -rf "$o" && mkdir -p "$o"
pack() { tar -C /tmp -czf "$OUT/cold.tgz" cold; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } >"$o/machine.txt" 2>&1
root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/../.." && pwd))
rm -rf "$root/.gpubin-cold" && cp -r "$here/.gpubin" "$root/.gpubin-cold"
(cd "$root" && LOGDIR="$o/gpu" TEST_TIMEOUT=90s timeout 120 .gpubin-cold/run.sh pluggable mr) >"$o/gpu-tests.txt" 2>&1
echo "gpu tests exit $? $(date -u +%T)" >>"$o/machine.txt"
pack
for rep in 1 2 3 4; do
	g=$SCHED
	[ "$rep" = 4 ] && g=
	for d in old new; do
		echo "== $d, round $rep, GODEBUG=$g"
		env -u STREAMALLOC_CONF GODEBUG=$g CAPI_BENCH_CUDA=1 timeout 40 "$d/capi_bench" 100000 2
	done
done >"$o/capi-bench.txt" 2>&1
echo "capi_bench done $(date -u +%T)" >>"$o/machine.txt"
pack
gpt2() { # name dir
	TORCH_CONTROL_DETAIL="$o/detail-$1.txt" timeout 60 python3 scripts/torch-bench.py run gpt2 control \
		--out "$o/res-control.jsonl" --lib "$here/$2/libstreamalloc.so" --control-lib "$2/libtorch_control.so" \
		--conf "sa:$CONF" --warmup 6 --steps 18 >"$o/log-$1.txt" 2>&1
	echo "== $1 rc=$? $(date -u +%T)" >>"$o/machine.txt"
	pack
}
gpt2 old1 old; gpt2 new1 new; gpt2 old2 old; gpt2 new2 new; gpt2 old3 old; gpt2 new3 new
python3 scripts/torch-bench.py table "$o/res-control.jsonl" >"$o/table-control.md" 2>&1
pack && cp "$o/capi-bench.txt" "$o/machine.txt" "$o/table-control.md" "$o/gpu-tests.txt" "$OUT/"
