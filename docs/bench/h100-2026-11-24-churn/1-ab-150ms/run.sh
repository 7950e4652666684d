#!/usr/bin/env bash
# The churn/scaling measurements on the H100 machine: old (5159933), old
# pool with the new harness (oldpool), new; see the commands below.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}
export STREAMALLOC_DEVICE=${DEV:-cuda} PATH=$here:$PATH
R=${ROUNDS:-6} R2=${ROUNDS2:-4} BT=${BT:-150ms} BT2=${BT2:-1s}
cd "$here"
mkdir -p "$out/ac" "$out/bc" "$out/more"
{ date -u; uname -a; nproc; lscpu | head -24; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv; } >"$out/machine.txt" 2>&1
PAT='Pair/resource=pool/|Streams/resource=pool/|Random/resource=pool$'
echo "== old vs new, 6 rounds, 150ms"; date -u
OUT=$out/ac ./bench-ab.sh ./mr-old.test ./mr-new.test "$PAT" $R $BT >"$out/ac/benchstat.txt" 2>&1
echo "== oldpool (new harness) vs new, 4 rounds"; date -u
OUT=$out/bc ./bench-ab.sh ./mr-oldpool.test ./mr-new.test 'Streams/resource=pool/|Random/resource=pool$' $R2 $BT >"$out/bc/benchstat.txt" 2>&1
echo "== parts"; date -u
./mr-new.test -test.run '^$' -test.bench 'PoolScaling' -test.benchtime 100ms >"$out/more/parts-new.txt" 2>&1
echo "== profiles"; date -u
./mr-new.test -test.run '^$' -test.bench 'Random/resource=pool$' -test.benchtime $BT2 -test.cpuprofile "$out/more/random-new.prof" >"$out/more/random-new.txt" 2>&1
./mr-old.test -test.run '^$' -test.bench 'Random/resource=pool$' -test.benchtime $BT2 -test.cpuprofile "$out/more/random-old.prof" >"$out/more/random-old.txt" 2>&1
./mr-new.test -test.run '^$' -test.bench 'Streams/resource=pool/goroutines=16$' -test.benchtime $BT2 -test.cpuprofile "$out/more/streams16-new.prof" >"$out/more/streams16-new.txt" 2>&1
echo "== tests"; date -u
cd "$here/../../mr" && timeout 120 "$here/mr-new.test" -test.run '^(TestHotPathsDoNotAllocate|TestPool.*|TestPtrMap|TestResourcesConformance)$' -test.count 1 -test.v >"$out/more/tests.log" 2>&1; echo "tests rc=$?" >>"$out/more/tests.log"
date -u
cd "$out" && { cat ac/benchstat.txt bc/benchstat.txt; grep -E '^Benchmark' more/parts-new.txt; grep -cE '^--- PASS' more/tests.log; grep -E '^--- FAIL|^FAIL|^ok|^PASS|rc=' more/tests.log; } >summary.txt 2>&1
tar czf results.tgz ac bc more machine.txt && rm -rf ac bc more machine.txt
cat summary.txt
