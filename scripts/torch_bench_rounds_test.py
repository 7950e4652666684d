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
import shutil
import tempfile
import unittest
import unittest.mock

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


class DriveTest(unittest.TestCase):
    def args(self, **kw):
        a = dict(warmup=2, steps=3, serve=False, gc="on")
        a.update(kw)
        return type("Args", (), a)

    def test_warmup_then_timed_steps(self):
        seen, warm_at = [], []
        losses, times = tb.drive(self.args(), lambda i: seen.append(i) or float(i), lambda: None,
                                 lambda: warm_at.append(len(seen)))
        self.assertEqual(seen, [0, 1, 2, 3, 4])
        self.assertEqual(warm_at, [2])
        self.assertEqual(losses, [0.0, 1.0, 2.0, 3.0, 4.0])
        self.assertEqual(len(times), 3)

    def test_serve_runs_the_steps_asked_for(self):
        seen = []
        out = io.StringIO()
        stdin = io.StringIO("go 2\ngo 3\nend\ngo 9\n")
        with contextlib.redirect_stdout(out), unittest.mock.patch.object(tb.sys, "stdin", stdin):
            losses, times = tb.drive(self.args(serve=True), lambda i: seen.append(i) or 0.0, lambda: None,
                                     lambda: None)
        self.assertEqual(seen, list(range(7)))
        self.assertEqual(len(times), 5)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[0], "LOCKSTEP ready")
        self.assertEqual([len(json.loads(x[len("LOCKSTEP "):])) for x in lines[1:]], [2, 3])

    def test_gc_freeze_after_warmup(self):
        frozen = []
        with unittest.mock.patch("gc.freeze", lambda: frozen.append(True)):
            tb.drive(self.args(gc="freeze"), lambda i: 0.0, lambda: None, lambda: None)
            tb.drive(self.args(), lambda i: 0.0, lambda: None, lambda: None)
        self.assertEqual(frozen, [True])


# A stand-in for torch-bench.py run --serve: its step i takes a made-up
# time, 10 ms under native and 10.5 under streamalloc, plus 5 ms more in
# odd blocks of its own for both (a drift the pairing must cancel).
FAKE_WORKER = r"""
import json, sys
alloc = sys.argv[3]
base = 10.0 if alloc == "native" else 10.5
print("LOCKSTEP ready", flush=True)
b = 0
for line in sys.stdin:
    w = line.split()
    if w[0] == "end":
        break
    print("LOCKSTEP " + json.dumps([base + (5.0 if b % 2 else 0.0)] * int(w[1])), flush=True)
    b += 1
"""


class LockstepTest(unittest.TestCase):
    def test_driver_pairs_blocks_and_table_judges(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        worker = os.path.join(d, "worker.py")
        with open(worker, "w") as f:
            f.write(FAKE_WORKER)
        blocks = os.path.join(d, "blocks.jsonl")
        args = type("Args", (), dict(configs="native; streamalloc pool", workload="gpt2", out=os.path.join(d, "r"),
                                     blocks_out=blocks, lib=None, warmup=1, blocks=9, block_steps=6, pairs=2,
                                     pin="", gc="on"))
        with unittest.mock.patch.object(tb, "WORKER", worker):
            self.assertEqual(tb.lockstep(args), 0)
        with open(blocks) as f:
            rows = [json.loads(x) for x in f]
        self.assertEqual(len(rows), 2 * 9 * 2)
        self.assertEqual({len(r["ms"]) for r in rows}, {6})
        # ABBA: native first in even blocks, second in odd ones.
        first = [r["config"] for r in rows if r["pair"] == 1 and r["position"] == 0]
        self.assertEqual(first[:3], ["native", "streamalloc `pool`", "native"])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            tb.lockstep_table(blocks)
        text = out.getvalue()
        # Blocks 0, 2, .., 8 of each group: 10.5/10 = 1.05; blocks 1, 3, 5,
        # 7: 15.5/15 = 1.033. So 60 of 108 steps at 1.05 (the median),
        # every one slower; totals (5*10.5 + 4*15.5) / (5*10 + 4*15) = 1.041;
        # the reference's steps 10 ms in 60 of 108.
        self.assertIn("| gpt2 | streamalloc `pool` | 108 | 1.050 [1.033, 1.050] | slower by more than 2% | 108 | "
                      "18 | 1.050 [1.033, 1.050] | slower by more than 2% | 1.041 | 1.050 (54); 1.050 (54) | 10.00 |",
                      text)
        # Each place of the cycle holds one step of every block: 10 at
        # 1.05, 8 at 1.033.
        self.assertEqual([r["first_step"] for r in rows if r["pair"] == 1 and r["position"] == 0][:3], [1, 7, 13])
        self.assertIn("gpt2, streamalloc `pool`: median step ratio by place in the cycle (sequence length): "
                      "256: 1.050 (18), 512: 1.050 (18), 1024: 1.050 (18), 384: 1.050 (18), 768: 1.050 (18), "
                      "128: 1.050 (18)", text)

    def test_failed_worker_is_reported(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        worker = os.path.join(d, "worker.py")
        with open(worker, "w") as f:
            f.write("import sys\nsys.exit(3)\n")
        args = type("Args", (), dict(configs="native; streamalloc pool", workload="gpt2", out=os.path.join(d, "r"),
                                     blocks_out=os.path.join(d, "b"), lib=None, warmup=1, blocks=3, block_steps=0,
                                     pairs=1, pin="", gc="on"))
        with unittest.mock.patch.object(tb, "WORKER", worker), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(tb.lockstep(args), 1)


    def test_table_against_a_named_reference(self):
        # GPT-2: native 10 ms, pool 11, pool over vmm 10.45 in each of 9
        # one-step blocks; CuPy has no pool. Against pool: vmm 0.95,
        # native 10/11 = 0.909, every step faster; CuPy is named as not run.
        rows = []
        for b in range(9):
            for c, ms in [("native", 10.0), ("streamalloc `pool`", 11.0), ("streamalloc `pool,upstream=vmm`", 10.45)]:
                rows.append(dict(workload="gpt2", pair=1, block=b, config=c, position=0, first_step=18 + b, ms=[ms]))
            for c, ms in [("cupy-pool", 1.0), ("streamalloc `pool,upstream=vmm`", 1.0)]:
                rows.append(dict(workload="cupy", pair=1, block=b, config=c, position=0, first_step=10 + b, ms=[ms]))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        self.addCleanup(os.remove, f.name)
        for ref in ["pool", "streamalloc `pool`"]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                tb.lockstep_table(f.name, ref)
            text = out.getvalue()
            self.assertIn("| gpt2 | native | 9 | 0.909 [0.909, 0.909] | within 2% | 0 | 9 | 0.909 [0.909, 0.909] | "
                          "within 2% | 0.909 | 0.909 (9) | 11.00 |", text)
            self.assertIn("| gpt2 | streamalloc `pool,upstream=vmm` | 9 | 0.950 [0.950, 0.950] | within 2% | 0 | 9 | "
                          "0.950 [0.950, 0.950] | within 2% | 0.950 | 0.950 (9) | 11.00 |", text)
            self.assertNotIn("| gpt2 | streamalloc `pool` |", text)
            self.assertNotIn("| cupy |", text)
            self.assertIn("Reference: %s; not run on cupy" % ref, text)
        # Without a reference each workload's first is the reference, as before.
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            tb.lockstep_table(f.name)
        self.assertIn("| gpt2 | streamalloc `pool` | 9 | 1.100 [1.100, 1.100] | slower by more than 2% |", out.getvalue())
        self.assertIn("| cupy | streamalloc `pool,upstream=vmm` | 9 | 1.000 [1.000, 1.000] | within 2% |", out.getvalue())
        self.assertNotIn("Reference:", out.getvalue())


class SpecTest(unittest.TestCase):
    def test_configurations_of_the_floor(self):
        # The control in cache mode; the empty configuration by its name
        # "default", with the Go runtime's monitor kept awake.
        self.assertEqual(tb.parse_spec("control cache"), ("control", "cache", {}))
        self.assertEqual(tb.parse_spec("streamalloc default GODEBUG=schedtrace=2000000000"),
                         ("streamalloc", "default", {"GODEBUG": "schedtrace=2000000000"}))
        self.assertEqual(tb.parse_spec("streamalloc"), ("streamalloc", "pool", {}))
        self.assertEqual(tb.sa_conf("default"), "")
        self.assertEqual(tb.sa_conf("pool,upstream=vmm"), "pool,upstream=vmm")
        self.assertEqual(tb.config_name(dict(allocator="streamalloc", conf="default", env="GODEBUG=schedtrace=2000000000")),
                         "streamalloc `default` (GODEBUG=schedtrace=2000000000)")

    def test_control_as_the_named_reference(self):
        rows = []
        for b in range(9):
            for c, ms in [("native", 10.0), ("control `cache`", 10.0), ("streamalloc `default`", 10.5)]:
                rows.append(dict(workload="gpt2", pair=1, block=b, config=c, position=0, first_step=18 + b, ms=[ms]))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        self.addCleanup(os.remove, f.name)
        for ref in ["cache", "control `cache`"]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                tb.lockstep_table(f.name, ref)
            self.assertIn("| gpt2 | streamalloc `default` | 9 | 1.050 [1.050, 1.050] | slower by more than 2% |",
                          out.getvalue())
            self.assertIn("| gpt2 | native | 9 | 1.000 [1.000, 1.000] | within 2% |", out.getvalue())


class MedianCITest(unittest.TestCase):
    def test_interval_by_order_statistics(self):
        # n = 9: P(Bin(9, 1/2) <= 1) = 10/512, coverage 0.961 for (x2, x8);
        # (x3, x7) covers 0.820 only.
        med, ci = tb.median_ci([float(k) for k in range(1, 10)])
        self.assertEqual(med, 5.0)
        self.assertEqual(ci, (2.0, 8.0))
        self.assertIsNone(tb.median_ci([1.0, 2.0, 3.0, 4.0, 5.0])[1])

    def test_verdicts(self):
        self.assertEqual(tb.verdict((0.99, 1.02)), "within 2%")
        self.assertEqual(tb.verdict((1.021, 1.05)), "slower by more than 2%")
        self.assertEqual(tb.verdict((0.99, 1.03)), "not resolved")
        self.assertEqual(tb.verdict(None), "too few blocks")


if __name__ == "__main__":
    unittest.main()
