#!/usr/bin/env bash
# An empty configuration on the card: STREAMALLOC_CONF unset, no conf given
# to use_streamalloc. The library must build pluggable.Recommended (the pool
# over mapped virtual memory: reserved addresses, no fallback), serve a
# short PyTorch loop, and give everything back. Then pluggable's GPU tests.
# Built here: scripts/gpu-build.sh ./pluggable; scripts/build-capi.sh DIR/build/capi;
# cp -r python DIR/. Run there from the repository's root: OUT=... DIR/empty-conf.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}/empty
mkdir -p "$out"
unset STREAMALLOC_CONF
STREAMALLOC_LIB=$here/build/capi/libstreamalloc.so PYTHONPATH=$here/python python3 - >"$out/empty-conf.txt" 2>&1 <<'PY'
import torch, streamalloc_torch as sa
sa.use_streamalloc()
x = [torch.randn(n, 1024, device="cuda") for n in (1, 300, 5000, 70000)]
y = sum(t.sum() for t in x)
torch.cuda.synchronize()
st = sa.stats()
print(sa.summary())
print("stats", st)
assert st["address_space_bytes"] > 0, "no reserved address space: not the pool over virtual memory"
assert st["vmm_fallback"] == 0, "fell back to the chunked pool"
del x, y
torch.cuda.synchronize()
print("live after del", sa.stats()["live_bytes"])
print("OK")
PY
echo "python exit $?" >>"$out/empty-conf.txt"
LOGDIR=$out/suite TEST_TIMEOUT=4m .gpubin/run.sh test >"$out/suite.log" 2>&1; echo "suite exit $?" >>"$out/empty-conf.txt"
