#!/usr/bin/env bash
# bench-ab.sh runs the same benchmarks of two test binaries of one package,
# built from two trees, interleaved round by round on one machine, so that
# drift of the machine (clocks, neighbours) falls on both sides alike, and
# prints benchstat's comparison when benchstat is on PATH.
#
#   scripts/bench-ab.sh OLD.test NEW.test 'Pair/resource=pool' [ROUNDS] [BENCHTIME]
#
# The binaries are `go test -c` outputs (gzipped ones are unpacked). Each
# round runs OLD then NEW with -test.count=1; the logs are old.txt and
# new.txt under $OUT (or ./bench-ab). Run it from the package's folder if
# the benchmarks read testdata.
set -euo pipefail
old=$1 new=$2 pattern=$3 rounds=${4:-6} benchtime=${5:-1s}
out=${OUT:-bench-ab}
mkdir -p "$out"
unpack() {
	case "$1" in
	*.gz) local b; b=$(mktemp); gzip -dc "$1" >"$b"; chmod +x "$b"; echo "$b" ;;
	*) echo "$1" ;;
	esac
}
old=$(unpack "$old")
new=$(unpack "$new")
: >"$out/old.txt"
: >"$out/new.txt"
for ((i = 1; i <= rounds; i++)); do
	"$old" -test.run='^$' -test.bench="$pattern" -test.benchmem -test.count=1 -test.benchtime="$benchtime" >>"$out/old.txt"
	"$new" -test.run='^$' -test.bench="$pattern" -test.benchmem -test.count=1 -test.benchtime="$benchtime" >>"$out/new.txt"
done
if command -v benchstat >/dev/null; then
	benchstat "$out/old.txt" "$out/new.txt"
else
	grep -h '^Benchmark' "$out/old.txt" | sed 's/^/old /'
	grep -h '^Benchmark' "$out/new.txt" | sed 's/^/new /'
fi
