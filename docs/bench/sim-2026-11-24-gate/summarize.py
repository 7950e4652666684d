#!/usr/bin/env python3
"""Summarizes run-variants.sh's output: per variant, the device calls of
CuPy's 20 timed steps and of GPT-2's 24 steady steps (lengthened history),
and every trace whose peak reserved rose or fell against the default pool."""
import collections
import sys

rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.split()
    lab, trace, ratio, res = f[0], f[1], float(f[3]), int(f[4])
    steady = f[-1] if 'steady' in line else ''
    rows.setdefault(lab, {})[trace] = (ratio, res, steady)
d = rows['default']
short = lambda t: t.replace('-h100', '').replace('.csv.gz', '').replace('.pickle.gz', '')
print('| variant | CuPy timed calls | GPT-2 steady calls | traces whose peak reserved rose (default -> variant) | fell |')
print('|---|---|---|---|---|')
for lab, r in rows.items():
    rises, drops = [], []
    for t, (ratio, res, st) in r.items():
        if t == 'cupy-timed':
            continue
        if res > d[t][1]:
            rises.append(f'{short(t)} {d[t][0]:.4f} -> {ratio:.4f}')
        elif res < d[t][1]:
            drops.append(f'{short(t)} {ratio:.4f}')
    print(f"| {lab} | {r['cupy-timed'][2]} | {r['gpt2-34-steps'][2]} | {len(rises)}: {'; '.join(rises)} | {'; '.join(drops)} |")
