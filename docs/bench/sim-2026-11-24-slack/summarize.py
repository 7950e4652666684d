#!/usr/bin/env python3
"""Summarizes run.sh's output: per configuration, the steady or timed
device calls of the lengthened GPT-2 history, the lengthened ResNet-50
history and CuPy, and every trace whose peak reserved / peak live or
device calls differ from the default pool's (the default's figures in
parentheses).

    python3 summarize.py variants.txt > summary.md
"""
import sys

rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
confs, traces, d = [], [], {}
for r in rows:
    if r[1] not in confs:
        confs.append(r[1])
    if r[0] not in traces:
        traces.append(r[0])
    d[(r[0], r[1])] = r
short = lambda t: t.split(".")[0].replace("-h100", "")
print("| configuration | GPT-2, 24 steady steps | ResNet-50, 32 steady steps | CuPy, 20 timed steps | highest peak reserved / peak live | traces that differ from `pool`: peak reserved / peak live, device allocations/frees (`pool`'s) |")
print("|---|---:|---:|---:|---:|---|")
for c in confs:
    steady = {t: d[(t, c)][7] for t in ("gpt2-34-steps", "resnet50-36-steps", "cupy-timed")}
    diff = []
    for t in traces:
        r, b = d[(t, c)], d[(t, "pool")]
        if r[2] != b[2] or r[4] != b[4] or r[5] != b[5]:
            diff.append("%s %s %s/%s (%s %s/%s)" % (short(t), r[2], r[4], r[5], b[2], b[4], b[5]))
    top = max(float(d[(t, c)][2]) for t in traces)
    print("| `%s` | %s | %s | %s | %.4f | %s |" % (c, steady["gpt2-34-steps"], steady["resnet50-36-steps"], steady["cupy-timed"], top, "; ".join(diff) or "none"))
