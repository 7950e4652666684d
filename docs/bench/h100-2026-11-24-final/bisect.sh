#!/usr/bin/env bash
# Interleaves the pool's host-path benchmarks of several mr test binaries
# (one per tree) round by round; a log per binary under $OUT/bisect.
set -u
cd "$(dirname "$0")"
export STREAMALLOC_DEVICE=cuda
W=${OUT:-.}/bisect; mkdir -p "$W"
bins=(old 57af72b 5723210 a80cb46 new)
for b in "${bins[@]}"; do gzip -dc mr-$b.test.gz >mr-$b.test && chmod +x mr-$b.test; : >"$W/$b.txt"; done
pat='Pair/resource=pool/|Streams/resource=pool/goroutines=(1|16)$|Random/resource=pool$'
for ((i = 1; i <= ${ROUNDS:-6}; i++)); do
  for b in "${bins[@]}"; do ./mr-$b.test -test.run='^$' -test.bench="$pat" -test.benchmem -test.count=1 -test.benchtime=150ms >>"$W/$b.txt" 2>&1; done
  echo "round $i $(date -u +%T)"
done
tar -C "$W" -czf "${OUT:-.}/bisect.tgz" . && rm -rf "$W"
