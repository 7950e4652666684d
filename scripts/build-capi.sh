#!/usr/bin/env bash
# build-capi.sh builds the C ABI: build/capi/libstreamalloc.so, its public
# header build/capi/streamalloc.h, the C benchmark build/capi/capi_bench
# (linked with an rpath of $ORIGIN, so the folder can be copied anywhere),
# and libtorch_control.so, the C-only control allocator of
# scripts/torch-bench.py (capi/testdata/torch_control.c). No CUDA toolkit is
# needed: the libraries load libcuda.so.1 at run time.
#
# Usage: scripts/build-capi.sh [outdir]     (default build/capi)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-build/capi}
mkdir -p "$out"
CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -ldflags=-s -o "$out/libstreamalloc.so" ./capi
rm -f "$out/libstreamalloc.h" # cgo's own header; streamalloc.h is the public one
cp capi/streamalloc.h "$out/"
gcc -O2 -Wall -Wextra -o "$out/capi_bench" capi/testdata/capi_bench.c -I "$out" -L "$out" \
	-lstreamalloc -lpthread -ldl '-Wl,-rpath,$ORIGIN'
gcc -O2 -Wall -Wextra -shared -fPIC -o "$out/libtorch_control.so" capi/testdata/torch_control.c -ldl -lpthread
echo "build-capi: $(ls -1 "$out" | tr '\n' ' ')in $out"
