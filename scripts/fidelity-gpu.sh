#!/usr/bin/env bash
# fidelity-gpu.sh checks the simulator's model of the driver's pool against
# an NVIDIA GPU (BENCHMARKS.md, "The driver-pool model against the H100"):
# the pool probes on both sides (their outputs must be identical), the GPU
# fidelity test (replay.TestPoolFidelity with STREAMALLOC_DEVICE=cuda), the
# card's peak reserved on every trace, the per-event placements of the
# snapshots, and streamalloc tune's picks replayed on the card (--check).
#
# Two steps, because the GPU machine has no Go:
#
#   scripts/fidelity-gpu.sh build DIR    # here: binaries, traces and this script into DIR
#   DIR/fidelity-gpu.sh run OUTDIR       # there: logs into OUTDIR/logs, tarred as OUTDIR/logs.tgz
set -uo pipefail

case "${1:-}" in
build)
	dir=${2:?usage: fidelity-gpu.sh build DIR}
	root=$(cd "$(dirname "$0")/.." && pwd)
	mkdir -p "$dir/traces" "$dir/snaps" "$dir/replay/testdata" "$dir/testdata/traces"
	(cd "$root" &&
		go build -o "$dir/poolprobe" ./scripts/poolprobe &&
		go build -o "$dir/streamalloc" ./cmd/streamalloc &&
		go test -c -o "$dir/replay.test" ./replay) || exit 1
	cp "$root"/replay/testdata/*.csv.gz "$dir/traces/"
	cp "$root"/replay/testdata/*.csv.gz "$dir/replay/testdata/"
	cp "$root"/testdata/traces/*.gz "$dir/snaps/"
	cp "$root"/testdata/traces/*.gz "$dir/testdata/traces/"
	cp "$0" "$dir/fidelity-gpu.sh"
	exit 0
	;;
run) out=${2:?usage: fidelity-gpu.sh run OUTDIR} ;;
*)
	echo "usage: fidelity-gpu.sh build DIR | run OUTDIR" >&2
	exit 2
	;;
esac

cd "$(dirname "$0")"
L=$out/logs
mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv >"$L/gpu.txt" 2>&1
date -u >>"$L/gpu.txt"
./poolprobe -device cuda >"$L/probe2-cuda.txt" 2>&1
echo "probe rc=$?"
(cd replay && STREAMALLOC_DEVICE=cuda ../replay.test -test.run 'TestPoolFidelity' -test.v) >"$L/gpu-fidelity-test.txt" 2>&1
echo "fidelity test rc=$?"
grep -E "^(---|===|ok|FAIL|PASS)|fidelity_test" "$L/gpu-fidelity-test.txt"
./streamalloc replay --device cuda --resource async --json traces/*.csv.gz snaps/*.gz >"$L/replay-async-cuda.json" 2>"$L/replay-async-cuda.err"
echo "replay rc=$?"
grep -E '"trace"|"peak_reserved_bytes"|"peak_live_bytes"' "$L/replay-async-cuda.json"
./poolprobe -device cuda -trace snaps/*.pickle.gz 2>&1 | gzip >"$out/snap-trace-cuda.txt.gz"
echo "snapshot traces rc=$?"
./streamalloc tune --check --device cuda traces/torch-train-gpt-b.csv.gz >"$L/tune-train-cuda.txt" 2>&1
echo "tune rc=$?"
./streamalloc tune --check --device cuda --resource async traces/torch-train-gpt-b.csv.gz traces/torch-serve-varlen-b.csv.gz >"$L/tune-async-cuda.txt" 2>&1
echo "tune async rc=$?"
./streamalloc tune --check --device cuda --resource pool --max-ns 3000 --json traces/torch-serve-varlen-b.csv.gz >"$L/tune-pool-serve-cuda.json" 2>&1
echo "tune pool rc=$?"
cat "$L/tune-train-cuda.txt" "$L/tune-async-cuda.txt"
diff <(./poolprobe -device sim) "$L/probe2-cuda.txt" >"$L/probe2-diff.txt"
echo "probe diff rc=$? (0: the simulator's probe output is the card's)"
head -20 "$L/probe2-diff.txt"
tar czf "$out/logs.tgz" -C "$out" logs
