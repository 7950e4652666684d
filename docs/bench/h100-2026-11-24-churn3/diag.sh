#!/usr/bin/env bash
# diag.sh runs Random alone in separate processes of one mr test binary
# (three counts each) and samples, every 0.25 s while each runs, its
# resident and transparent-huge-page memory (/proc/PID/smaps_rollup) and
# the CPU each of its threads last ran on, to see whether the figure's
# mode (about 125 or 200 ns an operation on the H100 host, fixed per
# process) goes with either.
#
#   OUT=dir PROCS=6 diag.sh mr-churn.test
set -u
out=${OUT:?}/diag
mkdir -p "$out"
bin=$1
{ cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; lscpu; } >"$out/host.txt" 2>&1
for ((i = 1; i <= ${PROCS:-6}; i++)); do
	"$bin" -test.run='^$' -test.bench='Random/resource=pool$' -test.benchmem -test.count=3 -test.benchtime=300ms >"$out/run-$i.txt" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		{
			date -u +%T.%N
			grep -E '^(Rss|AnonHugePages)' "/proc/$pid/smaps_rollup"
			echo "cpus $(cat /proc/"$pid"/task/*/stat | awk '{printf "%s ", $39}')"
		} >>"$out/run-$i.samples" 2>/dev/null
		sleep 0.25
	done
	wait "$pid"
done
