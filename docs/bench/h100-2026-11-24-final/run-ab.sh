#!/usr/bin/env bash
# Final A/B of the pool's host path on the card: main before this round's
# work (5159933, with the current bench harness and adaptor benchmarks) against
# the final tree, interleaved by bench-ab.sh.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/ab; mkdir -p "$W"
{ date -u; nvidia-smi -L; lscpu | sed -n 1,20p; } >"$W/machine.txt" 2>&1
for p in pair:'Pair/resource=(pool|async)/' streams:'Streams/resource=pool/' adaptors:'AdaptorsOverPool' random:'Random/resource=pool$'; do
  n=${p%%:*}; pat=${p#*:}
  mkdir -p "$W/$n"; OUT=$W/$n ./bench-ab.sh mr-old.test.gz mr-new.test.gz "$pat" 6 150ms >/dev/null 2>"$W/$n/err.txt"
  echo "$n done $(date -u +%T)"
done
tar -C "$W" -czf "${OUT:-.}/ab.tgz" . && rm -rf "$W"
