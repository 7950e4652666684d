#!/usr/bin/env bash
# The adaptor benchmarks of run.sh again, with every process pinned to one
# CPU (taskset; Go then runs with GOMAXPROCS=1), so that the goroutine
# does not move between CPUs during a run: the unpinned runs' samples of
# one binary spread by 20-80% on this host. Old and new interleaved six
# times by bench-ab.sh; with TESTS=1, the new binary's adaptor tests on
# the card first (as run.sh). Logs: $OUT/pinned.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/pinned
mkdir -p "$W"
{ date -u; nproc; taskset -pc $$; } >"$W/machine.txt" 2>&1
if [ "${TESTS:-}" = 1 ]; then
	gzip -dc mr-new.test.gz >mr-new.test && chmod +x mr-new.test
	./mr-new.test -test.short -test.v -test.run 'TestPoolOwners|TestAdaptorsOverOwnedBadInput|TestStatsOverPoolExact|TestHotPathsDoNotAllocate|TestCallersFP|TestTracking|TestLogging|TestAdaptorsConformance|TestAdaptorsBadInput|TestAligned|TestLimit|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
	echo "rc=$?" >>"$W/tests.log"
fi
OUT=$W/ab taskset -c ${CPU:-7} ./bench-ab.sh mr-old.test.gz mr-new.test.gz 'AdaptorsOverPool|TrackingDeep' \
	${ROUNDS:-6} ${BENCHTIME:-300ms} >/dev/null 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
tar -C "$W" -czf "${OUT:-.}/pinned.tgz" .
