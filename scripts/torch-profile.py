#!/usr/bin/env python3
"""torch-profile.py: where a GPT-2 step's time goes under two allocators.

The workload is torch-bench.py's GPT-2 training (same model, optimizer,
autocast, batch and cycle of sequence lengths, same deterministic settings);
one allocator per process, because an allocator is chosen before the first
CUDA allocation. After the warm-up steps, torch.profiler (CPU and CUDA
activities) records one or more whole cycles of steps; the process reads its
own Chrome trace and writes a summary (JSON) with, per step:

  - step time from the host's side (each step ends with a synchronize, as in
    torch-bench.py) and allocations per step (native: the caching
    allocator's allocation count; streamalloc: sa_stats' allocs);
  - GPU busy time (kernels, copies and sets merged over all streams) and
    idle time: the gaps between consecutive GPU activities inside the
    step, and the gaps on the compute stream alone;
  - host time blocked in synchronizing calls (cudaStreamSynchronize,
    cudaDeviceSynchronize, cudaEventSynchronize, synchronous cudaMemcpy,
    cuMemFree and the rest named in BLOCKING) and in allocator calls the
    profiler sees (cudaMalloc, cudaFree, cuMem*);
  - self CPU time per operator (aten::*, autograd nodes, runtime calls).

Allocator calls themselves are not profiler events (neither the caching
allocator nor CUDAPluggableAllocator records one), so the pair's cost from
Python's view is measured beside the profile, outside it: torch.empty of
typical sizes then del, in a loop (the "pair" section).

usage: torch-profile.py run ALLOCATOR --out SUMMARY.json [--lib PATH]
                            [--conf CONF] [--warmup N] [--steps N]
       torch-profile.py compare NATIVE.json OTHER.json   (markdown to stdout)
       torch-profile.py slow TRACE.json.gz [--min-us N]
           (from a trace written with --trace: every operator whose self
           time exceeds N us, default 400, with the GPU's busy time inside
           its window; an operator that allocates and waits for the device
           shows a long self time while the GPU works)
"""

import argparse
import gzip
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Runtime and driver calls that make the host wait for the device (or may).
BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "cudaMemcpy", "cudaMemcpyAsync", "cuMemFree", "cuMemFree_v2", "cudaFree",
            "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH",
            "cuMemcpyDtoH_v2", "cudaStreamWaitEvent")
# Calls that belong to allocators and that the profiler can see.
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2",
                   "cudaMallocAsync", "cudaFreeAsync", "cuMemAllocAsync", "cuMemFreeAsync")

# Sizes of the pair loop: small tensors of a layer, an activation, the
# logits of a short step.
PAIR_SIZES = (512, 64 << 10, 1 << 20, 24 << 20, 196 << 20)


def bench_module():
    spec = importlib.util.spec_from_file_location("torch_bench", os.path.join(HERE, "torch-bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def merged_busy(intervals):
    """Total length of the union of [start, end) intervals, and the gaps."""
    intervals = sorted(intervals)
    busy, gaps = 0.0, 0.0
    cur_s, cur_e = None, None
    for s, e in intervals:
        if cur_e is None:
            cur_s, cur_e = s, e
        elif s > cur_e:
            busy += cur_e - cur_s
            gaps += s - cur_e
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy, gaps


def analyse(trace, step_windows):
    """Per step figures from a Chrome trace; times in microseconds."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset")
    steps = []
    self_time = {}
    for (s0, s1) in step_windows:
        in_step = [e for e in evs if s0 <= e["ts"] < s1]
        gpu = [e for e in in_step if e.get("cat") in gpu_cats]
        # Ends can run past the host's window only by the final sync.
        busy, gaps = merged_busy([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
        streams = {}
        for e in gpu:
            st = e.get("args", {}).get("stream", -1)
            streams.setdefault(st, []).append(e)
        main = max(streams, key=lambda k: len(streams[k])) if streams else None
        mbusy, mgaps = merged_busy([(e["ts"], e["ts"] + e["dur"]) for e in streams.get(main, [])])
        first = min((e["ts"] for e in gpu), default=s0)
        blocked = {}
        alloc = {}
        runtime_total = 0.0
        for e in in_step:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                runtime_total += e["dur"]
                n = e["name"]
                if n in BLOCKING:
                    b = blocked.setdefault(n, [0, 0.0])
                    b[0] += 1
                    b[1] += e["dur"]
                if n in ALLOCATOR_CALLS:
                    a = alloc.setdefault(n, [0, 0.0])
                    a[0] += 1
                    a[1] += e["dur"]
        steps.append({"window_us": s1 - s0, "gpu_busy_us": busy, "gpu_gaps_us": gaps,
                      "gpu_lead_us": first - s0, "kernels": len(gpu), "streams": len(streams),
                      "compute_stream_busy_us": mbusy, "compute_stream_gaps_us": mgaps,
                      "runtime_calls_us": runtime_total, "blocked": blocked, "allocator_calls": alloc})
    # Self time of host events: an event's duration less its direct
    # children's on the same thread (the profiler's events nest).
    host = [e for e in evs if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver", "python_function",
                                               "user_annotation")]
    lo = min(w[0] for w in step_windows)
    hi = max(w[1] for w in step_windows)
    host = [e for e in host if lo <= e["ts"] < hi and e.get("cat") != "user_annotation"]
    by_thread = {}
    for e in host:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evl in by_thread.values():
        evl.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evl:
            end = e["ts"] + e["dur"]
            while stack and stack[-1][1] <= e["ts"]:
                stack.pop()
            if stack and end <= stack[-1][1] + 0.001:
                stack[-1][2]["_child"] = stack[-1][2].get("_child", 0.0) + e["dur"]
            stack.append((e["ts"], end, e))
        for e in evl:
            k = e["name"]
            t = self_time.setdefault(k, [0, 0.0, 0.0])
            t[0] += 1
            t[1] += e["dur"] - e.get("_child", 0.0)
            t[2] += e["dur"]
    return steps, self_time


def pair_loop(torch, n):
    """Nanoseconds per torch.empty + del from Python, per size."""
    out = {}
    for size in PAIR_SIZES:
        for _ in range(200):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            del t
        t0 = time.perf_counter_ns()
        for _ in range(n):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            del t
        out[str(size)] = (time.perf_counter_ns() - t0) / n
    torch.cuda.synchronize()
    return out


def run(args):
    tb = bench_module()
    sa = tb.setup_allocator(args.allocator, args.lib, args.conf)
    import torch
    from torch.profiler import ProfilerActivity, profile
    tb.deterministic(torch)
    step, cycle = tb.workload_gpt2(torch)

    def allocs():
        if sa is not None:
            return sa.stats(0)["allocs"]
        return torch.cuda.memory_stats(0).get("allocation.all.allocated", 0)

    for i in range(args.warmup):
        step(i)
        torch.cuda.synchronize()
    # Unprofiled steps: the reference step times and allocations.
    plain, plain_allocs = [], []
    for i in range(args.warmup, args.warmup + args.steps):
        a0 = allocs()
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        plain.append((time.perf_counter() - t0) * 1e3)
        plain_allocs.append(allocs() - a0)
    # Profiled steps: the same step indices modulo the cycle.
    base = args.warmup + args.steps
    windows, prof_ms = [], []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(base, base + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.profiler.record_function(f"step{i}"):
                step(i)
                torch.cuda.synchronize()
            prof_ms.append((time.perf_counter() - t0) * 1e3)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    for e in trace.get("traceEvents", []):
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step"):
            windows.append((e["ts"], e["ts"] + e["dur"], int(e["name"][4:])))
    windows.sort()
    steps, self_time = analyse(trace, [(w[0], w[1]) for w in windows])
    if args.trace:
        with open(path, "rb") as f, gzip.open(args.trace, "wb") as g:
            g.write(f.read())
    os.unlink(path)
    pair = pair_loop(torch, args.pair_iters)
    seqs = tb.GPT2_SEQS
    result = {"allocator": args.allocator, "conf": args.conf if args.allocator == "streamalloc" else "",
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "plain_ms": plain, "plain_allocs": plain_allocs, "profiled_ms": prof_ms,
              "seq": [seqs[w[2] % len(seqs)] for w in windows], "steps": steps,
              "self_time": {k: v for k, v in self_time.items() if v[1] >= 50.0},
              "pair_ns": pair}
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps({"allocator": args.allocator, "plain_ms": [round(x, 2) for x in plain],
                      "profiled_ms": [round(x, 2) for x in prof_ms], "allocs": plain_allocs,
                      "pair_ns": {k: round(v) for k, v in pair.items()}}))


def fmt(x, d=1):
    return f"{x:,.{d}f}"


def compare(a_path, b_path):
    A = json.load(open(a_path))
    B = json.load(open(b_path))
    na, nb = A["allocator"], B["allocator"] + (" " + B["conf"] if B["conf"] else "")
    n = min(len(A["steps"]), len(B["steps"]))

    def tot(R, key):
        return sum(s[key] for s in R["steps"][:n]) / n / 1e3

    def blocked(R):
        out = {}
        for s in R["steps"][:n]:
            for k, (c, t) in s["blocked"].items():
                o = out.setdefault(k, [0, 0.0])
                o[0] += c
                o[1] += t
        return out

    print(f"# GPT-2 step profile: {na} against {nb}\n")
    print(f"Device: {A['device']}; torch {A['torch']}; {n} profiled steps each (one cycle), after "
          f"{len(A['plain_ms'])} unprofiled timed steps. Per-step means (ms unless named).\n")
    print(f"| figure | {na} | {nb} | difference |")
    print("|---|---:|---:|---:|")
    rows = [
        ("step time, unprofiled (ms, sum of the cycle / steps)", sum(A["plain_ms"]) / len(A["plain_ms"]),
         sum(B["plain_ms"]) / len(B["plain_ms"])),
        ("step time, profiled", sum(A["profiled_ms"][:n]) / n, sum(B["profiled_ms"][:n]) / n),
        ("allocations a step", sum(A["plain_allocs"]) / len(A["plain_allocs"]),
         sum(B["plain_allocs"]) / len(B["plain_allocs"])),
        ("GPU busy (all streams merged)", tot(A, "gpu_busy_us"), tot(B, "gpu_busy_us")),
        ("GPU idle gaps between activities", tot(A, "gpu_gaps_us"), tot(B, "gpu_gaps_us")),
        ("GPU idle before its first kernel", tot(A, "gpu_lead_us"), tot(B, "gpu_lead_us")),
        ("compute stream busy", tot(A, "compute_stream_busy_us"), tot(B, "compute_stream_busy_us")),
        ("compute stream gaps", tot(A, "compute_stream_gaps_us"), tot(B, "compute_stream_gaps_us")),
        ("host in CUDA runtime/driver calls", tot(A, "runtime_calls_us"), tot(B, "runtime_calls_us")),
        ("GPU activities a step (count)", tot(A, "kernels") * 1e3, tot(B, "kernels") * 1e3),
    ]
    for name, x, y in rows:
        print(f"| {name} | {fmt(x, 2)} | {fmt(y, 2)} | {fmt(y - x, 2)} |")
    ba, bb = blocked(A), blocked(B)
    for k in sorted(set(ba) | set(bb)):
        ca, ta = ba.get(k, [0, 0.0])
        cb, tb_ = bb.get(k, [0, 0.0])
        print(f"| blocking call {k}: count a step, ms a step | {ca / n:.1f}, {ta / n / 1e3:.3f} | "
              f"{cb / n:.1f}, {tb_ / n / 1e3:.3f} | {(tb_ - ta) / n / 1e3:.3f} |")
    print("\nPer step (ms): length, unprofiled A/B, profiled A/B, GPU busy A/B, GPU gaps A/B\n")
    print(f"| length | unprofiled {na} | unprofiled {nb} | profiled {na} | profiled {nb} | busy {na} | busy {nb} "
          f"| gaps {na} | gaps {nb} |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in range(n):
        sa_, sb = A["steps"][i], B["steps"][i]
        print(f"| {A['seq'][i]} | {A['plain_ms'][i]:.2f} | {B['plain_ms'][i]:.2f} | {A['profiled_ms'][i]:.2f} | "
              f"{B['profiled_ms'][i]:.2f} | {sa_['gpu_busy_us'] / 1e3:.2f} | {sb['gpu_busy_us'] / 1e3:.2f} | "
              f"{sa_['gpu_gaps_us'] / 1e3:.2f} | {sb['gpu_gaps_us'] / 1e3:.2f} |")
    print("\nSelf CPU time by event, ms a step, the 25 that differ most (count a step in brackets)\n")
    print(f"| event | {na} | {nb} | difference |")
    print("|---|---:|---:|---:|")
    sa_t, sb_t = A["self_time"], B["self_time"]
    keys = set(sa_t) | set(sb_t)
    diff = sorted(keys, key=lambda k: -abs(sb_t.get(k, [0, 0, 0])[1] - sa_t.get(k, [0, 0, 0])[1]))
    for k in diff[:25]:
        a = sa_t.get(k, [0, 0.0, 0.0])
        b = sb_t.get(k, [0, 0.0, 0.0])
        print(f"| `{k[:70]}` | {a[1] / n / 1e3:.3f} ({a[0] / n:.0f}) | {b[1] / n / 1e3:.3f} ({b[0] / n:.0f}) "
              f"| {(b[1] - a[1]) / n / 1e3:+.3f} |")
    print("\nSelf CPU time, the 15 largest under the first allocator, ms a step\n")
    print(f"| event | {na} | {nb} |")
    print("|---|---:|---:|")
    for k in sorted(sa_t, key=lambda k: -sa_t[k][1])[:15]:
        print(f"| `{k[:70]}` | {sa_t[k][1] / n / 1e3:.3f} | {sb_t.get(k, [0, 0.0])[1] / n / 1e3:.3f} |")
    print("\nThe pair from Python (torch.empty of N bytes, then del), ns a pair\n")
    print(f"| bytes | {na} | {nb} | difference |")
    print("|---:|---:|---:|---:|")
    for k in A["pair_ns"]:
        print(f"| {int(k):,} | {A['pair_ns'][k]:.0f} | {B['pair_ns'][k]:.0f} | {B['pair_ns'][k] - A['pair_ns'][k]:+.0f} |")


def slow(path, min_us):
    with gzip.open(path) as f:
        trace = json.load(f)
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in evs
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step"))
    analyse(trace, [(s0, s1) for s0, s1, _ in steps])  # marks each event's children's time
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    print(f"| step | operator | self us | GPU busy inside its window, us |")
    print("|---|---|---:|---:|")
    total, busy_total = 0.0, 0.0
    for s0, s1, name in steps:
        for e in evs:
            if e.get("cat") != "cpu_op" or not s0 <= e["ts"] < s1:
                continue
            self_us = e["dur"] - e.get("_child", 0.0)
            if self_us <= min_us:
                continue
            a, b = e["ts"], e["ts"] + e["dur"]
            busy = sum(max(0.0, min(b, y) - max(a, x)) for x, y in gpu if y > a and x < b)
            print(f"| {name} | `{e['name']}` | {self_us:,.0f} | {busy:,.0f} |")
            total += self_us
            busy_total += busy
    n = max(len(steps), 1)
    print(f"\n{n} steps; self time of these operators {total / 1e3:.1f} ms ({total / n / 1e3:.2f} ms a step), "
          f"GPU busy inside them {busy_total / 1e3:.1f} ms")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("allocator", choices=("native", "streamalloc"))
    r.add_argument("--out", required=True)
    r.add_argument("--lib", default=os.path.join(HERE, "..", "build", "capi", "libstreamalloc.so"))
    r.add_argument("--conf", default="pool")
    r.add_argument("--warmup", type=int, default=6)
    r.add_argument("--steps", type=int, default=6)
    r.add_argument("--pair-iters", type=int, default=20000)
    r.add_argument("--trace", help="also write the Chrome trace here, gzipped")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    sl = sub.add_parser("slow")
    sl.add_argument("trace")
    sl.add_argument("--min-us", type=float, default=400.0)
    args = p.parse_args()
    if args.cmd == "run":
        run(args)
    elif args.cmd == "slow":
        slow(args.trace, args.min_us)
    else:
        compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
