#!/usr/bin/env python3
# adaptors-over-pool.py prints, for each bench-ab.sh log given (old.txt, new.txt),
# every adaptor's AdaptorsOverPool figure minus the pool's figure of the
# same round, and TrackingDeep's tracking minus its pool: the median, the
# lowest and the highest over the rounds. Taking the difference within a
# round removes what the host's speed did between rounds.
import re
import statistics as st
import sys

LINE = re.compile(r'Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op')


def rounds(path):
    out, cur = [], {}
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        name, v = m.group(1), float(m.group(2))
        if name == 'AdaptorsOverPool/pool' and cur:
            out.append(cur)
            cur = {}
        cur[name] = v
    if cur:
        out.append(cur)
    return out


for path in sys.argv[1:]:
    rs = rounds(path)
    print(f'{path}: {len(rs)} rounds; pool alone, median {st.median(r["AdaptorsOverPool/pool"] for r in rs):.1f} ns')
    pairs = [(n, 'AdaptorsOverPool/pool') for n in rs[0] if n.startswith('AdaptorsOverPool/') and n != 'AdaptorsOverPool/pool']
    pairs.append(('TrackingDeep/tracking', 'TrackingDeep/pool'))
    for n, base in pairs:
        d = [r[n] - r[base] for r in rs if n in r and base in r]
        if d:
            print(f'  {n:36s} over its pool: median {st.median(d):6.1f}  lowest {min(d):6.1f}  highest {max(d):6.1f} ns')
