#!/usr/bin/env bash
# The adaptors' A/B on the card: main (590c063, with this branch's
# mr/adaptors_bench_test.go copied in, so both sides run the same
# benchmarks) against this branch, both built with scripts/gpu-build.sh ./mr
# and copied here as mr-old.test.gz and mr-new.test.gz beside
# bench-ab.sh. First the new binary's adaptor tests on the card, then the
# adaptor benchmarks interleaved old, new six times (bench-ab.sh), then a
# CPU profile of the new adaptors over a pool. Logs: $OUT/adapt2.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/adapt2
mkdir -p "$W"
{ date -u; nvidia-smi -L; lscpu | sed -n 1,20p; } >"$W/machine.txt" 2>&1
gzip -dc mr-new.test.gz >mr-new.test && chmod +x mr-new.test
./mr-new.test -test.short -test.v -test.run 'TestPoolOwners|TestAdaptorsOverOwnedBadInput|TestStatsOverPoolExact|TestHotPathsDoNotAllocate|TestCallersFP|TestTracking|TestLogging|TestAdaptorsConformance|TestAdaptorsBadInput|TestAligned|TestLimit|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
echo "rc=$?" >>"$W/tests.log"
echo "tests done $(date -u +%T)" >>"$W/machine.txt"
OUT=$W/ab ./bench-ab.sh mr-old.test.gz mr-new.test.gz 'AdaptorsOverPool|StatsStreams|TrackingDeep' ${ROUNDS:-6} ${BENCHTIME:-150ms} >/dev/null 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
./mr-new.test -test.run '^$' -test.bench 'AdaptorsOverPool/(stats|limit|aligned|logging-file|tracking-16)$' \
	-test.benchtime ${PROFTIME:-500ms} -test.cpuprofile "$W/adaptors-new.prof" >"$W/prof-new.txt" 2>&1
echo "profile done $(date -u +%T)" >>"$W/machine.txt"
tar -C "$W" -czf "${OUT:-.}/adapt2.tgz" .
