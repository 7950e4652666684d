#!/usr/bin/env bash
# The tree after the last merges of 2026-11-25 on the card, in one device
# call: the GPU tests of the packages whose code changed (cudagpu's nil
# handles; mr's tlsf index and working chunks on fewer lines; buf and
# devarena's nil-stream errors; pluggable over the new mr), then capi_bench
# with the library before the line cuts (old: main before merging them) and
# after (new), alternated over four rounds, the ring's calls timed with
# 8 MiB evicted before each (the cold calls the line counts predict).
#
# Built on the development machine, in DIR (.devrun/final4):
#     scripts/gpu-build.sh ./gpu/cudagpu ./mr ./pluggable ./buf ./devarena && cp -r .gpubin DIR/
#     scripts/build-capi.sh DIR/new; (in a worktree of the old tree) scripts/build-capi.sh DIR/old
#     cp docs/bench/h100-2026-11-25-final4/run.sh DIR/
# Run there (the folder carried): cd DIR && OUT=... bash run.sh
set -u
here=$PWD
o=/tmp/final4
rm -rf "$o" && mkdir -p "$o"
pack() { tar -C /tmp -czf "$OUT/final4.tgz" final4; }
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$o/machine.txt" 2>&1
root=$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || (cd "$here/../.." && pwd))
rm -rf "$root/.gpubin-final4" && cp -r "$here/.gpubin" "$root/.gpubin-final4"
(cd "$root" && LOGDIR="$o/gpu" TEST_TIMEOUT=150s timeout 200 .gpubin-final4/run.sh test) >"$o/gpu-tests.txt" 2>&1
echo "gpu tests exit $? $(date -u +%T)" >>"$o/machine.txt"
pack
for rep in 1 2 3 4; do
	for d in old new; do
		echo "== $d, round $rep"
		env -u STREAMALLOC_CONF CAPI_BENCH_CUDA=1 timeout 40 "$d/capi_bench" 100000 2
	done
done >"$o/capi-bench.txt" 2>&1
echo "capi_bench done $(date -u +%T)" >>"$o/machine.txt"
pack && cp "$o/capi-bench.txt" "$o/machine.txt" "$o/gpu-tests.txt" "$OUT/"
