#!/usr/bin/env python3
"""Writes the PyTorch memory snapshot fixtures of package trace/torchsnap.

torch is not needed: the snapshot is the plain dictionary that
torch.cuda.memory._snapshot() returns (see its docstring in
torch/cuda/memory.py), pickled the way torch.cuda.memory._dump_snapshot
does (pickle.dump). Regenerate from the repository root with

    python3 trace/torchsnap/testdata/gen_snapshot.py trace/torchsnap/testdata

It writes:
    snapshot.pickle        protocol 4, what pickle.dump writes on Python 3.8-3.13
    snapshot-p2.pickle.gz  the same dict, protocol 2 (what libtorch's C++
                           pickler writes), gzip-compressed with mtime 0
The expected events are spelled out in reader_test.go.
"""
import gzip
import os
import pickle
import sys

S0 = 0                 # the default stream
S1 = 0x55D0C0DE1230    # a side stream (a cudaStream_t value)
SEG = 0x7F0000000000   # device 0's segment
P0 = SEG               # allocated before the history began, freed in it
A0 = SEG + 0x400       # allocated before the history began, never freed
A1 = SEG + 0x800
A2 = SEG + 0x1000
A3 = SEG + 0x2000
A4 = SEG + 0x2800
B1 = 0x7E0000000000    # device 1

FRAMES = [
    {"filename": "train.py", "line": 42, "name": "forward"},
    {"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"},
]


def ev(action, addr, size, stream, t, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream,
         "time_us": t, "frames": FRAMES, "pool_id": (0, 0)}
    e.update(extra)
    return e


device0 = [
    ev("segment_alloc", SEG, 2 << 20, S0, 1000),
    ev("free_requested", P0, 512, S0, 1001),
    ev("free_completed", P0, 512, S0, 1002),
    ev("alloc", A1, 1024, S0, 1003),
    ev("alloc", A2, 4096, S1, 1004),
    ev("free_requested", A1, 1024, S0, 1005),
    ev("free_completed", A1, 1024, S0, 1006),
    # oom entries carry device_free instead of addr
    {"action": "oom", "device_free": 123 << 20, "size": 1 << 40, "stream": S0,
     "time_us": 1007, "frames": FRAMES},
    ev("alloc", A3, 2048, S1, 1009),
    ev("snapshot", 0, 0, 0, 1010),
    # A2 was used on another stream (record_stream): its free completes later
    ev("free_requested", A2, 4096, S1, 1011),
    ev("alloc", A4, 256, S0, 1012),
    ev("free_completed", A2, 4096, S1, 1013),
    ev("annotate", A3, 0, S1, 1014, user_metadata="activation"),
    ev("segment_free", SEG + (4 << 20), 2 << 20, S0, 1015),
    ev("some_future_action", A3, 0, S1, 1016),
]
device1 = [
    ev("alloc", B1, 777, S0, 1008),
]

segments = [
    {"device": 0, "address": SEG, "total_size": 2 << 20, "allocated_size": 1000 + 2048 + 256,
     "active_size": 1024 + 2048 + 256, "requested_size": 1000 + 2048 + 256, "stream": S0,
     "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
     "frames": [],
     "blocks": [
         {"address": P0, "size": 1024, "requested_size": 0, "state": "inactive", "frames": []},
         {"address": A0, "size": 1024, "requested_size": 1000, "state": "active_allocated",
          "frames": FRAMES},
         {"address": A3, "size": 2048, "requested_size": 2048, "state": "active_allocated",
          "frames": FRAMES},
         {"address": A4, "size": 512, "requested_size": 256, "state": "active_allocated",
          "frames": FRAMES},
     ]},
    {"device": 1, "address": B1, "total_size": 2 << 20, "allocated_size": 1024,
     "active_size": 1024, "requested_size": 777, "stream": S0, "segment_type": "large",
     "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
     "blocks": [{"address": B1, "size": 1024, "requested_size": 777,
                 "state": "active_allocated", "frames": FRAMES}]},
]

snapshot = {
    "segments": segments,
    "device_traces": [device0, device1],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                           "garbage_collection_threshold": 0.0,
                           "expandable_segments": False,
                           "roundup_power2_divisions": {"1": 0, "2": 0}},
}

out = sys.argv[1] if len(sys.argv) > 1 else "."
with open(os.path.join(out, "snapshot.pickle"), "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
with open(os.path.join(out, "snapshot-p2.pickle.gz"), "wb") as raw:
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        pickle.dump(snapshot, f, protocol=2)
