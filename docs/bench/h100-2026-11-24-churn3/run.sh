#!/usr/bin/env bash
# run.sh interleaves the benchmarks of several mr test binaries round by
# round (each binary once per round, in the order given), so that drift
# of the host falls on every side alike, then prints benchstat's
# comparison of each binary against the first.
#
#   OUT=dir ROUNDS=6 BT=150ms PAT='Random/resource=pool$|Pair/resource=pool/' \
#     run.sh mr-main.test.gz mr-mainH.test.gz mr-churn.test.gz
#
# Logs: $OUT/<name>.txt, name the binary's file name without .test(.gz).
# With STREAMALLOC_DEVICE=cuda the binaries run on the GPU (the pool's
# upstream is the driver's pool); without, on the simulator.
set -u
out=${OUT:?}
rounds=${ROUNDS:-6} bt=${BT:-150ms} pat=${PAT:-'Random/resource=pool$|Pair/resource=pool/'}
mkdir -p "$out"
names=()
for f in "$@"; do
	n=$(basename "$f"); n=${n%.gz}; n=${n%.test}
	case "$f" in
	*.gz) gzip -dc "$f" >"$out/$n.bin" ;;
	*) cp "$f" "$out/$n.bin" ;;
	esac
	chmod +x "$out/$n.bin"
	: >"$out/$n.txt"
	names+=("$n")
done
for ((i = 1; i <= rounds; i++)); do
	for n in "${names[@]}"; do
		"$out/$n.bin" -test.run='^$' -test.bench="$pat" -test.benchmem -test.count=1 -test.benchtime="$bt" >>"$out/$n.txt" 2>&1
	done
	echo "round $i $(date -u +%T)"
done
rm -f "$out"/*.bin
if command -v benchstat >/dev/null; then
	for n in "${names[@]:1}"; do
		benchstat "$out/${names[0]}.txt" "$out/$n.txt"
	done
fi
