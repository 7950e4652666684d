#!/usr/bin/env bash
# device.sh: the churn3 proof on the H100 machine, in one call. Built on
# the development machine into this folder (carried to the GPU machine):
#   (at dbc0a7c)                          go test -c -o mr-main.test ./mr
#   (at dbc0a7c, bench/random.go of churn) go test -c -o mr-mainH.test ./mr
#   (at the churn branch)                  go test -c -o mr-churn.test ./mr
#   gzip mr-*.test
# Run there: OUT=... ./device.sh; everything lands in $OUT/churn3.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=${OUT:?}/churn3
mkdir -p "$res"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; } >"$res/machine.txt" 2>&1
export STREAMALLOC_DEVICE=cuda
for b in main mainH churn; do gzip -dc "$here/mr-$b.test.gz" >"$res/mr-$b.test"; chmod +x "$res/mr-$b.test"; done
# 1. main, main with the new harness, churn: interleaved, six rounds.
OUT=$res/ab ROUNDS=${ROUNDS:-6} BT=150ms PAT='Random/resource=pool$|Pair/resource=pool/' \
	"$here/run.sh" "$res/mr-main.test" "$res/mr-mainH.test" "$res/mr-churn.test" >"$res/ab.log" 2>&1
date -u >>"$res/machine.txt"
# 2. Random alone, process by process, with memory and CPU samples.
OUT=$res PROCS=${PROCS:-6} "$here/diag.sh" "$res/mr-churn.test" >"$res/diag.log" 2>&1
date -u >>"$res/machine.txt"
rm -f "$res"/mr-*.test
tar -C "$res/.." -czf "$res/../churn3.tgz" churn3 && rm -rf "$res"
