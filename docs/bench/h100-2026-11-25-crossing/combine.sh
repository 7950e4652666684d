#!/usr/bin/env bash
# Calls 1-4 and 6's step pairs in one table (call 5's configurations are its own). Call 1's GPT-2 groups are left
# out: its two cache processes did not fit the card together, and the one
# that grew last gave its blocks back and took them again all run long
# (146,000 driver calls in 450 steps), a load on the card and the host that
# every process of that group shared. Each call's groups of processes are
# renumbered (call N: + 10 (N - 1)) so that they stay
# apart, then scripts/torch-bench.py lockstep-table against native and
# against the control in cache mode.
# Run from the repository's root: bash docs/bench/h100-2026-11-25-crossing/combine.sh
set -euo pipefail
d=docs/bench/h100-2026-11-25-crossing
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for c in 1 2 3 4 6; do
	zcat "$d/call$c/blocks.jsonl.gz" | python3 -c '
import json, sys
call = int(sys.argv[1])
for line in sys.stdin:
    r = json.loads(line)
    if call == 1 and r["workload"] == "gpt2":
        continue
    r["pair"] += 10 * (call - 1)
    print(json.dumps(r))' "$c"
done >"$tmp"
python3 scripts/torch-bench.py lockstep-table "$tmp" >"$d/combined-vs-native.md"
python3 scripts/torch-bench.py lockstep-table "$tmp" --ref cache >"$d/combined-vs-cache.md"
python3 scripts/torch-bench.py lockstep-table "$tmp" --ref cache+go >"$d/combined-vs-cache-go.md"
