#!/usr/bin/env python3
"""torch-bench-probe.py: where the step time of a torch-bench.py workload
goes, and what moves it from step to step and from process to process.

It runs one workload of scripts/torch-bench.py under one allocator (the
same workloads, seeds and settings) and records, for every step:

  wall     the step's wall time, synchronized at its end, as torch-bench.py
           times it;
  calib    the time of a fixed pure-Python loop run just before the step
           (the host's speed at that moment: the steps are host-bound if
           it moves with them);
  gc       the time Python's cyclic collector ran inside the step
           (gc.callbacks), and its collections by generation;
  cpu      the CPUs the main thread ran on at the step's start and end;
  dev      the pool's device allocations and frees inside the step (the
           streamalloc allocator only);
  variant  the CPU affinity the process had during the step: "all" (as
           started), or a set of cores (os.sched_setaffinity), the
           variants alternating block by block in ABBA order so drift
           weighs on each alike.

Once after the warm-up it also records one cycle of steps under
torch.profiler (the sum of self device time over its key_averages a
step: an upper bound of the GPU's busy time, as a kernel may be counted
under its operator and under its own name) and one cycle under
torch.cuda.set_sync_debug_mode("warn") (how many times a step waits for
the GPU), and a GPU calibration (a fixed bf16 matmul chain timed with CUDA
events) before every block.

usage: torch-bench-probe.py WORKLOAD ALLOCATOR --out PROBE.jsonl [--lib PATH]
           [--conf CONF] [--warmup N] [--blocks N] [--variants all,2-5,...]
       torch-bench-probe.py summary PROBE.jsonl
"""

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("torch_bench", os.path.join(HERE, "torch-bench.py"))
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)


def calibrate(n=20000):
    """Seconds a fixed pure-Python loop takes (the host's speed)."""
    t0 = time.perf_counter()
    s = 0
    for k in range(n):
        s += k * k
    return time.perf_counter() - t0


class GCTimer:
    """Time spent in Python's cyclic collector, by gc.callbacks."""

    def __init__(self):
        self.total = 0.0
        self.counts = [0, 0, 0]
        self._t = None
        gc.callbacks.append(self._cb)

    def _cb(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.total += time.perf_counter() - self._t
            self.counts[info["generation"]] += 1
            self._t = None


def current_cpu():
    """The CPU the calling thread runs on (field 39 of its stat; Python has
    no sched_getcpu)."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def cpuset(spec):
    if spec == "all":
        return None
    out = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def set_affinity(cpus):
    """Sets every thread of the process (the autograd engine's, the CUDA
    driver's and Go's included) to the CPUs; sched_setaffinity on pid 0
    would move the calling thread alone."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that ended meanwhile


def probe(args):
    t_start = time.perf_counter()
    sa = tb.setup_allocator(args.allocator, args.lib, args.conf)
    import torch
    tb.deterministic(torch)
    step, cycle = {"gpt2": tb.workload_gpt2, "resnet50": tb.workload_resnet50,
                   "generate": tb.workload_generate}[args.workload](torch)
    started = os.sched_getaffinity(0)
    gct = GCTimer()

    def dev():
        if sa is None:
            return (0, 0)
        s = sa.stats(0)
        return (s["device_allocs"], s["device_frees"])

    def gpu_calib():
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        for _ in range(20):
            a = a @ a
            a = a / 64
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1)

    steps = []
    i = 0

    def one(variant, phase):
        nonlocal i
        c = calibrate()
        g0, n0 = gct.total, list(gct.counts)
        d0 = dev()
        cpu0 = current_cpu()
        th0 = time.thread_time()
        t0 = time.perf_counter()
        loss = step(i)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        th = time.thread_time() - th0
        d1 = dev()
        steps.append(dict(i=i, place=i % cycle, phase=phase, variant=variant, wall=1e3 * dt, calib=1e3 * c,
                          thread_cpu=1e3 * th, gc=1e3 * (gct.total - g0),
                          gcn=[b - a for a, b in zip(n0, gct.counts)], cpu=[cpu0, current_cpu()],
                          dev=[d1[0] - d0[0], d1[1] - d0[1]], loss=loss))
        i += 1

    setup_s = time.perf_counter() - t_start
    for _ in range(args.warmup):
        one("all", "warmup")
    # One cycle under the profiler: the GPU's busy time a step.
    from torch.profiler import profile, ProfilerActivity
    busy = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(cycle):
            one("all", "profiled")
    busy_total = 0.0
    for e in prof.key_averages():
        busy_total += (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0) / 1e3
    # One cycle counting synchronizations.
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        for _ in range(cycle):
            one("all", "syncdebug")
        torch.cuda.set_sync_debug_mode(0)
    syncs = sum(1 for x in w if "synchroniz" in str(x.message))
    sync_kinds = sorted({str(x.message)[:80] for x in w if "synchroniz" in str(x.message)})
    variants = args.variants.split(",") if args.variants else ["all"]
    variants = [v.replace("+", ",") for v in variants]
    gcal = []
    for b in range(args.blocks):
        order = variants if b % 2 == 0 else variants[::-1]
        for v in order:
            s = cpuset(v)
            set_affinity(s if s is not None else started)
            gcal.append((v, gpu_calib()))
            for _ in range(cycle * args.cycles_per_block):
                one(v, "timed")
        set_affinity(started)
    result = dict(workload=args.workload, allocator=args.allocator, conf=args.conf if sa else "",
                  tag=os.environ.get("PROBE_TAG", ""), pid=os.getpid(), setup_s=setup_s,
                  affinity=sorted(started), torch_threads=torch.get_num_threads(),
                  env={k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "PYTHONHASHSEED", "GOMAXPROCS")},
                  cycle=cycle, profiled_gpu_busy_ms_per_step=busy_total / cycle, syncs_per_step=syncs / cycle, sync_kinds=sync_kinds, gpu_calib=gcal, steps=steps)
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    timed = [s for s in steps if s["phase"] == "timed"]
    print(json.dumps(dict(workload=args.workload, allocator=args.allocator, setup_s=round(setup_s, 1),
                          wall_median=statistics.median(s["wall"] for s in timed),
                          calib_median=statistics.median(s["calib"] for s in timed),
                          gpu_busy=busy_total / cycle, syncs=syncs / cycle, gc_ms=sum(s["gc"] for s in timed))))
    return 0


def summary(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| tag | workload | allocator | setup s | median step ms (timed) | IQR/median | max/median | "
          "calib us median | corr(step, calib) over places | profiler device ms/step (upper bound) | syncs/step | "
          "GC ms in timed steps (gen2) | device calls in timed steps | GPU calib ms median |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t = [s for s in r["steps"] if s["phase"] == "timed"]
        w = sorted(s["wall"] for s in t)
        med = statistics.median(w)
        q = statistics.quantiles(w, n=4) if len(w) > 3 else [med, med, med]
        cal = statistics.median(s["calib"] for s in t)
        # Correlation of step time and calibration, each step against the
        # median of its place in the cycle (so the cycle's design drops out).
        places = {}
        for s in t:
            places.setdefault(s["place"], []).append(s["wall"])
        pm = {p: statistics.median(v) for p, v in places.items()}
        x = [s["wall"] / pm[s["place"]] for s in t]
        y = [s["calib"] for s in t]
        try:
            corr = statistics.correlation(x, y)
        except (statistics.StatisticsError, AttributeError):
            corr = float("nan")
        gcms = sum(s["gc"] for s in t)
        gen2 = sum(s["gcn"][2] for s in t)
        dv = [sum(s["dev"][0] for s in t), sum(s["dev"][1] for s in t)]
        gcal = statistics.median(g for _, g in r["gpu_calib"]) if r["gpu_calib"] else float("nan")
        print("| %s | %s | %s | %.1f | %.2f | %.3f | %.2f | %.0f | %.2f | %.2f | %.1f | %.1f (%d) | %d+%d | %.2f |" % (
            r.get("tag", ""), r["workload"], r["allocator"] + (" " + r["conf"] if r.get("conf") else ""),
            r["setup_s"], med, (q[2] - q[0]) / med, w[-1] / med, 1e3 * cal, corr,
            r["profiled_gpu_busy_ms_per_step"], r["syncs_per_step"], gcms, gen2, dv[0], dv[1], gcal))
    print("\nStalls: timed steps over 1.3 times the median of their place in the cycle, and the "
          "collector's part in them:\n")
    for r in rows:
        t = [s for s in r["steps"] if s["phase"] == "timed"]
        places = {}
        for s in t:
            places.setdefault(s["place"], []).append(s["wall"])
        pm = {p: statistics.median(v) for p, v in places.items()}
        st = [s for s in t if s["wall"] > 1.3 * pm[s["place"]]]
        excess = sum(s["wall"] - pm[s["place"]] for s in st)
        print("- %s %s %s: %d of %d steps, %.0f ms over their places' medians; %d of them ran a full (gen2) "
              "collection, %.0f ms in the collector; full collections in calm steps: %d; stalls: %s" % (
                  r.get("tag", ""), r["workload"], r["allocator"], len(st), len(t), excess,
                  sum(1 for s in st if s["gcn"][2]), sum(s["gc"] for s in st),
                  sum(1 for s in t if s["gcn"][2] and s not in st),
                  ", ".join("%.0f ms (place %.0f, gc %.0f ms, dev %d+%d)" % (
                      s["wall"], pm[s["place"]], s["gc"], s["dev"][0], s["dev"][1]) for s in st)))
    print("\nBy CPU-affinity variant (median step ms over timed steps, by place in the cycle, then all):\n")
    for r in rows:
        vs = {}
        for s in r["steps"]:
            if s["phase"] == "timed":
                vs.setdefault(s["variant"], []).append(s)
        cells = []
        for v, ss in vs.items():
            cells.append("%s: %.2f (calib %.0f us, cpus seen %d)" % (
                v, statistics.median(s["wall"] for s in ss), 1e3 * statistics.median(s["calib"] for s in ss),
                len({c for s in ss for c in s["cpu"]})))
        print("- %s %s %s: %s" % (r.get("tag", ""), r["workload"], r["allocator"], "; ".join(cells)))
    print("\nPer place in the cycle (median wall ms of timed steps; warm-up steps' wall in order):\n")
    for r in rows:
        t = [s for s in r["steps"] if s["phase"] == "timed"]
        places = {}
        for s in t:
            places.setdefault(s["place"], []).append(s["wall"])
        warm = [s for s in r["steps"] if s["phase"] == "warmup"]
        print("- %s %s %s: places %s; warm-up %s; warm-up device calls %s" % (
            r.get("tag", ""), r["workload"], r["allocator"],
            " ".join("%.1f" % statistics.median(places[p]) for p in sorted(places)),
            " ".join("%.0f" % s["wall"] for s in warm), " ".join("%d+%d" % tuple(s["dev"]) for s in warm)))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload", choices=["gpt2", "resnet50", "generate"])
    p.add_argument("allocator", choices=["native", "expandable", "streamalloc"])
    p.add_argument("--out", required=True)
    p.add_argument("--lib", default=None)
    p.add_argument("--conf", default="pool")
    p.add_argument("--warmup", type=int, default=18)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--cycles-per-block", type=int, default=1)
    p.add_argument("--variants", default="all")
    return probe(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
