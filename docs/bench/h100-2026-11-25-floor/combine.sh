#!/usr/bin/env bash
# The two calls' step pairs in one table: call2's groups of processes are
# renumbered (group + 2) so that they stay apart from call1's, then
# scripts/torch-bench.py lockstep-table against native, against the control
# in cache mode, and against streamalloc's empty configuration.
# Run from the repository's root: bash docs/bench/h100-2026-11-25-floor/combine.sh
set -euo pipefail
d=docs/bench/h100-2026-11-25-floor
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{ zcat "$d/call1/blocks.jsonl.gz"
  zcat "$d/call2/blocks.jsonl.gz" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    r["pair"] += 2
    print(json.dumps(r))'; } >"$tmp"
python3 scripts/torch-bench.py lockstep-table "$tmp" >"$d/combined-vs-native.md"
python3 scripts/torch-bench.py lockstep-table "$tmp" --ref cache >"$d/combined-vs-cache.md"
python3 scripts/torch-bench.py lockstep-table "$tmp" --ref default >"$d/combined-vs-default.md"
