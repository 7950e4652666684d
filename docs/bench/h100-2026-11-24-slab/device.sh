#!/usr/bin/env bash
# device.sh: the slab measurement on the H100 machine, in one call.
# Built on the development machine into one folder carried to the GPU
# machine (nothing here needs Go there):
#   (this folder's slabproto/*.go.txt, renamed *.go, in a module of its own)
#       go test -c -ldflags='-s -w' -o proto.test . && gzip proto.test
#   (main at 14cca61)  scripts/gpu-build.sh ./mr && cp .gpubin/mr.test.gz .
# Run there: OUT=... ./device.sh; everything lands in $OUT/slab.tgz.
#
# Per round, one process each: the prototype's four representations
# (ptr: heap descriptors linked by pointers, as mr keeps them; ptr64: the
# same in 64 bytes; idx: a slab of 64-byte descriptors linked by uint32
# indices; idxu: idx without bounds checks; in the third call also
# ptrmutex: ptr with a mutex taken around each call, and ptrnoquick: ptr
# without the quick cache), then the mr pool's own random churn on the
# simulator and on the GPU, for scale.
set -u
here=$(cd "$(dirname "$0")" && pwd)
res=${OUT:?}/slab
mkdir -p "$res"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; lscpu | grep -E 'Model name|L1d|L2|L3'; } >"$res/machine.txt" 2>&1
for b in proto mr; do gzip -dc "$here/$b.test.gz" >"$res/$b.test"; chmod +x "$res/$b.test"; done
bt=${BT:-150ms}
for ((i = 1; i <= ${ROUNDS:-6}; i++)); do
	for r in ${VARIANTS:-ptr ptr64 idx idxu}; do
		"$res/proto.test" -test.run='^$' -test.bench="^BenchmarkRandom\$/^repr=$r\$" \
			-test.benchmem -test.count=1 -test.benchtime="$bt" >>"$res/proto-$r.txt" 2>&1
	done
	"$res/mr.test" -test.run='^$' -test.bench='Random/resource=pool$' \
		-test.benchmem -test.count=1 -test.benchtime="$bt" >>"$res/mr-sim.txt" 2>&1
	STREAMALLOC_DEVICE=cuda "$res/mr.test" -test.run='^$' -test.bench='Random/resource=pool$' \
		-test.benchmem -test.count=1 -test.benchtime="$bt" >>"$res/mr-cuda.txt" 2>&1
done
date -u >>"$res/machine.txt"
# Hardware counters, where the guest exposes them: one process per
# representation, 2,000,000 timed operations (plus the warm-up).
if command -v perf >/dev/null; then
	for r in ${VARIANTS:-ptr ptr64 idx idxu}; do
		perf stat -x, -e cycles,instructions,L1-dcache-load-misses,L1-dcache-loads \
			"$res/proto.test" -test.run='^$' -test.bench="^BenchmarkRandom\$/^repr=$r\$" \
			-test.benchtime=2000000x >>"$res/perf.txt" 2>&1
	done
else
	echo "no perf on this machine" >"$res/perf.txt"
fi
rm -f "$res"/*.test
tar -C "$res/.." -czf "$res/../slab.tgz" slab && rm -rf "$res"
