#!/usr/bin/env bash
# gpu-run.sh (copied to .gpubin/run.sh by scripts/gpu-build.sh) runs the
# test binaries built by gpu-build.sh on a machine with an NVIDIA GPU and
# no Go. It prints what the driver and nvidia-smi report, runs each
# binary from its package's folder (so testdata is found) with
# STREAMALLOC_DEVICE=cuda, which makes every GPU test fail rather than
# skip when no GPU is usable, and prints a summary table last.
#
# Usage: .gpubin/run.sh [test] [name...]    every test, -test.v (default)
#        .gpubin/run.sh bench [name...]     benchmarks, -test.count=6
# names are those of .gpubin/MANIFEST (cuda, gpu_cudagpu, ...); default:
# all for test, BENCH_PKGS (default "cuda gpu_cudagpu") for bench.
# Environment: STREAMALLOC_DEVICE (default cuda; sim checks the binaries
#   on a machine without a GPU), LOGDIR (default $OUT if set, else .gpubin/logs),
#   TEST_RUN (-test.run pattern), TEST_TIMEOUT (default 5m),
#   BENCH (-test.bench pattern, default .), BENCH_COUNT (default 6),
#   BENCH_TIME (-test.benchtime, default 1s).
set -uo pipefail

bin=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$bin/.." && pwd)
mode=test
case "${1:-}" in
test | bench) mode=$1; shift ;;
esac
logdir=${LOGDIR:-${OUT:-$bin/logs}}
mkdir -p "$logdir"
export STREAMALLOC_DEVICE=${STREAMALLOC_DEVICE:-cuda}

echo "== machine"
[ -f "$bin/BUILDINFO" ] && cat "$bin/BUILDINFO"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
nvidia-smi 2>/dev/null | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1/p' | head -1

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
	if [ "$mode" = bench ]; then
		read -ra names <<<"${BENCH_PKGS:-cuda gpu_cudagpu}"
	else
		mapfile -t names < <(awk '{print $1}' "$bin/MANIFEST")
	fi
fi

# binary NAME: the path of NAME's test binary, unpacked on first use.
binary() {
	local b="$bin/$1.test"
	if [ ! -x "$b" ] && [ -f "$b.gz" ]; then
		gzip -dc "$b.gz" >"$b.tmp" && chmod +x "$b.tmp" && mv "$b.tmp" "$b"
	fi
	[ -x "$b" ] && echo "$b"
}

summary=()
status=0
for name in "${names[@]}"; do
	line=$(awk -v n="$name" '$1 == n' "$bin/MANIFEST")
	reldir=$(echo "$line" | awk '{print $2}')
	b=$(binary "$name") || b=
	if [ -z "$line" ] || [ -z "$b" ]; then
		summary+=("$(printf '%-28s %-6s %s' "$name" MISSING "no such test binary")")
		status=1
		continue
	fi
	dir="$root/$reldir"
	[ -d "$dir" ] || dir=$(mktemp -d)
	log="$logdir/$name.$mode.log"
	start=$(date +%s.%N)
	if [ "$mode" = bench ]; then
		(cd "$dir" && "$b" -test.run='^$' -test.bench="${BENCH:-.}" -test.benchmem \
			-test.count="${BENCH_COUNT:-6}" -test.benchtime="${BENCH_TIME:-1s}" -test.timeout=30m) >"$log" 2>&1
	else
		(cd "$dir" && "$b" -test.v -test.run="${TEST_RUN:-.}" -test.timeout="${TEST_TIMEOUT:-5m}") >"$log" 2>&1
	fi
	rc=$?
	secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
	pass=$(grep -cE '^\s*--- PASS' "$log")
	fail=$(grep -cE '^\s*--- FAIL' "$log")
	skip=$(grep -cE '^\s*--- SKIP' "$log")
	res=ok
	[ $rc -ne 0 ] && { res=FAIL; status=1; }
	if [ "$mode" = bench ]; then
		nb=$(grep -cE '^Benchmark' "$log")
		summary+=("$(printf '%-28s %-6s %6ss  %d result lines' "$name" "$res" "$secs" "$nb")")
	else
		summary+=("$(printf '%-28s %-6s %6ss  pass %-4d fail %-4d skip %-4d' "$name" "$res" "$secs" "$pass" "$fail" "$skip")")
	fi
	if [ $rc -ne 0 ]; then
		echo "== $name: FAILED (exit $rc), end of $log:"
		grep -E '^\s*--- FAIL|panic:|^FAIL' "$log" | head -40
		tail -n 30 "$log"
	elif [ "$mode" = test ] && [ "$skip" -gt 0 ]; then
		echo "== $name: skipped:"
		grep -E -B1 '^\s*--- SKIP' "$log" | grep -vE '^--$' | head -20
	fi
done

if [ "$mode" = bench ]; then
	echo "== benchmarks: median of runs (ns/op, B/op, allocs/op); raw output in $logdir/*.bench.log for benchstat"
	for name in "${names[@]}"; do
		f="$logdir/$name.bench.log"
		[ -f "$f" ] || continue
		awk -v pkg="$name" '
			/^Benchmark/ {
				n = $1; k[n]++; ns[n, k[n]] = $3
				for (i = 4; i < NF; i++) {
					if ($(i+1) == "B/op") bo[n] = $i
					if ($(i+1) == "allocs/op") ao[n] = $i
				}
				if (!(n in seen)) { seen[n] = 1; order[++m] = n }
			}
			END {
				for (j = 1; j <= m; j++) {
					n = order[j]; c = k[n]
					for (a = 1; a <= c; a++) v[a] = ns[n, a] + 0
					for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
					med = (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
					printf "%-14s %-46s %12.1f ns/op %6s B/op %4s allocs/op  (%d runs)\n", pkg, n, med, bo[n], ao[n], c
				}
			}' "$f"
	done
fi
echo "== summary ($mode)"
printf '%s\n' "${summary[@]}"
exit $status
