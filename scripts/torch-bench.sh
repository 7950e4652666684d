#!/usr/bin/env bash
# torch-bench.sh runs workloads of torch-bench.py under allocators, each in
# its own process, on a machine with a GPU, PyTorch, torchvision,
# transformers and CuPy, and prints the markdown table of BENCHMARKS.md.
# Build the library and the C control first (scripts/build-capi.sh); the
# machine needs no Go.
#
# Usage: scripts/torch-bench.sh [outdir] [lib]
#   (default outdir torch-bench-out, lib build/capi/libstreamalloc.so; the
#   control, libtorch_control.so, is taken from lib's folder)
# Environment: WARMUP, STEPS (default 6 and 24 per workload; generation
#   and CuPy use 5 and 20), WORKLOADS (default "gpt2 resnet50 generate
#   cupy"), CONFS (streamalloc's configurations, each a run, default "pool";
#   e.g. CONFS="pool pool,upstream=vmm" runs the pool over cuMemAlloc and
#   over mapped virtual memory beside native and expandable_segments),
#   RUN_TIMEOUT (seconds per process, default 240), GCTRACE=1 (run
#   streamalloc and the control with GODEBUG=gctrace=1; each log then counts
#   the Go collections), DEADLINE (seconds: runs that would start later than
#   this after the script began are skipped, and named), and RUNS, which
#   replaces the loops above by a list
#   of runs separated by ';', each "WORKLOAD ALLOCATOR [CONF [VAR=VALUE ...]]",
#   for example
#     RUNS='gpt2 native; gpt2 control async+go; gpt2 streamalloc pool GOMAXPROCS=4'
#   (CONF: streamalloc's configuration string, "default" for the empty one,
#   pluggable.Recommended; the control's mode: async, async+go, sa:CONF or
#   cache, the C caching allocator that is the pluggable path's floor, or
#   cache+go, the same crossing into Go on every call)
#   and INTERLEAVE, the protocol for step times: a list of configurations
#   separated by ';', each "ALLOCATOR [CONF [VAR=VALUE ...]]", the first the
#   reference, for example INTERLEAVE='native; streamalloc pool'. For each
#   workload of WORKLOADS it runs ROUNDS rounds (default 5), each round one
#   process per configuration, in the list's order in odd rounds and the
#   reverse in even ones (so drift over the run weighs on both sides alike),
#   and prints rounds.md: per configuration the median of its processes'
#   median step times, their spread, and the ratio to the reference paired
#   round by round (torch-bench.py rounds).
#   LOCKSTEP, the protocol that resolves step times where the host is
#   noisy (BENCHMARKS.md, "Where the spread between processes comes
#   from"): configurations as in INTERLEAVE, the first the reference; for
#   each workload of WORKLOADS one process per configuration, all alive at
#   once and taking turns, BLOCKS blocks (default 200) of BLOCK_STEPS steps
#   (default 1; CuPy 5) after WARMUP (default 18) untimed steps, PAIRS groups
#   of processes (default 1), for example
#     LOCKSTEP='native; control cache; streamalloc default; streamalloc default GODEBUG=schedtrace=2000000000'
#   (the floor's four arms, BENCHMARKS.md "The pluggable path's floor");
#   prints lockstep.md (torch-bench.py
#   lockstep-table: the ratio to the reference paired step by step, its
#   median and 95% interval, the verdict at 2%) and table.md (the
#   processes' memory, device calls and losses). PIN (a taskset CPU list)
#   and GC (on or freeze) pass to every process.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-torch-bench-out}
lib=$(realpath "${2:-$here/../build/capi/libstreamalloc.so}")
control=$(dirname "$lib")/libtorch_control.so
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/machine.txt"
python3 -c 'import torch, torchvision, transformers, cupy; print("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", transformers.__version__, "cupy", cupy.__version__)' 2>&1 | tee -a "$out/machine.txt"
status=0
began=$(date +%s)

# run WORKLOAD ALLOCATOR CONF [VAR=VALUE ...]: one process.
run() {
	local w=$1 a=$2 conf=${3:-pool}
	shift 3 || shift $#
	local warm=${WARMUP:-6} steps=${STEPS:-24}
	case $w in generate | cupy) warm=${WARMUP:-5} steps=${STEPS:-20} ;; esac
	local envs=("$@")
	if [ "${GCTRACE:-}" = 1 ] && { [ "$a" = streamalloc ] || [ "$a" = control ]; }; then
		envs+=(GODEBUG=gctrace=1)
	fi
	# Log names keep letters, digits, '.', '_' and '-' alone, the names a
	# file may have to come back from the GPU machine's output folder.
	local tag="$w-$a-${conf//[^a-z0-9.-]/_}"
	[ ${#envs[@]} -gt 0 ] && tag="$tag-$(echo "${envs[*]}" | tr -c 'A-Za-z0-9.\n-' _)"
	local log="$out/$tag.log" start
	start=$(date +%s)
	if [ -n "${DEADLINE:-}" ] && [ $((start - began)) -ge "$DEADLINE" ]; then
		echo "$w $a $conf ${envs[*]-}: SKIPPED (DEADLINE $DEADLINE s reached)"
		return
	fi
	if env ${envs[@]+"${envs[@]}"} timeout "${RUN_TIMEOUT:-240}" python3 "$here/torch-bench.py" run "$w" "$a" \
		--out "$results" --lib "$lib" --control-lib "$control" --conf "$conf" --warmup "$warm" --steps "$steps" \
		>"$log" 2>&1; then
		echo "$w $a $conf ${envs[*]-}: ok in $(($(date +%s) - start)) s; Go collections: $(grep -c '^gc [0-9]* @' "$log")"
	else
		echo "$w $a $conf ${envs[*]-}: FAILED in $(($(date +%s) - start)) s; last lines of $log:"
		tail -15 "$log"
		status=1
	fi
}

if [ -n "${LOCKSTEP:-}" ]; then
	for w in ${WORKLOADS:-gpt2 resnet50 generate cupy}; do
		start=$(date +%s)
		if [ -n "${DEADLINE:-}" ] && [ $((start - began)) -ge "$DEADLINE" ]; then
			echo "$w lockstep: SKIPPED (DEADLINE $DEADLINE s reached)"
			continue
		fi
		if timeout "${RUN_TIMEOUT:-600}" python3 "$here/torch-bench.py" lockstep "$w" --configs "$LOCKSTEP" \
			--out "$results" --blocks-out "$out/blocks.jsonl" --lib "$lib" --control-lib "$control" --warmup "${WARMUP:-18}" \
			--blocks "${BLOCKS:-200}" --block-steps "${BLOCK_STEPS:-0}" --pairs "${PAIRS:-1}" \
			--pin "${PIN:-}" --gc "${GC:-on}" >"$out/$w-lockstep.log" 2>&1; then
			echo "$w lockstep: ok in $(($(date +%s) - start)) s"
		else
			echo "$w lockstep: FAILED in $(($(date +%s) - start)) s; last lines of $out/$w-lockstep.log:"
			tail -15 "$out/$w-lockstep.log"
			status=1
		fi
	done
	python3 "$here/torch-bench.py" lockstep-table "$out/blocks.jsonl" | tee "$out/lockstep.md"
elif [ -n "${INTERLEAVE:-}" ]; then
	IFS=';' read -ra specs <<<"$INTERLEAVE"
	for w in ${WORKLOADS:-gpt2 resnet50 generate cupy}; do
		for r in $(seq "${ROUNDS:-5}"); do
			order=("${specs[@]}")
			if [ $((r % 2)) = 0 ]; then
				order=()
				for ((i = ${#specs[@]} - 1; i >= 0; i--)); do order+=("${specs[i]}"); done
			fi
			for spec in "${order[@]}"; do
				read -ra words <<<"$spec"
				[ ${#words[@]} -ge 1 ] || continue
				run "$w" "${words[0]}" "${words[1]:-pool}" "${words[@]:2}" "BENCH_ROUND=$r"
			done
		done
	done
	python3 "$here/torch-bench.py" rounds "$results" | tee "$out/rounds.md"
elif [ -n "${RUNS:-}" ]; then
	IFS=';' read -ra specs <<<"$RUNS"
	for spec in "${specs[@]}"; do
		read -ra words <<<"$spec"
		[ ${#words[@]} -ge 2 ] || continue
		run "${words[@]}"
	done
else
	for w in ${WORKLOADS:-gpt2 resnet50 generate cupy}; do
		allocs="native expandable streamalloc"
		[ "$w" = cupy ] && allocs="cupy-pool streamalloc"
		for a in $allocs; do
			confs=pool
			[ "$a" = streamalloc ] && confs=${CONFS:-pool}
			for conf in $confs; do
				run "$w" "$a" "$conf"
			done
		done
	done
fi
python3 "$here/torch-bench.py" table "$results" | tee "$out/table.md"
exit $status
