#!/usr/bin/env bash
# capi-bench.sh runs the C benchmark of the C ABI (an allocate/free pair
# from C, through Go and back) on the simulator and, when one is present,
# on the GPU. Build first with scripts/build-capi.sh.
#
# Usage: scripts/capi-bench.sh [dir] [pairs] [threads]  (default build/capi 1000000 4)
# Environment: CONFS, the configurations run on the GPU, each in turn
#   (STREAMALLOC_CONF; default "pool"). AB_DIR, a second build of the
#   library and the benchmark (e.g. one built with
#   GOFLAGS=-tags=streamalloc_nocapturequery, which does not ask the driver
#   whether an adopted stream is capturing): the GPU runs then alternate
#   between dir and AB_DIR, REPEAT times (default 3), each a process of its
#   own, so that the two builds are compared on one machine in one run.
# On the GPU, CAPI_BENCH_CUDA=1 adds the cases on a stream made with
# cuStreamCreate (capi_bench.c says what each case times).
set -euo pipefail

dir=${1:-build/capi}
pairs=${2:-1000000}
threads=${3:-4}
echo "== simulator"
STREAMALLOC_CONF=pool,backend=sim "$dir/capi_bench" "$pairs" "$threads"
if [ -e /dev/nvidiactl ] || command -v nvidia-smi >/dev/null 2>&1; then
	for conf in ${CONFS:-pool}; do
		if [ -z "${AB_DIR:-}" ]; then
			echo "== GPU, $conf"
			CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$conf "$dir/capi_bench" "$pairs" "$threads"
			continue
		fi
		for rep in $(seq "${REPEAT:-3}"); do
			for d in "$dir" "$AB_DIR"; do
				echo "== GPU, $conf, $d, round $rep"
				CAPI_BENCH_CUDA=1 STREAMALLOC_CONF=$conf "$d/capi_bench" "$pairs" "$threads"
			done
		done
	done
fi
