#!/usr/bin/env python3
"""Writes testdata/shared.pickle: a snapshot whose objects are shared.

Python's pickler writes an object it meets again as a memo reference
(BINGET) to its first copy, and the first copy of a list or a dict is
memoized when it is still empty, before its items are appended. PyTorch's
snapshots share this way: the frames of one call stack are one list,
referenced by every trace entry and block it made, and each frame is one
dictionary, referenced by every stack that passes through it. A reader
must see the filled list through every reference.

Regenerate from the repository root with

    python3 trace/torchsnap/testdata/gen_shared.py trace/torchsnap/testdata

The expected stacks are spelled out in frames_test.go.
"""
import os
import pickle
import sys

FORWARD = {"filename": "train.py", "line": 42, "name": "forward"}
LINEAR = {"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"}
STEP = {"filename": "optim.py", "line": 7, "name": "step"}

DEEP = [FORWARD, LINEAR]  # one list, four references
SHALLOW = [FORWARD]       # FORWARD again, in another list
OPT = [STEP]              # referenced by a block and an entry


def alloc(addr, size, t, frames):
    return {"action": "alloc", "addr": addr, "size": size, "stream": 0,
            "time_us": t, "frames": frames}


snapshot = {
    "segments": [{"device": 0, "address": 0x900, "stream": 0, "frames": [],
                  "blocks": [{"address": 0x900, "size": 64, "requested_size": 64,
                              "state": "active_allocated", "frames": OPT}]}],
    "device_traces": [[
        alloc(0x100, 16, 1, DEEP),
        alloc(0x200, 32, 2, DEEP),
        alloc(0x300, 48, 3, SHALLOW),
        alloc(0x400, 64, 4, OPT),
        {"action": "free_completed", "addr": 0x100, "size": 16, "stream": 0,
         "time_us": 5, "frames": DEEP},
        alloc(0x500, 80, 6, DEEP),
    ]],
}

out = sys.argv[1] if len(sys.argv) > 1 else "."
with open(os.path.join(out, "shared.pickle"), "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
