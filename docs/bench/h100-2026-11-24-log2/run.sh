#!/usr/bin/env bash
# Logging's A/B on the card: main (68c5a4e) against the batched CSV writer,
# both `mr` test binaries built with scripts/gpu-build.sh ./mr and copied
# here as mr-old.test.gz and mr-new.test.gz beside bench-ab.sh. First the
# new binary's Logging and allocation tests on the card, then the clock
# readings a line costs, then AdaptorsOverPool's pool and logging-file
# interleaved old, new six times (bench-ab.sh): unpinned (GOMAXPROCS=16:
# the writer's formatter runs on another CPU) and with every process
# pinned to one CPU (GOMAXPROCS=1: the formatting is paid on the
# benchmark's CPU), then a CPU profile of the new logging-file case.
# Logs: $OUT/log2.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/log2
mkdir -p "$W"
{ date -u; nvidia-smi -L; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; lscpu | sed -n 1,16p; } >"$W/machine.txt" 2>&1
gzip -dc mr-new.test.gz >mr-new.test && chmod +x mr-new.test
./mr-new.test -test.short -test.v -test.run 'TestLogging|TestHotPathsDoNotAllocate|TestAdaptorsConformance|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
echo "rc=$?" >>"$W/tests.log"
./mr-new.test -test.run '^$' -test.bench 'LoggingClock' -test.count 3 -test.benchtime 100ms >"$W/clock.txt" 2>&1
echo "tests, clock done $(date -u +%T)" >>"$W/machine.txt"
P='AdaptorsOverPool/(pool|logging-file)$'
OUT=$W/ab ./bench-ab.sh mr-old.test.gz mr-new.test.gz "$P" ${ROUNDS:-6} ${BENCHTIME:-200ms} >"$W/ab-benchstat.txt" 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
OUT=$W/pinned taskset -c ${CPU:-7} ./bench-ab.sh mr-old.test.gz mr-new.test.gz "$P" ${ROUNDS:-6} ${BENCHTIME:-200ms} >"$W/pinned-benchstat.txt" 2>"$W/pinned-err.txt"
echo "pinned done $(date -u +%T)" >>"$W/machine.txt"
./mr-new.test -test.run '^$' -test.bench 'AdaptorsOverPool/logging-file$' -test.benchtime 1s \
	-test.cpuprofile "$W/logging-new.prof" >"$W/prof-new.txt" 2>&1
echo "profile done $(date -u +%T)" >>"$W/machine.txt"
tar -C "$W" -czf "${OUT:-.}/log2.tgz" .
