#!/usr/bin/env python3
"""Writes testdata/reference.json: pickles written by Python's own pickler,
each with what Python reads back from it, for package pickle's tests.

Each case is a value pickled with protocols 1 to 5 (those its types
allow), and the rendering of pickle.loads of those bytes: a text both
Python (render below) and the Go test (render in reference_test.go)
produce the same way. Containers that the value holds more than once
(one object, referenced again) are labelled #n at their first appearance
and written #n after, so the rendering records Python's sharing too.
Refusals are pickles Decode must refuse, with the error it must give.

reference_test.go also runs render here, when python3 is installed, on
the pickles the Go encoder writes. Regenerate from the repository root
with

    python3 internal/unpickle/testdata/gen_reference.py internal/unpickle/testdata
"""
import base64
import collections
import datetime
import hashlib
import json
import os
import pickle
import struct
import sys


def render(v):
    counts = collections.Counter()

    def count(x):
        if isinstance(x, (list, dict, set, frozenset, tuple)) and not (isinstance(x, tuple) and not x):
            counts[id(x)] += 1
            if counts[id(x)] > 1:
                return
            items = x.items() if isinstance(x, dict) else x
            for it in items:
                if isinstance(x, dict):
                    count(it[0])
                    count(it[1])
                else:
                    count(it)

    count(v)
    labels = {}

    def r(x):
        if x is None:
            return "None"
        if x is True:
            return "True"
        if x is False:
            return "False"
        if isinstance(x, int):
            return "i:%d" % x
        if isinstance(x, float):
            return "f:" + struct.pack(">d", x).hex()
        if isinstance(x, str):
            return "s:" + x.encode("utf-8", "surrogatepass").hex()
        if isinstance(x, (bytes, bytearray)):
            return "b:" + bytes(x).hex()
        label = ""
        if counts.get(id(x), 0) > 1:
            if id(x) in labels:
                return "#%d" % labels[id(x)]
            labels[id(x)] = len(labels) + 1
            label = "#%d=" % labels[id(x)]
        if isinstance(x, tuple):
            return label + "(" + ",".join(r(i) for i in x) + ")"
        if isinstance(x, list):
            return label + "[" + ",".join(r(i) for i in x) + "]"
        if isinstance(x, dict):
            return label + "{" + ",".join(r(k) + ":" + r(w) for k, w in x.items()) + "}"
        if isinstance(x, (set, frozenset)):
            kind = "frozenset" if isinstance(x, frozenset) else "set"
            return label + kind + "{" + ",".join(sorted(r(i) for i in x)) + "}"
        raise TypeError(type(x))

    text = r(v)
    if len(text) > 2000:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


class Point:
    def __init__(self):
        self.x = 1


def main():
    shared = [1, 2, 3]
    shared_dict = {"filename": "train.py", "line": 42, "name": "forward"}
    shared_tuple = (shared_dict, "x")
    nested = [[[[[[["deep"]]]]]]]

    cases = {
        "none": None,
        "bools": [True, False],
        "small ints": [0, 1, 255, 256, 65535, 65536, -1, -256],
        "int32 edges": [2**31 - 1, -2**31, 2**31, -2**31 - 1],
        "int64 edges": [2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64],
        "big ints": [2**100, -(2**100), 2**2100, -(2**2100) + 12345, 10**4000],
        "floats": [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, float("inf"), float("-inf"), float("nan")],
        "strings": ["", "a", "h\u00e9llo", "\u65e5\u672c", "\U0001F600", "a\nb", "x" * 255, "y" * 256],
        "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), ((), ((),))],
        "lists": [[], [[]], list(range(1001)), [-1] * 2001],
        "dicts": {"a": 1, 2: "b", None: [], True: {}, 1.5: (), "nested": {"k": {"k": "v"}}},
        "big dict": {"k%d" % i: i for i in range(1001)},
        "shared list": {"first": shared, "second": shared, "in a list": [shared, shared]},
        "shared dict": [shared_dict, [shared_dict], {"frame": shared_dict}],
        "shared tuple": [shared_tuple, shared_tuple],
        "shared string": ["train.py"] * 3,
        "nested": nested,
        "snapshot": {
            "segments": [{"device": 0, "address": 0x7F0000000000, "blocks": [
                {"address": 0x7F0000000000, "size": 512, "state": "active_allocated",
                 "frames": [shared_dict]}]}],
            "device_traces": [[
                {"action": "alloc", "addr": 0x7F0000000000, "size": 512, "stream": 0,
                 "time_us": 1000, "frames": [shared_dict]},
            ]],
            "allocator_settings": {"expandable_segments": False, "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0},
        },
    }
    # Types whose pickles need a protocol: Python writes them as calls to
    # constructors below it.
    cases_p3 = {
        "bytes": [b"", b"\x00\xff", b"\n" * 300],
    }
    cases_p4 = {
        "sets": [set(), {1, "a", None}, frozenset(), frozenset({2.5, b"b"}), set(range(1001))],
        "shared set": [shared_set := {1, 2}, shared_set],
    }
    # More than one 64 KiB frame.
    cases_p4["frames"] = ["z" * 70000, b"q" * 1000]
    cases_p5 = {
        "bytearray": [bytearray(b"ab"), bytearray(b"")],
    }


    recursive = []
    recursive.append(recursive)
    refusals = {
        "class": (collections.OrderedDict(a=1), "ErrRefused"),
        "instance": (Point(), "ErrRefused"),
        "date": (datetime.date(2024, 1, 2), "ErrRefused"),
        "recursive list": (recursive, "ErrUnsupported"),
    }

    out = []
    for name, value in cases.items():
        for proto in range(1, 6):
            out.append((name, proto, value))
    for table, low in ((cases_p3, 3), (cases_p4, 4), (cases_p5, 5)):
        for name, value in table.items():
            for proto in range(low, 6) if name != "frames" else (4,):
                out.append((name, proto, value))

    records = []
    for name, proto, value in out:
        data = pickle.dumps(value, protocol=proto)
        records.append({"name": name, "protocol": proto,
                        "pickle": base64.b64encode(data).decode(),
                        "want": render(pickle.loads(data))})
    for name, (value, err) in refusals.items():
        for proto in (2, 4):
            records.append({"name": name, "protocol": proto,
                            "pickle": base64.b64encode(pickle.dumps(value, protocol=proto)).decode(),
                            "error": err})

    dest = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(dest, "reference.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "cases": records}, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
