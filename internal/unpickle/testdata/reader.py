#!/usr/bin/env python3
"""Python's unpicklers, for FuzzDecode's differential comparison.

Reads pickles from standard input, each a 4-byte little-endian length and
its bytes, and writes one JSON line for each: {"pure": verdict, "c":
verdict}, the verdicts of the reference unpickler (pickle._Unpickler, in
Python) and of CPython's C one (pickle.Unpickler, reading a file, as
pickle.load does). A verdict is {"ok": render(value)} with
gen_reference.render, {"big": true} for a value whose rendering would be
over a megabyte (a few bytes of pickle can reference one long string many
times), or {"err": the exception's type name}. The two differ where the
format leaves room (the C one checks a FRAME's length, the pure one that
frames do not overlap). Globals and persistent IDs are refused before
anything is imported or called, so a fuzzed pickle cannot run code here.
"""
import io
import json
import os
import pickle
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.setrecursionlimit(20000)
from gen_reference import render  # noqa: E402


def render_size(v):
    """About how long render(v) is, without writing it."""
    seen = set()
    total = 0
    todo = [v]
    while todo:
        x = todo.pop()
        if isinstance(x, (str, bytes, bytearray)):
            total += 2 * len(x) + 3
        elif isinstance(x, (list, tuple, set, frozenset, dict)):
            if id(x) in seen:
                total += 8
                continue
            seen.add(id(x))
            total += 16
            todo.extend(x.items() if isinstance(x, dict) else x)
        else:
            total += 24
        if total > 1 << 20:
            return total
    return total


def refusing(base):
    class Refusing(base):
        def find_class(self, module, name):
            raise pickle.UnpicklingError("global %s.%s refused" % (module, name))

        def persistent_load(self, pid):
            raise pickle.UnpicklingError("persistent id refused")

    return Refusing


PURE = refusing(pickle._Unpickler)
C = refusing(pickle.Unpickler)


def verdict(unpickler, data):
    try:
        value = unpickler(io.BytesIO(data)).load()
        return {"big": True} if render_size(value) > 1 << 20 else {"ok": render(value)}
    except BaseException as e:  # noqa: B902 - every failure is an answer
        return {"err": type(e).__name__}


def main():
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(4)
        if len(head) < 4:
            return
        data = stdin.read(struct.unpack("<I", head)[0])
        out = {"pure": verdict(PURE, data), "c": verdict(C, data)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
