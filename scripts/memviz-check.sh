#!/usr/bin/env bash
# memviz-check.sh: PyTorch's memory_viz reads a memory snapshot written by a
# Go program. scripts/memviz runs a small training-like loop on the GPU
# through streamalloc.Setup with a memory history (mr.History) and writes
# the snapshot as torch.cuda.memory._dump_snapshot would; scripts/memviz/
# check.py loads it with torch.cuda._memory_viz (trace_plot, segment_plot,
# segsum, trace, the flamegraph inputs) and checks that the allocations are
# drawn with their Go frames. Needs a GPU machine with python3 and torch.
#
# Build here (Go and gcc, no GPU):  scripts/memviz-check.sh build DIR
# Run there (from anywhere):         DIR/memviz-check.sh run
#   pages, text and logs go to $OUT (or DIR/out); DEVICE=sim runs the
#   program on the simulated GPU instead of the card.
set -euo pipefail
case "${1:-}" in
build)
	dir=${2:?usage: memviz-check.sh build DIR}
	mkdir -p "$dir"
	go build -o "$dir/memviz" ./scripts/memviz
	cp scripts/memviz/check.py scripts/memviz-check.sh "$dir/"
	echo "built $dir/memviz; run: $dir/memviz-check.sh run"
	;;
run)
	dir=$(cd "$(dirname "$0")" && pwd)
	out=${OUT:-$dir/out}
	mkdir -p "$out"
	"$dir/memviz" -device "${DEVICE:-cuda}" -out "$out/go-snapshot.pickle" | tee "$out/memviz-summary.txt"
	python3 "$dir/check.py" "$out/go-snapshot.pickle" "$out" | tee "$out/check.txt"
	;;
*)
	echo "usage: memviz-check.sh build DIR | run" >&2
	exit 2
	;;
esac
