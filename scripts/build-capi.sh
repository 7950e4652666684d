#!/usr/bin/env bash
# build-capi.sh builds the C ABI: build/capi/libstreamalloc.so, its public
# header build/capi/streamalloc.h, the C benchmark build/capi/capi_bench
# (linked with an rpath of $ORIGIN, so the folder can be copied anywhere),
# and libtorch_control.so, the C-only control allocator of
# scripts/torch-bench.py (capi/testdata/torch_control.c). No CUDA toolkit is
# needed: the libraries load libcuda.so.1 at run time.
#
# Usage: scripts/build-capi.sh [outdir]     (default build/capi)
# Environment: SYMBOLS=1 keeps the library's symbol table and DWARF (the
#   linker's -s left out), for tools that name functions and source lines
#   (scripts/cold-lines.sh); the code is the same.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-build/capi}
mkdir -p "$out"
# The library's Go runtime keeps its monitor (sysmon) out of deep sleep.
# A C thread's call into Go takes a P; back in C the thread keeps it until
# the monitor, seeing the P's scheduling tick unmoved for 10 ms (a callback
# never moves it), takes it back, and with every P idle the monitor sleeps:
# the next call then takes an idle P under the scheduler's lock and wakes
# the monitor with a futex, 1.5-3 us of a call on the H100 host
# (BENCHMARKS.md, "The C ABI's per-call cost, second pass"; in GPT-2 and
# ResNet-50 steps the gain was 0-2%, within the spread between groups of
# processes: "The pluggable path's floor" and the final tree's section). The runtime has one switch that keeps the monitor awake, a
# schedtrace period, and no //go:debug directive for it, so the period is
# linked in as the binary's GODEBUG default: 2^31-1 ms, 24.8 days. Its cost:
# a monitor tick every 10 ms while the process idles; one SCHED line on
# stderr once the host has been up 24.8 days and every 24.8 days after (at
# the start on a host up longer than that: the monitor's clock counts from
# the host's boot); and a fatal error of the Go runtime (a crash, not an
# error a call returns) prints the scheduler's state, a line per P, thread
# and goroutine, before its traceback. GODEBUG=schedtrace=0 in the
# environment restores the runtime's default. The module's own GODEBUG
# defaults (go.mod's godebug lines, capi's //go:debug directives), if any,
# are kept: go list reads them with cgo on, as the build does, since
# without cgo it leaves out capi.go and its directives.
godebug=$(CGO_ENABLED=1 go list -f '{{.DefaultGODEBUG}}' ./capi)
godebug=${godebug:+$godebug,}schedtrace=2147483647
strip=-s
if [ "${SYMBOLS:-}" = 1 ]; then strip=; fi
CGO_ENABLED=1 go build -buildmode=c-shared -trimpath "-ldflags=$strip -X=runtime.godebugDefault=$godebug" \
	-o "$out/libstreamalloc.so" ./capi
rm -f "$out/libstreamalloc.h" # cgo's own header; streamalloc.h is the public one
cp capi/streamalloc.h "$out/"
gcc -O2 -Wall -Wextra -o "$out/capi_bench" capi/testdata/capi_bench.c -I "$out" -L "$out" \
	-lstreamalloc -lpthread -ldl '-Wl,-rpath,$ORIGIN'
gcc -O2 -Wall -Wextra -shared -fPIC -o "$out/libtorch_control.so" capi/testdata/torch_control.c -ldl -lpthread
echo "build-capi: $(ls -1 "$out" | tr '\n' ' ')in $out"
