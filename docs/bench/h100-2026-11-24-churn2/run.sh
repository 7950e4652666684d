#!/usr/bin/env bash
# The pool's host path on the H100 machine: the mr test binaries of main
# (590c063), of the tree before the owner check (5723210: "preown") and of
# this branch (new), interleaved round by round in one lease, then CPU
# profiles of the new binary and its pool tests on the card.
#
# Build each side with scripts/gpu-build.sh ./mr in its tree and copy
# .gpubin/mr.test.gz here as mr-<side>.test.gz; run from this folder with
# OUT set, from any folder of a copy of the repository (its mr/ folder is
# the tests' working directory).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}
export STREAMALLOC_DEVICE=${DEV:-cuda}
R=${ROUNDS:-8} BT=${BT:-150ms}
sides=(main preown new)
cd "$here"
for b in "${sides[@]}"; do gzip -dc mr-$b.test.gz >mr-$b.test && chmod +x mr-$b.test; done
{ date -u; uname -a; nproc; lscpu | head -24; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv; } >"$out/machine.txt" 2>&1
W=$out/ab; mkdir -p "$W"
pat='Pair/resource=pool/|Random/resource=pool$|Streams/resource=pool/goroutines=(1|16)$'
for b in "${sides[@]}"; do : >"$W/$b.txt"; done
for ((i = 1; i <= R; i++)); do
	for b in "${sides[@]}"; do
		./mr-$b.test -test.run='^$' -test.bench="$pat" -test.benchmem -test.count=1 -test.benchtime=$BT >>"$W/$b.txt" 2>&1
	done
	echo "round $i $(date -u +%T)"
done
mkdir -p "$out/more"
./mr-new.test -test.run '^$' -test.bench 'Random/resource=pool$' -test.benchtime 1s -test.cpuprofile "$out/more/random-new.prof" >"$out/more/random-new.txt" 2>&1
./mr-main.test -test.run '^$' -test.bench 'Random/resource=pool$' -test.benchtime 1s -test.cpuprofile "$out/more/random-main.prof" >"$out/more/random-main.txt" 2>&1
./mr-new.test -test.run '^$' -test.bench 'Pair/resource=pool/size=4KiB$' -test.benchtime 1s -test.cpuprofile "$out/more/pair-new.prof" >"$out/more/pair-new.txt" 2>&1
root=$here
while [ "$root" != / ] && [ ! -f "$root/go.mod" ]; do root=$(dirname "$root"); done
cd "$root/mr" && timeout 90 "$here/mr-new.test" -test.run '^(TestHotPathsDoNotAllocate|TestPool.*|TestPtrMap|TestStreamTable.*|TestResourcesConformance)$' -test.count 1 -test.v >"$out/more/tests.log" 2>&1
echo "tests rc=$?" >>"$out/more/tests.log"
date -u
cd "$out" && tar czf results.tgz ab more machine.txt && rm -rf ab more machine.txt
ls -la "$out"
