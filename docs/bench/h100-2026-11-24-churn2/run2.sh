#!/usr/bin/env bash
# Random churn and the pool pair with the benchmark process pinned to each
# vCPU in turn (taskset), to tell the host's two speeds apart from the
# code's: the unpinned runs of run.sh are bimodal (about 125 or 200 ns an
# operation, per process, for the same binary). Binaries as in run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}
export STREAMALLOC_DEVICE=${DEV:-cuda}
cd "$here"
for b in main new; do [ -x mr-$b.test ] || { gzip -dc mr-$b.test.gz >mr-$b.test && chmod +x mr-$b.test; }; done
{ lscpu -e; echo; numactl -H 2>&1; echo; for c in /sys/devices/system/cpu/cpu[0-9]*; do echo "$(basename $c) core $(cat $c/topology/core_id 2>/dev/null) pkg $(cat $c/topology/physical_package_id 2>/dev/null) siblings $(cat $c/topology/thread_siblings_list 2>/dev/null)"; done; } >"$out/topology.txt" 2>&1
pat='Random/resource=pool$|Pair/resource=pool/size=4KiB$'
n=$(nproc)
for pass in new main new; do
	for ((c = 0; c < n; c++)); do
		taskset -c $c ./mr-$pass.test -test.run='^$' -test.bench="$pat" -test.count=1 -test.benchtime=${BT:-150ms} 2>&1 |
			awk -v c=$c -v b=$pass '/^Benchmark/{print b, "cpu" c, $1, $3}' >>"$out/pinned.txt"
	done
	echo "pass $pass $(date -u +%T)"
done
GODEBUG=gctrace=1 ./mr-new.test -test.run='^$' -test.bench='Random/resource=pool$' -test.count=4 -test.benchtime=150ms >"$out/gctrace.txt" 2>&1
date -u
