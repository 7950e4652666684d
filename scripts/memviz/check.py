"""Check that PyTorch's memory_viz reads a memory snapshot written by a Go
program (scripts/memviz, through streamalloc's mr.History) and draws its
allocations with their Go frames.

    python3 check.py SNAPSHOT OUTDIR

It loads the pickle with Python's pickle module, then runs the functions of
torch.cuda._memory_viz that work offline:

  - trace_plot (the Active Memory Timeline, also with plot_segments) and
    segment_plot (the Allocator State History): the HTML pages, written to
    OUTDIR; each must embed the snapshot (decoded back and compared). The
    pages load MemoryViz.js from a CDN to draw; where torch ships the file
    (torch/utils/viz/MemoryViz.js) an offline copy of each page that loads
    it from OUTDIR is written too;
  - segsum (which asserts that every segment's blocks add up) and trace
    (the events as Python-like text), written to OUTDIR;
  - memory and segments, the flamegraph inputs: the live blocks by stack,
    each line a stream, a state, the frames and the bytes.

and checks that the Go frames (function, file, line) of the program's
allocating functions are there. Exit status 1 if a check fails.
"""
import base64
import os
import pickle
import re
import shutil
import sys

GO_FUNCS = ("main.(*model).loadWeights", "main.(*model).forward", "main.(*model).backward",
            "main.(*model).loadBatch")


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    import torch
    from torch.cuda import _memory_viz as mv

    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    print(f"torch {torch.__version__}")
    with open(path, "rb") as f:
        data = pickle.load(f)
    events = [e for dev in data["device_traces"] for e in dev]
    actions = {}
    for e in events:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
    print(f"{len(data['segments'])} segments, {len(events)} events {actions}")
    check(actions.get("alloc", 0) > 0 and actions.get("free_completed", 0) > 0, "the trace has allocations and frees")

    def write(name, text):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)

    js = os.path.join(os.path.dirname(torch.__file__), "utils", "viz", "MemoryViz.js")
    if os.path.exists(js):
        shutil.copy(js, os.path.join(out, "MemoryViz.js"))
    pages = (
        ("trace_plot.html", mv.trace_plot(data)),
        ("trace_plot_segments.html", mv.trace_plot(data, plot_segments=True)),
        ("segment_plot.html", mv.segment_plot(data)),
    )
    for name, html in pages:
        write(name, html)
        m = re.search(r'"base64": "([A-Za-z0-9+/=]+)"', html)
        embedded = pickle.loads(base64.b64decode(m.group(1))) if m else None
        check(embedded == data, f"{name}: the page embeds the snapshot")
        if os.path.exists(js):
            offline = re.sub(r'from "https://[^"]*MemoryViz\.js"', 'from "./MemoryViz.js"', html)
            write(name.replace(".html", "_offline.html"), offline)
    print("MemoryViz.js " + ("copied: the *_offline.html pages draw without a network" if os.path.exists(js)
                             else "not shipped with this torch: the pages need the CDN to draw"))

    stats = mv.segsum(data)  # asserts that the blocks of each segment add up
    write("segsum.txt", stats)
    check("total_reserved" in stats, "segsum: the segments add up")
    text = mv.trace(data)
    write("trace.txt", text)
    check(text.count(" = ") >= actions.get("alloc", 0), "trace: every allocation is printed")

    def lines(s):
        return s
    mem = mv.memory(data, format_flamegraph=lines)
    segs = mv.segments(data, format_flamegraph=lines)
    write("memory.flamegraph.txt", mem)
    write("segments.flamegraph.txt", segs)

    frames = [f for e in events for f in e.get("frames", [])]
    check(all(f["filename"].endswith(".go") and f["line"] > 0 for f in frames) and frames,
          "every frame is a Go file and line")
    for fn in GO_FUNCS:
        n = sum(1 for e in events if any(f["name"].endswith(fn) for f in e.get("frames", [])))
        check(n > 0, f"{n} events allocated in {fn}")
    live = [l for l in mem.splitlines() if ";active_allocated;" in l]
    check(any("main.(*model).loadWeights" in l for l in live),
          "memory flamegraph: the live weights are drawn with the Go frames of loadWeights")
    print("\n".join(live[:3]))
    check(any("main.go" in l for l in segs.splitlines()), "segments flamegraph: blocks carry Go file names")

    peak, cur = 0, 0
    for e in events:
        if e["action"] == "alloc":
            cur += e["size"]
        elif e["action"] == "free_completed":
            cur -= e["size"]
        peak = max(peak, cur)
    print(f"peak of the active memory timeline: {peak} bytes ({peak / 2**20:.1f} MiB)")
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
