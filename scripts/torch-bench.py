#!/usr/bin/env python3
"""torch-bench.py: real PyTorch and CuPy workloads under three allocators.

One (workload, allocator) pair per process, because an allocator is chosen
before the first CUDA allocation and cannot be changed after;
scripts/torch-bench.sh runs every pair and prints the table.

Workloads (models are randomly initialized from their configurations;
nothing is downloaded):
  gpt2      GPT-2 small (12 layers, 768 wide) training, AdamW, bf16 autocast,
            batch 8, sequence lengths cycling 256 512 1024 384 768 128
  resnet50  torchvision ResNet-50 training, SGD, fp16 autocast with a
            GradScaler, batch 64 at 224x224
  generate  GPT-2 small greedy generation with a growing KV cache (32-token
            prompt, 32 new tokens), batch sizes cycling 1 8 32 4 16
  cupy      CuPy arrays of cycling sizes: elementwise, rfft, matmul, reductions
Allocators: native (PyTorch's caching allocator), expandable (the same with
expandable_segments:True), native-async (PyTorch's own cudaMallocAsync
backend), streamalloc (libstreamalloc.so through CUDAPluggableAllocator or
CFunctionAllocator), cupy-pool (CuPy's MemoryPool), and control
(libtorch_control.so, capi/testdata/torch_control.c: a pluggable allocator in C
alone, which times every call; --conf is its mode: async (over
cuMemAllocAsync), async+go (the same and one call into Go per call), sa:CONF
(forwarding to streamalloc configured with CONF), cache (a caching
allocator in C with one free list per stream and size, over cuMemAlloc, that
makes no driver call once warm: the floor of any pluggable allocator), or
cache+go (the same and one call into Go per call: the floor of any
pluggable allocator written in Go)).
streamalloc's --conf is its configuration string; "default" stands for the
empty one (pluggable.Recommended, what an unset STREAMALLOC_CONF gives).

Deterministic settings: fixed seeds, data drawn on the GPU from a seeded
generator, torch.use_deterministic_algorithms(True, warn_only=True),
cuDNN deterministic without benchmarking, CUBLAS_WORKSPACE_CONFIG=:4096:8.

Step times: the host of the GPU machine is a virtual machine whose speed
varies by tens of percent from step to step and from process to process,
and these workloads are paced by the host, so one process's median step
time against another's cannot resolve 2%. The lockstep protocol
(lockstep, lockstep-table) keeps one process per configuration alive and
lets them take turns step by step, pairing each step with the same step
of the reference run just before or after it (BENCHMARKS.md, "Where the
spread between processes comes from").

usage: torch-bench.py run WORKLOAD ALLOCATOR --out RESULTS.jsonl [--lib PATH]
                          [--control-lib PATH] [--conf CONF] [--warmup N] [--steps N]
                          [--serve] [--gc on|freeze]
       torch-bench.py lockstep WORKLOAD --configs 'native; streamalloc pool' --out RESULTS.jsonl
                          --blocks-out BLOCKS.jsonl [--lib PATH] [--control-lib PATH] [--warmup N] [--blocks N]
                          [--block-steps N] [--pairs N] [--pin CPUS] [--gc on|freeze]
       torch-bench.py table RESULTS.jsonl
       torch-bench.py rounds RESULTS.jsonl
       torch-bench.py lockstep-table BLOCKS.jsonl [--ref CONFIGURATION]
"""

import argparse
import ctypes
import hashlib
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The program the lockstep driver starts for each configuration (this
# file; a test replaces it by a stand-in that speaks the protocol).
WORKER = os.path.abspath(__file__)


class _CtlStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "allocs", "frees", "failures", "alloc_ns", "free_ns", "reserved_high", "used_high")] + [("mode", ctypes.c_int)] + [
        (name, ctypes.c_uint64) for name in ("device_allocs", "device_frees", "reserved", "zero_allocs", "null_frees",
                                             "go_calls")]


class Control:
    """The C control allocator (capi/testdata/torch_control.c)."""

    def __init__(self, path, conf, lib):
        mode, _, inner = conf.partition(":")
        os.environ["TORCH_CONTROL"] = mode
        self.sa = None
        if mode in ("async+go", "cache+go", "sa"):
            os.environ["TORCH_CONTROL_LIB"] = lib
            sys.path.insert(0, os.path.join(HERE, "..", "python"))
            import streamalloc_torch
            self.sa = streamalloc_torch
            if mode == "sa":
                # Configure the library; the control forwards to it.
                streamalloc_torch.use_streamalloc(conf=sa_conf(inner or "pool"), torch=False, path=lib)
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.ctl_stats.argtypes = [ctypes.POINTER(_CtlStats)]
        self.lib.ctl_stats.restype = ctypes.c_int
        self.mode = mode

    def install(self):
        import torch
        alloc = torch.cuda.memory.CUDAPluggableAllocator(self.path, "ctl_alloc", "ctl_free")
        torch.cuda.memory.change_current_allocator(alloc)

    def detail_reset(self):
        """Forgets the per-stream detail so far (the warm-up's)."""
        self.lib.ctl_detail_reset()

    def detail_write(self, path):
        """Writes the per-stream, per-thread detail of the calls since
        detail_reset to path (torch_control.c, ctl_detail_write)."""
        if self.lib.ctl_detail_write(path.encode()) != 0:
            raise RuntimeError("torch_control: cannot write %s" % path)

    def stats(self):
        st = _CtlStats()
        if self.lib.ctl_stats(ctypes.byref(st)) != 0:
            raise RuntimeError("torch_control: ctl_stats failed (see the messages above)")
        return {name: getattr(st, name) for name, _ in _CtlStats._fields_}


def sa_conf(conf):
    """streamalloc's configuration string for --conf: "default" is the empty
    string (pluggable.Recommended), every other the string itself."""
    return "" if conf == "default" else conf


def setup_allocator(allocator, lib, conf, cupy=False, control_lib=None):
    """Chooses the allocator; must run before torch or cupy touch CUDA."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif allocator == "native-async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if allocator == "streamalloc":
        sys.path.insert(0, os.path.join(HERE, "..", "python"))
        import streamalloc_torch
        streamalloc_torch.use_streamalloc(conf=sa_conf(conf), torch=not cupy, cupy=cupy, path=lib)
        return streamalloc_torch
    if allocator == "control":
        ctl = Control(control_lib, conf, lib)
        ctl.install()
        return ctl
    return None


def deterministic(torch):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


# The sequence lengths of GPT-2's steps, in the order its steps cycle
# through them; rounds names the steps of the cycle by them.
GPT2_SEQS = [256, 512, 1024, 384, 768, 128]


def gpt2_config():
    from transformers import GPT2Config
    return GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)


def workload_gpt2(torch):
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel(gpt2_config()).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    seqs = GPT2_SEQS
    batch = 8

    def step(i):
        x = torch.randint(0, 50257, (batch, seqs[i % len(seqs)]), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step, len(seqs)


def workload_resnet50(torch):
    import torch.nn.functional as F
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    batch = 64

    def step(i):
        x = torch.randn(batch, 3, 224, 224, device="cuda", generator=gen)
        y = torch.randint(0, 1000, (batch,), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step, 1


def workload_generate(torch):
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel(gpt2_config()).cuda().eval()
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [1, 8, 32, 4, 16]
    prompt, new = 32, 32

    @torch.no_grad()
    def step(i):
        ids = torch.randint(0, 50257, (batches[i % len(batches)], prompt), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks = [nxt]
            for _ in range(new - 1):
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                toks.append(nxt)
        # The "loss" of generation: a checksum of the tokens generated.
        return float(torch.cat(toks, 1).sum().item())
    return step, len(batches)


def drive(args, step, sync, warm):
    """Runs args.warmup untimed steps, calls warm(), then the timed steps,
    each synchronized at its end and timed by the host's clock; returns
    every step's result and the timed steps' seconds.

    With args.serve the timed steps are run on request (the lockstep
    protocol, torch-bench.py lockstep): the process writes "LOCKSTEP
    ready" on its standard output after the warm-up, then for each line
    "go N" on its standard input runs the next N steps and writes
    "LOCKSTEP [ms, ...]", and stops at "end" or the end of its input.

    With args.gc == "freeze", after the warm-up Python's cyclic collector
    collects once and freezes every object then alive (gc.freeze), so a
    collection inside a timed step walks only the objects made since: the
    collector's cost no longer depends on how many objects the imports of
    torch and transformers left behind (see BENCHMARKS.md, "Where the
    spread between processes comes from")."""
    losses, times = [], []
    i = 0

    def one():
        nonlocal i
        t0 = time.perf_counter()
        losses.append(step(i))
        sync()
        i += 1
        return time.perf_counter() - t0
    for _ in range(args.warmup):
        one()
    if args.gc == "freeze":
        import gc
        gc.collect()
        gc.freeze()
    warm()
    if not args.serve:
        for _ in range(args.steps):
            times.append(one())
        return losses, times
    print("LOCKSTEP ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "end":
            break
        block = [one() for _ in range(int(words[1]))]
        times.extend(block)
        print("LOCKSTEP " + json.dumps([round(1e3 * t, 4) for t in block]), flush=True)
    return losses, times


def flush_log(sa, conf):
    """Writes streamalloc's memory history to its file if conf asks for one
    (log=PATH): the library buffers it and nothing flushes it at the
    process's exit. sa is None under another allocator."""
    if sa is not None and any(o.startswith("log=") for o in conf.split(",")):
        sa.flush_history()
        return True
    return False


def run_torch(args):
    alloc = setup_allocator(args.allocator, args.lib, args.conf, control_lib=args.control_lib)
    ctl = alloc if isinstance(alloc, Control) else None
    sa = ctl.sa if ctl is not None else alloc
    if ctl is not None and ctl.mode != "sa":
        sa = None  # async+go and cache+go load the library only to cross into Go
    import torch
    deterministic(torch)
    step, cycle = {"gpt2": workload_gpt2, "resnet50": workload_resnet50,
                   "generate": workload_generate}[args.workload](torch)
    def device_calls():
        # cudaMalloc/cudaFree (or a pool's growths and give-backs) so far.
        if sa is not None:
            s = sa.stats(0)
            return s["device_allocs"], s["device_frees"]
        if ctl is not None:
            # The control's own driver calls: cuMemAlloc and cuMemFree
            # (cache), cuMemAllocAsync and cuMemFreeAsync (async).
            c = ctl.stats()
            return c["device_allocs"], c["device_frees"]
        st = torch.cuda.memory_stats(0)
        return st.get("num_device_alloc", -1), st.get("num_device_free", -1)

    marks = {}

    def warm():
        marks["before"] = device_calls()
        marks["ctl_before"] = ctl.stats() if ctl is not None else None
        if ctl is not None:
            ctl.detail_reset()
    losses, times = drive(args, step, torch.cuda.synchronize, warm)
    before, ctl_before = marks["before"], marks["ctl_before"]
    after = device_calls()
    if ctl is not None and os.environ.get("TORCH_CONTROL_DETAIL"):
        ctl.detail_write(os.environ["TORCH_CONTROL_DETAIL"])
    flush_log(sa, args.conf)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "device_allocs": after[0], "device_frees": after[1],
              "device_allocs_timed": after[0] - before[0], "device_frees_timed": after[1] - before[1]}
    if sa is not None:
        s = sa.stats(0)
        result.update(peak_reserved=s["peak_reserved_bytes"], peak_allocated=s["peak_live_bytes"],
                      allocs=s["allocs"], oom=s["oom_count"], bad_frees=s["bad_free_count"],
                      errors=s["error_count"], address_space=s.get("address_space_bytes", 0),
                      vmm_fallback=s.get("vmm_fallback", 0))
    elif ctl is not None:
        c = ctl.stats()
        # async: the driver pool's high-water marks (used is the pool's
        # rounded bytes); cache: its own (reserved: its blocks' bytes;
        # allocated: the requested bytes of live allocations).
        result.update(peak_reserved=c["reserved_high"], peak_allocated=c["used_high"], allocs=c["allocs"],
                      errors=c["failures"], zero_allocs=c["zero_allocs"], null_frees=c["null_frees"],
                      go_calls=c["go_calls"], allocated_is_driver_used=not ctl.mode.startswith("cache"))
    else:
        st = torch.cuda.memory_stats(0)
        result.update(peak_reserved=torch.cuda.max_memory_reserved(0),
                      peak_allocated=st.get("requested_bytes.all.peak", 0) or torch.cuda.max_memory_allocated(0),
                      peak_allocated_blocks=torch.cuda.max_memory_allocated(0),
                      allocs=st.get("allocation.all.allocated", 0))
    if ctl is not None:
        # Calls during the timed steps, and the time spent in them, as
        # seen from the host's side of the call.
        c = ctl.stats()
        n_a, n_f = c["allocs"] - ctl_before["allocs"], c["frees"] - ctl_before["frees"]
        result.update(timed_allocs=n_a, timed_frees=n_f,
                      alloc_ns_mean=(c["alloc_ns"] - ctl_before["alloc_ns"]) / max(n_a, 1),
                      free_ns_mean=(c["free_ns"] - ctl_before["free_ns"]) / max(n_f, 1),
                      call_ms_per_step=(c["alloc_ns"] + c["free_ns"] - ctl_before["alloc_ns"] - ctl_before["free_ns"])
                      / 1e6 / max(len(times), 1))
    return finish(args, result, losses, times, cycle)


def run_cupy(args):
    sa = setup_allocator(args.allocator, args.lib, args.conf, cupy=True)
    import cupy as cp
    pool = cp.get_default_memory_pool() if sa is None else None
    peak = {"reserved": 0, "used": 0}

    def sample():
        # CuPy's pool has no high-water marks: sample after every step
        # of the workload (an estimate from below).
        if pool is not None:
            peak["reserved"] = max(peak["reserved"], pool.total_bytes())
            peak["used"] = max(peak["used"], pool.used_bytes())

    rs = cp.random.RandomState(0)
    sizes = [1 << 20, 4 << 20, 16 << 20, 3 << 20, 9 << 20]

    def step(i):
        n = sizes[i % len(sizes)]
        a = rs.standard_normal(n, dtype=cp.float32)
        sample()
        b = a * 2 + 1
        sample()
        c = cp.fft.rfft(b)
        sample()
        m = int(math.isqrt(n // 4)) * 2
        x = a[: m * m].reshape(m, m)
        y = x @ x.T
        sample()
        total = float(cp.abs(c).sum() + y.sum())
        sample()
        del a, b, c, x, y
        return total

    def device_calls():
        # streamalloc's pool's growths and give-backs so far (CuPy's own
        # pool does not count its cudaMalloc calls).
        if sa is None:
            return -1, -1
        st = sa.stats(0)
        return st["device_allocs"], st["device_frees"]

    marks = {}

    def warm():
        marks["before"] = device_calls()
    losses, times = drive(args, step, cp.cuda.Device(0).synchronize, warm)
    before = marks["before"]
    flush_log(sa, args.conf)
    result = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy": cp.__version__}
    if sa is not None:
        after = device_calls()
        result.update(device_allocs=after[0], device_frees=after[1],
                      device_allocs_timed=after[0] - before[0], device_frees_timed=after[1] - before[1])
        s = sa.stats(0)
        result.update(peak_reserved=s["peak_reserved_bytes"], peak_allocated=s["peak_live_bytes"],
                      allocs=s["allocs"], oom=s["oom_count"], bad_frees=s["bad_free_count"],
                      errors=s["error_count"], address_space=s.get("address_space_bytes", 0),
                      vmm_fallback=s.get("vmm_fallback", 0))
    else:
        result.update(peak_reserved=peak["reserved"], peak_allocated=peak["used"], sampled=True)
    return finish(args, result, losses, times, len(sizes))


def finish(args, result, losses, times, cycle):
    env = " ".join("%s=%s" % (k, os.environ[k]) for k in ("GOMAXPROCS", "GOGC", "GODEBUG") if k in os.environ)
    result.update(workload=args.workload, allocator=args.allocator, env=env,
                  round=int(os.environ.get("BENCH_ROUND", "0")),
                  conf=args.conf if args.allocator in ("streamalloc", "control") else "",
                  warmup=args.warmup, steps=len(times), cycle=cycle, gc=args.gc,
                  pair=int(os.environ.get("BENCH_PAIR", "0")),
                  step_ms_median=1e3 * statistics.median(times), step_ms_min=1e3 * min(times),
                  step_ms_max=1e3 * max(times), times_ms=[round(1e3 * t, 3) for t in times],
                  final_loss=repr(losses[-1]),
                  losses_sha=hashlib.sha256(repr(losses).encode()).hexdigest()[:16], losses=losses)
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("losses", "times_ms")}))
    return 0


def mib(n):
    return "%.0f" % (n / 2**20)


def table(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    order = ["native", "expandable", "native-async", "cupy-pool", "control", "streamalloc"]
    print("| workload | allocator | step ms (median) | vs native | peak reserved MiB | peak allocated MiB"
          " | reserved / allocated | device allocs+frees in timed steps | losses vs native |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in ["gpt2", "resnet50", "generate", "cupy"]:
        rs = sorted((r for r in rows if r["workload"] == w),
                    key=lambda r: (order.index(r["allocator"]), r.get("conf", ""), r.get("env", "")))
        base = next((r for r in rs if r["allocator"] in ("native", "cupy-pool")), None)
        for r in rs:
            vs = "%.3f" % (r["step_ms_median"] / base["step_ms_median"]) if base else "-"
            ratio = r["peak_reserved"] / r["peak_allocated"] if r["peak_allocated"] else float("nan")
            if base is None or r is base:
                same = "(reference)"
            elif r["losses"] == base["losses"]:
                same = "identical (%d steps)" % len(r["losses"])
            else:
                d = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(r["losses"], base["losses"]))
                same = "differ: max rel. %.2e, final %s vs %s" % (d, r["final_loss"], base["final_loss"])
            note = " (sampled)" if r.get("sampled") else ""
            env = " ".join(e for e in r.get("env", "").split() if e != "GODEBUG=gctrace=1")
            name = r["allocator"] + (" `%s`" % r["conf"] if r.get("conf") else "") + (" (%s)" % env if env else "")
            if r.get("vmm_fallback"):
                name += " (no VMM: over cuMemAlloc)"
            calls = "%s+%s" % (r.get("device_allocs_timed", "-"), r.get("device_frees_timed", "-"))
            print("| %s | %s | %.2f | %s | %s%s | %s%s | %.3f | %s | %s |" % (
                w, name, r["step_ms_median"], vs, mib(r["peak_reserved"]), note,
                mib(r["peak_allocated"]), note, ratio, calls, same))
    timed = [r for r in rows if "alloc_ns_mean" in r]
    if timed:
        print("\nCalls timed by the control, from the host's side, during the timed steps:\n")
        print("| workload | control mode | allocs a step | ns per alloc | ns per free | ms in calls a step | step ms |")
        print("|---|---|---|---|---|---|---|")
        for r in timed:
            print("| %s | `%s` | %.0f | %.0f | %.0f | %.2f | %.2f |" % (
                r["workload"], r["conf"], r["timed_allocs"] / max(r["steps"], 1), r["alloc_ns_mean"],
                r["free_ns_mean"], r["call_ms_per_step"], r["step_ms_median"]))
    dev = {r.get("device") for r in rows}
    print("\ndevice: %s; steps: %s" % (", ".join(sorted(d for d in dev if d)),
                                       ", ".join(sorted({"%s %d+%d" % (r["workload"], r["warmup"], r["steps"]) for r in rows}))))


def config_name(r):
    env = " ".join(e for e in r.get("env", "").split() if e != "GODEBUG=gctrace=1")
    return r["allocator"] + (" `%s`" % r["conf"] if r.get("conf") else "") + (" (%s)" % env if env else "")


def paired(fig, ref):
    """The round-by-round ratios of fig to ref (dicts by round), as the
    text "median [min, max] (n pairs)" and the sign test's verdict at 2%."""
    ratios = sorted(fig[k] / ref[k] for k in fig if k in ref)
    if not ratios:
        return ["-", "no pairs"]
    pair = "%.3f [%.3f, %.3f] (%d pairs)" % (statistics.median(ratios), ratios[0], ratios[-1], len(ratios))
    n = len(ratios)
    if ratios[-1] <= 1.02:
        verdict = "within 2%%, p <= %.3f" % (2 / 2 ** n) if n > 1 else "within 2% (1 pair)"
    elif ratios[0] > 1.02:
        verdict = "slower by more than 2%%, p <= %.3f" % (2 / 2 ** n) if n > 1 else "slower (1 pair)"
    else:
        verdict = "not resolved"
    return [pair, verdict]


def by_step(rs, configs):
    """Per configuration, the median over its processes' timed steps of
    each step of the workload's cycle, as a list indexed by the step's
    place in the cycle (timed step j of a process is step warmup + j).
    None where the processes' cycles differ or a cycle has one step."""
    cycles = {r.get("cycle", 0) for r in rs}
    if len(cycles) != 1:
        return None
    cycle = cycles.pop()
    if cycle < 2:
        return None
    out = {}
    for c in configs:
        kinds = [[] for _ in range(cycle)]
        for r in rs:
            if config_name(r) == c:
                for j, t in enumerate(r["times_ms"]):
                    kinds[(r["warmup"] + j) % cycle].append(t)
        out[c] = [statistics.median(k) if k else None for k in kinds]
    return out


def print_by_step(w, configs, rs):
    """The table of by_step, its columns in the cycle's order, named by
    sequence length for GPT-2 and by place in the cycle otherwise."""
    med = by_step(rs, configs)
    if med is None:
        return
    cycle = len(next(iter(med.values())))
    names = [str(n) for n in GPT2_SEQS] if w == "gpt2" and cycle == len(GPT2_SEQS) else \
        ["step %d" % k for k in range(cycle)]
    print("\nMedian ms of each step of the cycle over the processes' timed steps (%s):\n" % w)
    print("| configuration | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * cycle)
    for c in configs:
        print("| %s | %s |" % (c, " | ".join("-" if m is None else "%.1f" % m for m in med[c])))


def rounds(path):
    """The interleaved protocol's table (torch-bench.sh INTERLEAVE=...).

    Each process gives one figure, the median of its timed steps. Per
    configuration: the median of those figures over its processes and
    their spread ((max - min) / median). Against the reference (native,
    or CuPy's pool), each round's ratio of the two processes' figures,
    paired round by round; their median and range. With n rounds, the
    range holds the median paired ratio of the process population with
    probability 1 - 2/2^n (a sign test), so the verdict "within 2%" needs
    every paired ratio at most 1.02, "slower" every one above it. The last
    two columns pair the total time of each process's timed steps the same
    way: where steps differ by design (GPT-2 cycles six sequence lengths),
    a process's median falls between two kinds of step, and the total is
    what a run costs."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("round")]
    print("| workload | configuration | processes | median step ms | spread of processes | "
          "ratio to reference, paired by round: median [min, max] | verdict at 2% | "
          "total of timed steps, paired ratio: median [min, max] | verdict at 2% |")
    print("|---|---|---:|---:|---:|---|---|---|---|")
    for w in ["gpt2", "resnet50", "generate", "cupy"]:
        rs = [r for r in rows if r["workload"] == w]
        if not rs:
            continue
        configs = []
        for r in rs:
            if config_name(r) not in configs:
                configs.append(config_name(r))
        ref = next((c for c in configs if c.startswith(("native", "cupy-pool"))), configs[0])
        by = {c: {r["round"]: r["step_ms_median"] for r in rs if config_name(r) == c} for c in configs}
        total = {c: {r["round"]: sum(r["times_ms"]) for r in rs if config_name(r) == c} for c in configs}
        for c in configs:
            ms = sorted(by[c].values())
            med = statistics.median(ms)
            spread = (ms[-1] - ms[0]) / med
            if c == ref:
                cols = ["(reference)", "", "(reference)", ""]
            else:
                cols = paired(by[c], by[ref]) + paired(total[c], total[ref])
            print("| %s | %s | %d | %.2f | %.1f%% | %s |" % (w, c, len(ms), med, 100 * spread, " | ".join(cols)))
        others = [c for c in configs if c != ref]
        pairs = [(a, b) for i, a in enumerate(others) for b in others[i + 1:]]
        if pairs:
            print("\n| workload | configuration / configuration | ratio of medians, paired by round | verdict at 2%"
                  " | ratio of totals, paired by round | verdict at 2% |")
            print("|---|---|---|---|---|---|")
            for a, b in pairs:
                print("| %s | %s / %s | %s |" % (w, a, b, " | ".join(paired(by[a], by[b]) + paired(total[a], total[b]))))
        print_by_step(w, configs, rs)
    dev = {r.get("device") for r in rows}
    print("\ndevice: %s; steps: %s" % (", ".join(sorted(d for d in dev if d)),
                                       ", ".join(sorted({"%s %d+%d" % (r["workload"], r["warmup"], r["steps"]) for r in rows}))))


def parse_spec(spec):
    """An interleave or lockstep configuration "ALLOCATOR [CONF [VAR=VALUE ...]]"
    as (allocator, conf, {VAR: VALUE})."""
    words = spec.split()
    env = dict(w.split("=", 1) for w in words[2:])
    return words[0], (words[1] if len(words) > 1 else "pool"), env


def lockstep(args):
    """The lockstep protocol: one process per configuration, all alive at
    once, taking turns. Each process builds its model and warms up
    (concurrently), then the driver asks them in turn for one block of
    steps (the same steps of the workload, in the same order, in every
    process), in ABBA order from block to block, so that only one process
    runs at any time and two blocks compared are seconds apart. The
    host's speed, which drifts over tens of seconds on these machines,
    then weighs on both sides of each pair of blocks alike. --pairs runs
    that many such groups of processes one after the other, to see how
    much a process's own lot (its addresses, its threads' placement)
    moves the result. Writes one line per block to --blocks-out and each
    process's usual result row (round = block group) to --out."""
    import subprocess
    specs = [parse_spec(x) for x in args.configs.split(";") if x.strip()]
    if len(specs) < 2:
        print("lockstep: needs at least two configurations", file=sys.stderr)
        return 2
    # One step a block, so that the steps compared are one step apart in
    # time; CuPy's steps take under a millisecond, so its blocks are a
    # cycle of its sizes.
    block = args.block_steps or (5 if args.workload == "cupy" else 1)
    status = 0
    for pair in range(1, args.pairs + 1):
        procs = []
        for k, (alloc, conf, env) in enumerate(specs):
            e = dict(os.environ, **env, BENCH_ROUND=str(pair), BENCH_PAIR=str(pair), PYTHONUNBUFFERED="1")
            cmd = [sys.executable, WORKER, "run", args.workload, alloc, "--out", args.out,
                   "--conf", conf, "--warmup", str(args.warmup), "--steps", "0", "--serve", "--gc", args.gc]
            if args.lib:
                cmd += ["--lib", args.lib]
            if getattr(args, "control_lib", None):
                cmd += ["--control-lib", args.control_lib]
            if args.pin:
                cmd = ["taskset", "-c", args.pin] + cmd
            log = open("%s.%s.pair%d.%d.log" % (args.blocks_out, args.workload, pair, k), "w")
            procs.append((subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                           text=True, env=e), log))
        names = [config_name(dict(allocator=a, conf=c if a in ("streamalloc", "control") else "",
                                  env=" ".join("%s=%s" % kv for kv in env.items()))) for a, c, env in specs]

        def reply(p):
            for line in p.stdout:
                if line.startswith("LOCKSTEP "):
                    return line[len("LOCKSTEP "):].strip()
            return None
        ok = all(reply(p) == "ready" for p, _ in procs)
        with open(args.blocks_out, "a") as f:
            for b in range(args.blocks if ok else 0):
                order = list(range(len(procs))) if b % 2 == 0 else list(range(len(procs)))[::-1]
                for pos, k in enumerate(order):
                    p = procs[k][0]
                    p.stdin.write("go %d\n" % block)
                    p.stdin.flush()
                    got = reply(p)
                    if got is None:
                        ok = False
                        break
                    f.write(json.dumps(dict(workload=args.workload, pair=pair, block=b, config=names[k],
                                            position=pos, first_step=args.warmup + b * block,
                                            ms=json.loads(got))) + "\n")
                if not ok:
                    break
        for p, log in procs:
            try:
                p.stdin.write("end\n")
                p.stdin.close()
            except OSError:
                pass
            for _ in p.stdout:
                pass
            p.stdout.close()
            if p.wait() != 0:
                ok = False
            log.close()
        if not ok:
            print("lockstep: pair %d failed; see %s.%s.pair%d.*.log" % (pair, args.blocks_out, args.workload, pair),
                  file=sys.stderr)
            status = 1
    return status


def median_ci(xs, level=0.95):
    """The median of xs and a distribution-free confidence interval for
    the population's median: the order statistics (k, n+1-k) whose
    binomial(n, 1/2) coverage is at least level (None if n is too small)."""
    xs = sorted(xs)
    n = len(xs)
    med = statistics.median(xs)
    best = None
    for k in range(1, n // 2 + 1):
        # P(X_(k) <= m <= X_(n+1-k)) = 1 - 2 P(Bin(n, 1/2) <= k - 1)
        tail = sum(math.comb(n, j) for j in range(k)) / 2 ** n
        if 1 - 2 * tail >= level:
            best = (xs[k - 1], xs[n - k])
        else:
            break
    return med, best


def verdict(ci, bound=1.02):
    if ci is None:
        return "too few blocks"
    lo, hi = ci
    if hi <= bound:
        return "within 2%"
    if lo > bound:
        return "slower by more than 2%"
    return "not resolved"


# The cycle of each workload's steps (GPT-2's sequence lengths,
# generation's batch sizes, CuPy's array sizes).
CYCLES = {"gpt2": len(GPT2_SEQS), "resnet50": 1, "generate": 5, "cupy": 5}


def by_place(ms, ref, c, w):
    """The median ratio of c's steps to ref's by place in the workload's
    cycle, as (median, pairs) per place; None without the blocks' first
    steps or with a cycle of one step."""
    cycle = CYCLES.get(w, 1)
    if cycle < 2:
        return None
    out = [[] for _ in range(cycle)]
    for (g, b, cc), v in ms.items():
        if cc != c or (g, b, ref) not in ms:
            continue
        if v.first_step is None:
            return None
        for j, (x, y) in enumerate(zip(v, ms[(g, b, ref)])):
            out[(v.first_step + j) % cycle].append(x / y)
    return [(statistics.median(o), len(o)) if o else (float("nan"), 0) for o in out]


class _Block(list):
    """A block's step times with the index of its first step."""
    first_step = None


def lockstep_table(path, ref_name=None):
    """The lockstep protocol's table. For each configuration against the
    first (the reference; with ref_name, the configuration of that name,
    as the table prints it or by its conf alone, in every workload that
    ran it), in the same group of processes: the ratio of
    each step to the reference's same step (the same sequence length,
    batch or size, run within a block of it in time), and of each block's
    total to the reference's block; each set of ratios' median with its
    95% distribution-free interval (median_ci), and the verdict at 2% from
    the interval; the ratio of all timed steps' totals; and the step
    ratios' median per group of processes (what a process's own lot
    adds). A step that stalls (the host pauses the process for tens of
    milliseconds, under every allocator) moves one step ratio and not the
    median of hundreds, where it moves a block's total by its whole
    length."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("| workload | configuration | step pairs | ratio to reference by step: median, 95% CI | verdict at 2% | "
          "steps slower | block pairs | ratio by block: median, 95% CI | verdict at 2% | ratio of totals | "
          "by group of processes: median of step ratios | reference's median step ms |")
    print("|---|---|---:|---|---|---:|---:|---|---|---:|---|---:|")
    places, missing = [], []
    for w in ["gpt2", "resnet50", "generate", "cupy"]:
        rs = [r for r in rows if r["workload"] == w]
        if not rs:
            continue
        configs = []
        for r in rs:
            if r["config"] not in configs:
                configs.append(r["config"])
        ref = configs[0]
        if ref_name:
            named = [c for c in configs if c in (ref_name, "streamalloc `%s`" % ref_name, "control `%s`" % ref_name)]
            if not named:
                missing.append(w)
                continue
            ref = named[0]
        ms = {}
        for r in rs:
            v = _Block(r["ms"])
            v.first_step = r.get("first_step")
            ms[(r["pair"], r["block"], r["config"])] = v
        groups = sorted({r["pair"] for r in rs})
        ref_step = statistics.median(t for k, v in ms.items() if k[2] == ref for t in v)
        for c in [c for c in configs if c != ref]:
            steps, blocks, per, tot = [], [], [], [0.0, 0.0]
            for g in groups:
                sg = []
                for (p, b, cc), v in ms.items():
                    if p != g or cc != c or (g, b, ref) not in ms:
                        continue
                    rv = ms[(g, b, ref)]
                    sg += [x / y for x, y in zip(v, rv)]
                    blocks.append(sum(v) / sum(rv))
                    tot[0] += sum(v)
                    tot[1] += sum(rv)
                if sg:
                    steps += sg
                    per.append("%.3f (%d)" % (statistics.median(sg), len(sg)))
            if not steps:
                continue
            smed, sci = median_ci(steps)
            bmed, bci = median_ci(blocks)
            print("| %s | %s | %d | %.3f %s | %s | %d | %d | %.3f %s | %s | %.3f | %s | %.2f |" % (
                w, c, len(steps), smed, "[%.3f, %.3f]" % sci if sci else "-", verdict(sci),
                sum(x > 1 for x in steps), len(blocks), bmed, "[%.3f, %.3f]" % bci if bci else "-", verdict(bci),
                tot[0] / tot[1], "; ".join(per), ref_step))
            places.append((w, c, by_place(ms, ref, c, w)))
    if ref_name:
        print("\nReference: %s%s" % (ref_name, "; not run on %s" % ", ".join(missing) if missing else ""))
    for w, c, med in places:
        if med:
            names = GPT2_SEQS if w == "gpt2" else range(len(med))
            print("\n%s, %s: median step ratio by place in the cycle (%s): %s" % (
                w, c, "sequence length" if w == "gpt2" else "place",
                ", ".join("%s: %.3f (%d)" % (n, m, k) for n, (m, k) in zip(names, med))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("workload", choices=["gpt2", "resnet50", "generate", "cupy"])
    r.add_argument("allocator", choices=["native", "expandable", "native-async", "streamalloc", "cupy-pool", "control"])
    r.add_argument("--out", required=True)
    r.add_argument("--lib", default=None)
    r.add_argument("--control-lib", default=os.path.join(HERE, "..", "build", "capi", "libtorch_control.so"))
    r.add_argument("--conf", default="pool")
    r.add_argument("--warmup", type=int, default=6)
    r.add_argument("--steps", type=int, default=24)
    r.add_argument("--serve", action="store_true",
                   help="after the warm-up, run timed steps as standard input asks (the lockstep protocol)")
    r.add_argument("--gc", choices=["on", "freeze"], default="on",
                   help="freeze: collect and gc.freeze() after the warm-up")
    t = sub.add_parser("table")
    t.add_argument("results")
    t = sub.add_parser("rounds")
    t.add_argument("results")
    ls = sub.add_parser("lockstep")
    ls.add_argument("workload", choices=["gpt2", "resnet50", "generate", "cupy"])
    ls.add_argument("--configs", required=True,
                    help='configurations separated by ";", each "ALLOCATOR [CONF [VAR=VALUE ...]]", the first the reference')
    ls.add_argument("--out", required=True, help="each process's result row")
    ls.add_argument("--blocks-out", required=True, help="one line per block")
    ls.add_argument("--lib", default=None)
    ls.add_argument("--control-lib", default=None, help="libtorch_control.so (default: run's default)")
    ls.add_argument("--warmup", type=int, default=18)
    ls.add_argument("--blocks", type=int, default=200)
    ls.add_argument("--block-steps", type=int, default=0, help="steps a block (default 1; CuPy 5, a cycle)")
    ls.add_argument("--pairs", type=int, default=1, help="groups of processes, one after the other")
    ls.add_argument("--pin", default="", help="taskset -c this CPU list for every process")
    ls.add_argument("--gc", choices=["on", "freeze"], default="on")
    t = sub.add_parser("lockstep-table")
    t.add_argument("blocks")
    t.add_argument("--ref", default=None,
                   help='the reference configuration, as the table names it or by its conf ("pool", "cache"); default: each workload\'s first')
    args = p.parse_args()
    if args.cmd == "lockstep":
        return lockstep(args)
    if args.cmd == "lockstep-table":
        lockstep_table(args.blocks, args.ref)
        return 0
    if args.cmd == "table":
        table(args.results)
        return 0
    if args.cmd == "rounds":
        rounds(args.results)
        return 0
    if args.workload == "cupy":
        return run_cupy(args)
    return run_torch(args)


if __name__ == "__main__":
    sys.exit(main())
