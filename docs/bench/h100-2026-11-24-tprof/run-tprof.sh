#!/usr/bin/env bash
# GPT-2 (torch-bench.py's workload) profiled under native and under
# streamalloc's default pool (through CUDAPluggableAllocator), two processes
# of each in the order native, streamalloc, streamalloc, native, so that each
# of the two pairs can be compared (scripts/torch-profile.py compare). Run
# from a folder holding build/capi (scripts/build-capi.sh), scripts/
# (torch-profile.py, torch-bench.py) and python/ (streamalloc_torch.py).
# Logs under $1: run.log, compare-1.md and compare-2.md, summaries.tar.gz
# (each process's summary JSON and log) and the first pair's Chrome traces,
# gzipped. DEADLINE (seconds, default 170): a process that would start later
# is skipped; RUN_TIMEOUT (default 75) bounds each.
set -u
cd "$(dirname "$0")"
R=$1; mkdir -p "$R/s"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,utilization.gpu --format=csv,noheader | tee "$R/run.log"
lib=$PWD/build/capi/libstreamalloc.so
n=0
for a in native streamalloc streamalloc native; do
	n=$((n + 1))
	if [ $(($(date +%s) - t0)) -ge "${DEADLINE:-170}" ]; then
		echo "$n $a: SKIPPED (deadline)" | tee -a "$R/run.log"; continue
	fi
	tr=()
	[ $n -le 2 ] && tr=(--trace "$R/trace-$a.json.gz")
	s=$(date +%s)
	timeout "${RUN_TIMEOUT:-75}" python3 scripts/torch-profile.py run $a --lib "$lib" --out "$R/s/$n-$a.json" \
		"${tr[@]}" >"$R/s/$n-$a.log" 2>&1
	echo "$n $a: rc $? in $(($(date +%s) - s)) s" | tee -a "$R/run.log"
	tail -1 "$R/s/$n-$a.log" | tee -a "$R/run.log"
done
[ -f "$R/s/1-native.json" ] && [ -f "$R/s/2-streamalloc.json" ] &&
	python3 scripts/torch-profile.py compare "$R/s/1-native.json" "$R/s/2-streamalloc.json" >"$R/compare-1.md" 2>&1
[ -f "$R/s/4-native.json" ] && [ -f "$R/s/3-streamalloc.json" ] &&
	python3 scripts/torch-profile.py compare "$R/s/4-native.json" "$R/s/3-streamalloc.json" >"$R/compare-2.md" 2>&1
tar czf "$R/summaries.tar.gz" -C "$R" s && rm -rf "$R/s"
echo "done in $(($(date +%s) - t0)) s" | tee -a "$R/run.log"
cat "$R"/compare-*.md
