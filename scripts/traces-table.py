#!/usr/bin/env python3
"""traces-table.py: the BENCHMARKS.md table of testdata/traces.

Reads the JSON of `streamalloc replay --json` over the traces (one or more
files, e.g. one from the simulator and one from the card, each labelled
LABEL=FILE) and the <workload>-h100.json files that
scripts/record-snapshots.py writes beside each trace, and prints one row per
trace: its events, its peak live bytes, PyTorch's own peak reserved over
peak allocated (native, and with expandable_segments:True where the JSON
holds it), and each replayed resource's peak reserved over peak live.

usage: traces-table.py TRACEDIR LABEL=REPLAY.json...
"""

import json
import os
import sys


def mib(n):
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def main():
    tdir, replays = sys.argv[1], sys.argv[2:]
    cols, rows = [], {}
    for spec in replays:
        label, _, path = spec.partition("=")
        for r in json.load(open(path)):
            name = os.path.basename(r["trace"])
            col = f"{r['resource']} ({label})"
            if col not in cols:
                cols.append(col)
            rows.setdefault(name, {"events": r["events"], "live": r["peak_live_bytes"]})[col] = r["fragmentation"]
    print("| trace | events | peak live | PyTorch native | PyTorch expandable | " + " | ".join(cols) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(cols))
    for name in sorted(rows):
        row = rows[name]
        stem = name.split(".")[0]
        meta = {}
        p = os.path.join(tdir, stem + ".json")
        if os.path.exists(p):
            meta = json.load(open(p))
        nat = meta.get("ratio")
        exp = meta.get("expandable", {}).get("ratio")
        fmt = lambda v: "" if v is None else f"{v:.3f}"
        cells = [fmt(row.get(c)) for c in cols]
        print(f"| {stem} | {row['events']:,} | {mib(row['live'])} | {fmt(nat)} | {fmt(exp)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
