#!/usr/bin/env bash
# The adaptors' A/B on the card, in one call: main (dbc0a7c) against this
# branch, both `go test -c -ldflags='-s -w' ./mr` binaries, copied here
# as mr-old.test.gz and mr-new.test.gz beside bench-ab.sh, with the
# branch's internal/cpuclock test binary (cpuclock.test.gz). First the
# clock's tests and benchmark and the new binary's adaptor tests on the
# card, then AdaptorsOverPool interleaved old, new six times
# (bench-ab.sh, 150 ms), then BenchmarkHostCosts of the new binary three
# times and a CPU profile of its Limit, Aligned and Logging pairs. With
# PINNED=1, also Logging and the pool alone, old and new interleaved
# eight times at 300 ms, pinned to one CPU.
# Logs: $OUT/adapt3.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/adapt3
mkdir -p "$W"
{ date -u; nvidia-smi -L; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; lscpu | sed -n 1,20p; } >"$W/machine.txt" 2>&1
gzip -dc cpuclock.test.gz >cpuclock.test && chmod +x cpuclock.test
./cpuclock.test -test.v -test.count=2 -test.cpu=1,16 >"$W/cpuclock-tests.log" 2>&1
echo "rc=$?" >>"$W/cpuclock-tests.log"
./cpuclock.test -test.run '^$' -test.bench Clock -test.count=3 -test.benchtime 200ms >"$W/cpuclock-bench.txt" 2>&1
gzip -dc mr-new.test.gz >mr-new.test && chmod +x mr-new.test
./mr-new.test -test.short -test.v -test.run 'TestPoolOwners|TestAdaptorsOverOwnedBadInput|TestStatsOverPoolExact|TestHotPathsDoNotAllocate|TestLogging|TestAdaptorsConformance|TestAdaptorsBadInput|TestAligned|TestLimit|TestBudget|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
echo "rc=$?" >>"$W/tests.log"
echo "tests done $(date -u +%T)" >>"$W/machine.txt"
OUT=$W/ab ./bench-ab.sh mr-old.test.gz mr-new.test.gz 'AdaptorsOverPool' ${ROUNDS:-6} ${BENCHTIME:-150ms} >/dev/null 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
if [ -n "${PINNED:-}" ]; then
	# Logging alone, every process on one CPU, longer and more rounds.
	OUT=$W/pinned taskset -c 7 ./bench-ab.sh mr-old.test.gz mr-new.test.gz 'AdaptorsOverPool/(pool|logging-file)$' 8 300ms >/dev/null 2>"$W/pinned-err.txt"
	echo "pinned done $(date -u +%T)" >>"$W/machine.txt"
fi
./mr-new.test -test.run '^$' -test.bench 'HostCosts' -test.count 3 -test.benchtime 100ms >"$W/host-costs.txt" 2>&1
echo "host costs done $(date -u +%T)" >>"$W/machine.txt"
./mr-new.test -test.run '^$' -test.bench 'AdaptorsOverPool/(limit|aligned|logging-file)$' \
	-test.benchtime 500ms -test.cpuprofile "$W/adaptors-new.prof" >"$W/prof-new.txt" 2>&1
echo "profile done $(date -u +%T)" >>"$W/machine.txt"
rm -f mr-new.test cpuclock.test
tar -C "$W" -czf "${OUT:-.}/adapt3.tgz" .
