#!/usr/bin/env bash
# gpu-adaptors.sh runs, on the GPU machine, the adaptors' tests of one mr
# test binary on the card and the adaptors' benchmarks of two (old and new)
# interleaved with bench-ab.sh, then a CPU profile of the new adaptors over
# a pool. Build each binary with `scripts/gpu-build.sh ./mr` in its tree
# (the old tree needs mr/adaptors_bench_test.go for AdaptorsOverPool), copy
# them as mr-old.test.gz and mr-new.test.gz beside this script and
# bench-ab.sh, and run it from there; the logs go to $OUT/logs.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=$(mktemp -d)
for b in old new; do gzip -dc mr-$b.test.gz >mr-$b.test && chmod +x mr-$b.test; done
{ date -u; nvidia-smi -L; lscpu | head -20; nproc; } >"$W/machine.txt" 2>&1
./mr-new.test -test.short -test.v -test.run 'TestPoolOwners|TestAdaptorsOverOwnedBadInput|TestStatsOverPoolExact|TestHotPathsDoNotAllocate|TestCallersFP|TestTracking|TestLogging|TestAdaptorsConformance|TestAdaptorsBadInput|TestPoolFast|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
echo "rc=$?" >>"$W/tests.log"
mkdir -p "$W/ab-adaptors" "$W/ab-pair"
OUT=$W/ab-adaptors ./bench-ab.sh ./mr-old.test ./mr-new.test 'AdaptorsOverPool|StatsStreams|Adaptors$' 6 150ms >/dev/null
OUT=$W/ab-pair ./bench-ab.sh ./mr-old.test ./mr-new.test 'Pair/resource=pool/' 6 150ms >/dev/null
./mr-new.test -test.run '^$' -test.bench 'AdaptorsOverPool/(stats|limit|retry|logging-file|tracking-16)$' \
	-test.benchtime 1s -test.cpuprofile "$W/adapt-new.prof" >"$W/prof-new.txt" 2>&1
tar -C "$W" -czf "${OUT:-.}/logs.tgz" .
