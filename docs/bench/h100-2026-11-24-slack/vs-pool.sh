#!/usr/bin/env bash
# The lockstep table of a run's blocks with the default pool as the
# reference: the blocks file reordered so that `pool`'s rows come first
# (lockstep-table takes the first configuration it reads as the reference).
#     docs/bench/h100-2026-11-24-slack/vs-pool.sh s2 > s2/lockstep-table-vs-pool.md
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows.sort(key=lambda r: r["config"] != "streamalloc `pool`")
for r in rows:
    print(json.dumps(r))
' "$here/$1/blocks.jsonl" >"$tmp"
python3 "$here/../../../scripts/torch-bench.py" lockstep-table "$tmp"
