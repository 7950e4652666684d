#!/usr/bin/env bash
# The third call: run2.sh's unpinned A/B with the order in each round
# swapped (new, then old), to tell an effect of the order from one of the
# binary: the pool and Logging pairs, whose code is the same on both
# sides, ran slower in the new binary in the first two calls, where it
# always ran second. bench-ab.sh names its logs by position (old.txt holds
# the new binary's figures here, new.txt the old's); in the committed logs
# they are renamed ab/new-binary-first.txt and ab/old-binary-second.txt.
# Logs: $OUT/adapt4-3.tgz.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/adapt4-3
mkdir -p "$W"
{ date -u; nvidia-smi -L; } >"$W/machine.txt" 2>&1
P='AdaptorsOverPool/(pool|limit|aligned|logging-file)$'
OUT=$W/ab ./bench-ab.sh mr-new.test.gz mr-old.test.gz "$P" 6 150ms >"$W/benchstat.txt" 2>"$W/ab-err.txt"
echo "ab done $(date -u +%T)" >>"$W/machine.txt"
python3 adaptors-over-pool.py "$W/ab/old.txt" "$W/ab/new.txt" >"$W/over-pool.txt" 2>&1
tar -C "$W" -czf "${OUT:-.}/adapt4-3.tgz" .
