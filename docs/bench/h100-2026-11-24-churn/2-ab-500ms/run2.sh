#!/usr/bin/env bash
# More rounds of the noisy figures: Random (old harness and pool, old pool
# with the new harness, new) and Streams at 1 and 16 goroutines.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}
export STREAMALLOC_DEVICE=${DEV:-cuda} PATH=$here:$PATH
R=${ROUNDS:-12} BT=${BT:-500ms}
cd "$here"
mkdir -p "$out/ac2" "$out/bc2"
{ date -u; nproc; nvidia-smi -L; } >"$out/machine2.txt" 2>&1
OUT=$out/ac2 ./bench-ab.sh ./mr-old.test ./mr-new.test 'Random/resource=pool$|Streams/resource=pool/goroutines=(1|16)$' $R $BT >"$out/ac2/benchstat.txt" 2>&1
OUT=$out/bc2 ./bench-ab.sh ./mr-oldpool.test ./mr-new.test 'Random/resource=pool$' $R $BT >"$out/bc2/benchstat.txt" 2>&1
date -u >>"$out/machine2.txt"
cd "$out" && { sed -n '/sec\/op/,/geomean/p;/pairs\/s/,/geomean/p' ac2/benchstat.txt bc2/benchstat.txt; } >summary2.txt 2>&1
tar czf results2.tgz ac2 bc2 machine2.txt && rm -rf ac2 bc2 machine2.txt
cat summary2.txt
