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
#   numbers the kinds); SEQS, recorded traces (default pluggable/testdata's
#   GPT-2 and ResNet-50 training on the H100; SEQS= for none) whose calls
#   are replayed too, each in a process of its own from a fresh library, on
#   the legacy stream, every call counted (kinds 8 and 9; "coldlines seq"
#   converts a trace, cold_lines.c -seq replays it): what a real program's
#   calls touch, where the ring's are a fixed pattern. They run with the
#   simulator's capacity at 16 GiB (SEQCONF, CONF with sim_capacity=16GiB),
#   so that the traces' peaks fit (13.6 GB for GPT-2); the simulated
#   device's set-up grows with its capacity, about 120 million traced
#   accesses at 16 GiB, so each trace takes minutes under lackey.
#   Writes outdir/report.txt (and report-NAME.txt per trace) and prints
#   them. Needs valgrind and gcc; takes about a minute for 1000 steps and
#   5-8 for each of the default traces.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-build/coldlines}
steps=${2:-1000}
conf=${CONF:-pool,upstream=vmm,mapped_slack,small_at_peak,backend=sim,sim_capacity=1GiB}
seqconf=${SEQCONF:-${conf/sim_capacity=1GiB/sim_capacity=16GiB}}
seqs=${SEQS-pluggable/testdata/torch-train-gpt2-h100.csv.gz pluggable/testdata/torch-train-resnet50-h100.csv.gz}
mkdir -p "$out"
tree=$(git describe --always --dirty) # the tree the library is built from
# The library as scripts/build-capi.sh links it (the runtime's monitor
# kept awake), with symbols and DWARF: the report names functions and
# source lines.
SYMBOLS=1 scripts/build-capi.sh "$out" >/dev/null
gcc -O2 -Wall -Wextra -no-pie -o "$out/cold_lines" capi/testdata/cold_lines.c -I "$out" -L "$out" \
	-lstreamalloc -lpthread -ldl '-Wl,-rpath,$ORIGIN'
go build -o "$out/coldlines" ./scripts/coldlines
names=()
for t in $seqs; do
	n=$(basename "$t")
	n=${n%%.*}
	names+=("$n")
	"$out/coldlines" seq "$t" "$out/$n.seq"
done
cd "$out"
STREAMALLOC_CONF=$conf valgrind --tool=lackey --trace-mem=yes --log-file=/dev/stdout \
	./cold_lines info "$steps" |
	./coldlines -exe cold_lines -lib libstreamalloc.so -info info -detail "${DETAIL:-0}" >report.txt
echo "cold-lines: $tree, $steps steps, STREAMALLOC_CONF=$conf" |
	cat - report.txt >report.tmp && mv report.tmp report.txt
cat report.txt
for n in "${names[@]}"; do
	STREAMALLOC_CONF=$seqconf valgrind --tool=lackey --trace-mem=yes --log-file=/dev/stdout \
		./cold_lines "info-$n" -seq "$n.seq" |
		./coldlines -exe cold_lines -lib libstreamalloc.so -info "info-$n" -detail "${DETAIL:-0}" >"report-$n.txt"
	echo "cold-lines: $tree, sequence $n, STREAMALLOC_CONF=$seqconf" |
		cat - "report-$n.txt" >report.tmp && mv report.tmp "report-$n.txt"
	cat "report-$n.txt"
done
