#!/usr/bin/env python3
"""Tests of torch-bench.py's rounds table on made-up results (no GPU, no
PyTorch): the pairs among the configurations other than the reference, and
the medians by step of the workload's cycle; and of its flush of the
memory history (log=) at the end of a run.

Run: python3 scripts/torch_bench_rounds_test.py"""

import contextlib
import importlib.util
import io
import json
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("torch_bench", os.path.join(HERE, "torch-bench.py"))
tb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tb)


def row(allocator, conf, rnd, times, warmup=6, cycle=6):
    return dict(workload="gpt2", allocator=allocator, conf=conf, env="", round=rnd, warmup=warmup,
                steps=len(times), cycle=cycle, step_ms_median=sorted(times)[len(times) // 2],
                times_ms=times, device="test")


class RoundsTest(unittest.TestCase):
    def rounds(self, rows):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        self.addCleanup(os.remove, f.name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            tb.rounds(f.name)
        return out.getvalue()

    def test_three_configurations_pair_the_other_two(self):
        base = [10.0] * 6
        rows = []
        for rnd in (1, 2):
            rows.append(row("native", "", rnd, base))
            rows.append(row("streamalloc", "pool", rnd, [12.0] * 6))
            rows.append(row("streamalloc", "pool,upstream=async", rnd, [10.0] * 6))
        text = self.rounds(rows)
        want = ("| gpt2 | streamalloc `pool` / streamalloc `pool,upstream=async` | "
                "1.200 [1.200, 1.200] (2 pairs) | slower by more than 2%, p <= 0.500 | "
                "1.200 [1.200, 1.200] (2 pairs) | slower by more than 2%, p <= 0.500 |")
        self.assertIn(want, text)

    def test_two_configurations_print_no_pair_table(self):
        rows = [row("native", "", 1, [10.0] * 6), row("streamalloc", "pool", 1, [10.0] * 6)]
        self.assertNotIn("configuration / configuration", self.rounds(rows))

    def test_by_step_follows_the_cycle_from_the_warmup(self):
        # With a warmup of 4, timed step j is step 4 + j of a cycle of 6, so
        # the first timed step is the cycle's fifth (768 for GPT-2).
        times = [float(k) for k in range(12)]
        rows = [row("native", "", 1, times, warmup=4), row("native", "", 2, [t + 2 for t in times], warmup=4)]
        med = tb.by_step(rows, ["native"])
        # Place p of the cycle holds timed steps j = p + 2 and p + 8 (mod
        # 6); over the two rounds their values are j, j + 6, j + 2, j + 8,
        # whose median is j + 4 with j the smaller: place 0 holds steps 2
        # and 8 (median 6), place 4 steps 0 and 6 (median 4).
        self.assertEqual(med["native"], [6.0, 7.0, 8.0, 9.0, 4.0, 5.0])
        text = self.rounds(rows)
        self.assertIn("| native | 6.0 | 7.0 | 8.0 | 9.0 | 4.0 | 5.0 |", text)
        self.assertIn("| configuration | 256 | 512 | 1024 | 384 | 768 | 128 |", text)

    def test_by_step_refuses_mixed_or_single_cycles(self):
        self.assertIsNone(tb.by_step([row("native", "", 1, [1.0], cycle=6), row("native", "", 2, [1.0], cycle=5)],
                                     ["native"]))
        self.assertIsNone(tb.by_step([row("native", "", 1, [1.0], cycle=1)], ["native"]))


class FlushLogTest(unittest.TestCase):
    class FakeLib:
        def __init__(self):
            self.flushes = 0

        def flush_history(self):
            self.flushes += 1

    def test_flushes_only_when_conf_has_log(self):
        for conf, want in [("pool,log=/tmp/h.csv", 1), ("log=/tmp/h.csv", 1), ("pool", 0),
                           ("pool,chunk_size=256MiB", 0), ("pool,catalog=x", 0)]:
            sa = self.FakeLib()
            self.assertEqual(tb.flush_log(sa, conf), want == 1, conf)
            self.assertEqual(sa.flushes, want, conf)

    def test_no_library_no_flush(self):
        self.assertFalse(tb.flush_log(None, "pool,log=/tmp/h.csv"))


if __name__ == "__main__":
    unittest.main()
