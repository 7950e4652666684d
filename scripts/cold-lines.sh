#!/usr/bin/env bash
# cold-lines.sh counts the distinct cache lines (64 bytes) and pages (4 KiB)
# that one call of the C ABI touches, of data and of code, per kind of call
# (allocation and free on the legacy default stream and on a created
# stream, a pair of one size, an empty crossing), and names who touches
# them (scripts/coldlines). A call whose lines the host's work between
# calls has evicted, as PyTorch's does, misses on each of them: their
# number is a cold call's cost. It counts accesses, not time, so any machine
# will do: valgrind's lackey traces every access, on the simulator (no GPU);
# runs of one tree agree to a line or two (where the heap places objects).
#
# Usage: scripts/cold-lines.sh [outdir] [steps]   (default build/coldlines 1000)
# Environment: CONF, the configuration (default the recommended one, on the
#   simulator: STREAMALLOC_CONF=backend=sim,... with the pool over Virtual);
#   DETAIL=K lists every data line of kind K's median call (cold_lines.c
#   numbers the kinds). Writes outdir/report.txt and prints it. Needs
#   valgrind and gcc; takes about a minute for 1000 steps.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-build/coldlines}
steps=${2:-1000}
conf=${CONF:-pool,upstream=vmm,mapped_slack,small_at_peak,backend=sim,sim_capacity=1GiB}
mkdir -p "$out"
# The library as scripts/build-capi.sh links it (the runtime's monitor
# kept awake), with symbols and DWARF: the report names functions and
# source lines.
SYMBOLS=1 scripts/build-capi.sh "$out" >/dev/null
gcc -O2 -Wall -Wextra -no-pie -o "$out/cold_lines" capi/testdata/cold_lines.c -I "$out" -L "$out" \
	-lstreamalloc -lpthread -ldl '-Wl,-rpath,$ORIGIN'
go build -o "$out/coldlines" ./scripts/coldlines
cd "$out"
STREAMALLOC_CONF=$conf valgrind --tool=lackey --trace-mem=yes --log-file=/dev/stdout \
	./cold_lines info "$steps" |
	./coldlines -exe cold_lines -lib libstreamalloc.so -info info -detail "${DETAIL:-0}" >report.txt
echo "cold-lines: $(git -C "$root" describe --always --dirty), $steps steps, STREAMALLOC_CONF=$conf" |
	cat - report.txt >report.tmp && mv report.tmp report.txt
cat report.txt
