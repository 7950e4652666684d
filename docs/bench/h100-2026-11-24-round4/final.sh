#!/usr/bin/env bash
# The round's final proof on one GPU machine, in one call: the GPU test
# suite of the final tree, a soak of its command, and the pool's host path
# (pair against Async, random churn, streams) of the round's start
# (590c063) and the final tree interleaved round by round.
#
# Built on the development machine, in the folder this script runs from
# (carried to the GPU machine):
#     scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr ./pluggable ./buf ./sanitize ./ipc ./replay ./soak
#     go build -o DIR/streamalloc ./cmd/streamalloc && cp scripts/gpu-soak.sh DIR/
#     (at 590c063) go test -c -ldflags='-s -w' -o DIR/mr-old.test ./mr && gzip DIR/mr-old.test
# Run there from the repository's root, .gpubin and DIR carried:
#     OUT=... DIR/final.sh   (SOAK=duration, ROUNDS=n)
# Everything it writes is packed into $OUT/final.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
out=${OUT:?}/final
mkdir -p "$out"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$out/machine.txt" 2>&1
# 1. The suite.
LOGDIR=$out/suite TEST_TIMEOUT=6m "$root/.gpubin/run.sh" test >"$out/suite.log" 2>&1; echo "suite exit $?" >>"$out/machine.txt"
# 2. The soak.
OUT=$out "$here/gpu-soak.sh" "${SOAK:-150s}" "$here/streamalloc" >"$out/soak.log" 2>&1; echo "soak exit $?" >>"$out/machine.txt"
# 3. The host path, old against new.
export STREAMALLOC_DEVICE=cuda
cd "$here" || exit 1
gzip -dc "$root/.gpubin/mr.test.gz" >mr-new.test && gzip -dc mr-old.test.gz >mr-old.test && chmod +x mr-new.test mr-old.test
pat='Pair/resource=(pool|async)/|Random/resource=pool$|Streams/resource=pool/'
: >"$out/old.txt"; : >"$out/new.txt"
for ((i = 1; i <= ${ROUNDS:-6}; i++)); do
	./mr-old.test -test.run='^$' -test.bench="$pat" -test.benchmem -test.count=1 -test.benchtime=150ms >>"$out/old.txt" 2>&1
	./mr-new.test -test.run='^$' -test.bench="$pat" -test.benchmem -test.count=1 -test.benchtime=150ms >>"$out/new.txt" 2>&1
	echo "round $i $(date -u +%T)" >>"$out/machine.txt"
done
date -u >>"$out/machine.txt"
rm -f mr-new.test mr-old.test
tar -C "$out/.." -czf "$out/../final.tgz" final && rm -rf "$out"
