#!/usr/bin/env bash
# The second call: the same binaries as run.sh, the pool, Limit, Aligned
# and Logging pairs only, interleaved old, new six times at 150 ms with
# GOMAXPROCS=16, then six times at 150 ms with every process pinned to
# one CPU. Logs: $OUT/adapt4-2.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/adapt4-2
mkdir -p "$W"
{ date -u; nvidia-smi -L; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; } >"$W/machine.txt" 2>&1
P='AdaptorsOverPool/(pool|limit|aligned|logging-file)$'
OUT=$W/ab ./bench-ab.sh mr-old.test.gz mr-new.test.gz "$P" 6 150ms >"$W/benchstat.txt" 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
OUT=$W/pinned taskset -c 7 ./bench-ab.sh mr-old.test.gz mr-new.test.gz "$P" 6 150ms >"$W/benchstat-pinned.txt" 2>"$W/pinned-err.txt"
echo "pinned done $(date -u +%T)" >>"$W/machine.txt"
python3 adaptors-over-pool.py "$W/ab/old.txt" "$W/ab/new.txt" >"$W/over-pool.txt" 2>&1
python3 adaptors-over-pool.py "$W/pinned/old.txt" "$W/pinned/new.txt" >"$W/over-pool-pinned.txt" 2>&1
tar -C "$W" -czf "${OUT:-.}/adapt4-2.tgz" .
