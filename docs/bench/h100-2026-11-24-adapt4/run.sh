#!/usr/bin/env bash
# The adaptors' A/B on the card, in one call: main at 14cca61 (old)
# against this branch (new), both `scripts/gpu-build.sh ./mr` binaries,
# copied here as mr-old.test.gz and mr-new.test.gz beside bench-ab.sh and
# adaptors-over-pool.py. First the new binary's adaptor tests on the card,
# then AdaptorsOverPool interleaved old, new six times (bench-ab.sh,
# 150 ms), BenchmarkHostCosts of the new binary three times (the locked
# work of a pair alone and logging's floor), and a CPU profile of the new
# Aligned and Logging pairs. Logs: $OUT/adapt4.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/adapt4
mkdir -p "$W"
{ date -u; nvidia-smi -L; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; lscpu | sed -n 1,20p; } >"$W/machine.txt" 2>&1
gzip -dc mr-new.test.gz >mr-new.test && chmod +x mr-new.test
timeout 120 ./mr-new.test -test.short -test.v -test.run 'TestPoolOwners|TestAdaptorsOverOwnedBadInput|TestHotPathsDoNotAllocate|TestAdaptorsConformance|TestAdaptorsBadInput|TestAligned|TestLimit|TestBudget|TestLogging|TestAdaptorsConcurrent' >"$W/tests.log" 2>&1
echo "rc=$?" >>"$W/tests.log"
echo "tests done $(date -u +%T)" >>"$W/machine.txt"
OUT=$W/ab ./bench-ab.sh mr-old.test.gz mr-new.test.gz 'AdaptorsOverPool' ${ROUNDS:-6} ${BENCHTIME:-150ms} >"$W/benchstat.txt" 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
python3 adaptors-over-pool.py "$W/ab/old.txt" "$W/ab/new.txt" >"$W/over-pool.txt" 2>&1
./mr-new.test -test.run '^$' -test.bench 'HostCosts' -test.count 3 -test.benchtime 100ms >"$W/host-costs.txt" 2>&1
echo "host costs done $(date -u +%T)" >>"$W/machine.txt"
./mr-new.test -test.run '^$' -test.bench 'AdaptorsOverPool/(aligned|logging-file)$' \
	-test.benchtime 500ms -test.cpuprofile "$W/adaptors-new.prof" >"$W/prof-new.txt" 2>&1
echo "profile done $(date -u +%T)" >>"$W/machine.txt"
rm -f mr-new.test
tar -C "$W" -czf "${OUT:-.}/adapt4.tgz" .
