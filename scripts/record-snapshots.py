#!/usr/bin/env python3
"""record-snapshots.py: record PyTorch memory snapshots of real workloads.

One workload per process, so that each snapshot and each peak counter
covers that workload alone. The caching allocator's history is recorded
with torch.cuda.memory._record_memory_history(context=None), which keeps
the trace entries (action, address, size, stream, time) and no stack
frames, so a snapshot stays a few megabytes; max_entries is large enough
that the ring never wraps in these runs. At the end the snapshot is
pickled with torch.cuda.memory._dump_snapshot and gzip'd, and the
workload's own peaks (torch.cuda.max_memory_reserved and
max_memory_allocated, counted from after the model is built: the peak
counters are reset when recording starts) are written as JSON beside it.

Models are randomly initialized from their configurations; nothing is
downloaded. Data is drawn on the GPU from seeded generators.

Workloads:
  gpt2-train      GPT-2 small (12 layers, 768 wide) training, AdamW, bf16
                  autocast, batch 8, sequence lengths cycling
                  256 512 1024 384 768 128
  resnet50-amp    torchvision ResNet-50 training, SGD, fp16 autocast with a
                  GradScaler, batch 64 at 224x224
  llama-generate  a small LLaMA (transformers LlamaConfig: 8 layers, 1024
                  wide, 16 heads, 4 KV heads) generating greedily with
                  use_cache (a KV cache that grows each token), batch sizes
                  cycling 1 8 32 4 16, prompts of 16 to 128 tokens, 64 new
  three-stream    a pipeline over three streams: a producer stream makes
                  tensors of cycling sizes, two consumer streams read them
                  after an event wait, and record_stream tells the caching
                  allocator that each tensor is used there before it is
                  freed on the producer
  compile         a torch.compile'd GPT-2 (6 layers) training with bf16
                  autocast at cycling sequence lengths (inductor, default
                  mode); compilation's own allocations are in the trace
  oom             GPT-2 small training under
                  torch.cuda.set_per_process_memory_fraction, batch doubling
                  until torch.cuda.OutOfMemoryError, which is caught; the
                  cache is emptied and the batch falls back, three times over
  cuda-graph      ResNet-50 inference captured as CUDA graphs
                  (torch.cuda.graph) for batches 1, 8 and 32 sharing one
                  memory pool, then replayed with fresh inputs copied in

usage: record-snapshots.py WORKLOAD --out DIR [--steps N]
"""

import argparse
import gzip
import json
import os
import pickle
import shutil
import sys
import time

MAX_ENTRIES = 2_000_000


def gpt2_config(layers=12):
    from transformers import GPT2Config
    return GPT2Config(n_layer=layers, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)


def gpt2_step(torch, model, opt, gen, batch, seq):
    x = torch.randint(0, 50257, (batch, seq), device="cuda", generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def setup_gpt2(torch, layers=12):
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel(gpt2_config(layers)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    return model, opt, gen


def w_gpt2_train(torch, rec, steps):
    model, opt, gen = setup_gpt2(torch)
    seqs = [256, 512, 1024, 384, 768, 128]
    rec.start()
    for i in range(steps or 18):
        gpt2_step(torch, model, opt, gen, 8, seqs[i % len(seqs)])
    return {"batch": 8, "seqs": seqs}


def w_resnet50_amp(torch, rec, steps):
    import torch.nn.functional as F
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    rec.start()
    for _ in range(steps or 16):
        x = torch.randn(64, 3, 224, 224, device="cuda", generator=gen)
        y = torch.randint(0, 1000, (64,), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss.item()
    return {"batch": 64}


def w_llama_generate(torch, rec, steps):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [1, 8, 32, 4, 16]
    prompts = [16, 128, 64, 32, 96]
    rec.start()
    with torch.no_grad():
        for i in range(steps or 10):
            b, p = batches[i % len(batches)], prompts[i % len(prompts)]
            ids = torch.randint(0, 32000, (b, p), device="cuda", generator=gen)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=64, min_new_tokens=64, do_sample=False,
                                 use_cache=True, pad_token_id=0)
            out.sum().item()
    return {"batches": batches, "prompts": prompts, "new_tokens": 64}


def w_three_stream(torch, rec, steps):
    prod, c1, c2 = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(1)
    sizes = [256, 1024, 2048, 512, 4096, 768, 3072]
    w = {n: torch.randn(n, n, device="cuda", generator=gen) for n in sizes}
    torch.cuda.synchronize()
    rec.start()
    acc1 = acc2 = 0.0
    for i in range(steps or 1500):
        n = sizes[i % len(sizes)]
        with torch.cuda.stream(prod):
            a = torch.randn(n, n, device="cuda", generator=gen)
            b = a @ w[n]
            ev = torch.cuda.Event()
            ev.record(prod)
        outs = []
        for s in (c1, c2):
            s.wait_event(ev)
            with torch.cuda.stream(s):
                b.record_stream(s)
                outs.append((b * 0.5).relu().sum())
        with torch.cuda.stream(prod):
            del a, b  # freed on the producer; reused only after c1 and c2 finish
        if i % 50 == 49:
            torch.cuda.synchronize()
            acc1 += outs[0].item()
            acc2 += outs[1].item()
    torch.cuda.synchronize()
    return {"sizes": sizes, "streams": 3}


def w_compile(torch, rec, steps):
    model, opt, gen = setup_gpt2(torch, layers=6)
    cmodel = torch.compile(model)
    seqs = [256, 512, 1024, 384]
    rec.start()
    for i in range(steps or 16):
        x = torch.randint(0, 50257, (8, seqs[i % len(seqs)]), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
    return {"batch": 8, "seqs": seqs, "layers": 6, "mode": "default"}


def w_oom(torch, rec, steps):
    frac = 0.12
    torch.cuda.set_per_process_memory_fraction(frac)
    model, opt, gen = setup_gpt2(torch)
    rec.start()
    ooms, batches = 0, []
    rounds = steps or 3
    for _ in range(rounds):
        batch, failed = 2, False
        while not failed:
            try:
                gpt2_step(torch, model, opt, gen, batch, 512)
                batches.append(batch)
                batch *= 2
            except torch.cuda.OutOfMemoryError:
                failed = True
        # Outside the except block, so that the traceback's frames (and the
        # activations they hold) are gone before the cache is emptied.
        ooms += 1
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        for b in (batch // 4, batch // 8, batch // 4):
            if b >= 1:
                gpt2_step(torch, model, opt, gen, b, 512)
    return {"fraction": frac, "ooms": ooms, "batches_run": batches}


def w_cuda_graph(torch, rec, steps):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().eval().to(memory_format=torch.channels_last)
    gen = torch.Generator(device="cuda").manual_seed(1)
    rec.start()
    pool = torch.cuda.graph_pool_handle()
    graphs = {}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in (1, 8, 32):  # warm up outside capture, as torch.cuda.graph requires
                for _ in range(3):
                    model(torch.randn(b, 3, 224, 224, device="cuda"))
        torch.cuda.current_stream().wait_stream(side)
        for b in (32, 8, 1):  # the largest first, so smaller graphs reuse its pool
            static_in = torch.zeros(b, 3, 224, 224, device="cuda")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                static_out = model(static_in)
            graphs[b] = (g, static_in, static_out)
        total = 0.0
        for i in range(steps or 300):
            b = (1, 8, 32)[i % 3]
            g, static_in, static_out = graphs[b]
            x = torch.randn(b, 3, 224, 224, device="cuda", generator=gen)
            static_in.copy_(x)
            g.replay()
            y = static_out.float().softmax(-1).argmax(-1)
            if i % 30 == 29:
                total += y.sum().item()
    torch.cuda.synchronize()
    return {"batches": [1, 8, 32], "shared_pool": True}


WORKLOADS = {
    "gpt2-train": w_gpt2_train,
    "resnet50-amp": w_resnet50_amp,
    "llama-generate": w_llama_generate,
    "three-stream": w_three_stream,
    "compile": w_compile,
    "oom": w_oom,
    "cuda-graph": w_cuda_graph,
}


class Recorder:
    def __init__(self, torch):
        self.torch = torch
        self.started = None

    def start(self):
        t = self.torch
        t.cuda.synchronize()
        t.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=MAX_ENTRIES)
        t.cuda.reset_peak_memory_stats()
        self.started = time.time()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=0, help="steps of the workload (0: its default)")
    args = ap.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    os.makedirs(args.out, exist_ok=True)
    rec = Recorder(torch)
    began = time.time()
    info = WORKLOADS[args.workload](torch, rec, args.steps)
    torch.cuda.synchronize()
    stats = {
        "workload": args.workload,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "recorded_s": round(time.time() - rec.started, 2),
        "total_s": round(time.time() - began, 2),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "max_entries": MAX_ENTRIES,
        "context": None,
        "settings": info,
    }
    stats["ratio"] = round(stats["max_memory_reserved"] / max(1, stats["max_memory_allocated"]), 4)
    snap = torch.cuda.memory._snapshot()
    traces = snap.get("device_traces", [])
    stats["trace_entries"] = sum(len(t) for t in traces)
    actions = {}
    for tr in traces:
        for e in tr:
            actions[e["action"]] = actions.get(e["action"], 0) + 1
    stats["actions"] = actions
    torch.cuda.memory._record_memory_history(enabled=None)
    raw = os.path.join(args.out, f"{args.workload}-h100.pickle")
    with open(raw, "wb") as f:
        pickle.dump(snap, f)
    stats["pickle_bytes"] = os.path.getsize(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    stats["gzip_bytes"] = os.path.getsize(raw + ".gz")
    with open(os.path.join(args.out, f"{args.workload}-h100.json"), "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    print(json.dumps(stats, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
