#!/usr/bin/env python3
"""Sums the vmmtrace lines of a process log (library built with the tag
streamalloc_vmmtrace) and lists the bursts of commits and unmaps, events
less than 20 ms apart, with their time since the first event.

Usage: python3 trace-summary.py call3/trace-gpt2-vmm.log
"""
import sys

ev = []
for line in open(sys.argv[1]):
    if not line.startswith("vmmtrace "):
        continue
    _, t, op, g, p, us = line.split()
    ev.append((int(t), op, int(g.split("=")[1]), int(p.split("=")[1]), int(us.split("=")[1])))
tot = {}
for _, op, g, p, us in ev:
    a = tot.setdefault(op, [0, 0, 0, 0])
    a[0] += 1; a[1] += g; a[2] += p; a[3] += us
for op, (n, g, p, us) in tot.items():
    print(f"{op}: {n} calls, {g} granules in {p} pieces, {us / 1000:.1f} ms")
bursts, cur = [], None
for e in ev:
    if cur and e[0] - cur[-1][0] < 20000:
        cur.append(e)
    else:
        cur = [e]
        bursts.append(cur)
t0 = ev[0][0]
for b in bursts:
    big = [f"{e[1]} {e[2]} granules/{e[3]} pieces {e[4] / 1000:.1f} ms" for e in b if e[4] >= 2000]
    print(f"{(b[0][0] - t0) / 1000:8.1f} ms: {len(b):3d} calls, {sum(e[4] for e in b) / 1000:5.1f} ms; " + "; ".join(big))
