#!/usr/bin/env bash
# torch-bench.sh runs every workload of torch-bench.py under every
# allocator, each in its own process, on a machine with a GPU, PyTorch,
# torchvision, transformers and CuPy, and prints the markdown table of
# BENCHMARKS.md. Build the library first (scripts/build-capi.sh); the
# machine needs no Go.
#
# Usage: scripts/torch-bench.sh [outdir] [lib]
#   (default outdir torch-bench-out, lib build/capi/libstreamalloc.so)
# Environment: WARMUP, STEPS (default 6 and 24 per workload; generation
#   and CuPy use 5 and 20), WORKLOADS (default "gpt2 resnet50 generate
#   cupy"), CONFS (streamalloc's configurations, each a run, default "pool"),
#   RUN_TIMEOUT (seconds per process, default 240).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-torch-bench-out}
lib=$(realpath "${2:-$here/../build/capi/libstreamalloc.so}")
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/machine.txt"
python3 -c 'import torch, torchvision, transformers, cupy; print("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", transformers.__version__, "cupy", cupy.__version__)' 2>&1 | tee -a "$out/machine.txt"
status=0
for w in ${WORKLOADS:-gpt2 resnet50 generate cupy}; do
	warm=${WARMUP:-6} steps=${STEPS:-24}
	case $w in generate | cupy) warm=${WARMUP:-5} steps=${STEPS:-20} ;; esac
	allocs="native expandable streamalloc"
	[ "$w" = cupy ] && allocs="cupy-pool streamalloc"
	for a in $allocs; do
		confs=pool
		[ "$a" = streamalloc ] && confs=${CONFS:-pool}
		for conf in $confs; do
			log="$out/$w-$a${conf:+-${conf//[^a-z0-9=]/_}}.log"
			start=$(date +%s)
			if timeout "${RUN_TIMEOUT:-240}" python3 "$here/torch-bench.py" run "$w" "$a" --out "$results" --lib "$lib" \
				--conf "$conf" --warmup "$warm" --steps "$steps" >"$log" 2>&1; then
				echo "$w $a $conf: ok in $(($(date +%s) - start)) s"
			else
				echo "$w $a $conf: FAILED in $(($(date +%s) - start)) s; last lines of $log:"
				tail -15 "$log"
				status=1
			fi
		done
	done
done
python3 "$here/torch-bench.py" table "$results" | tee "$out/table.md"
exit $status
