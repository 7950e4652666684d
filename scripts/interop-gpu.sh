#!/usr/bin/env bash
# interop-gpu.sh proves the foreign-handle wing and the C ABI on a GPU
# machine without Go: the adoption tests of cuda, gpu/cudagpu and mr, the
# Go-side and C-side costs of an allocate/free pair through the C ABI, and
# (unless SKIP_TORCH=1) the PyTorch/CuPy benchmark; SKIP_TESTS=1 skips the
# Go test binaries and their benchmark. Run it from a folder
# holding .gpubin/ (scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr
# ./pluggable), build/capi/ (scripts/build-capi.sh), python/ and scripts/.
# Logs go to $OUT (or ./interop-out).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${OUT:-$here/interop-out}
mkdir -p "$out"
status=0
export LOGDIR=$out
if [ "${SKIP_TESTS:-}" != 1 ]; then
	echo "== GPU tests"
	.gpubin/run.sh test cuda gpu_cudagpu || status=1
	TEST_RUN='Conformance$/.*/AdoptedStreams' .gpubin/run.sh test mr || status=1
	cp "$out/mr.test.log" "$out/mr-adopted.test.log"
	TEST_RUN='TestAsyncViewConformance|TestAsyncForeignPool|TestAsyncPoolChoices|TestPoolReleaseDestroyedHome' .gpubin/run.sh test mr || status=1
	echo "== pair cost, Go side (pluggable)"
	BENCH=AllocFree BENCH_COUNT=3 .gpubin/run.sh bench pluggable || status=1
	grep -h Benchmark "$out/pluggable.bench.log"
fi
echo "== pair cost, from C"
scripts/capi-bench.sh build/capi 1000000 4 2>&1 | tee "$out/capi-bench.txt" || status=1
if [ "${SKIP_TORCH:-}" != 1 ]; then
	echo "== PyTorch and CuPy"
	scripts/torch-bench.sh "$out/torch" build/capi/libstreamalloc.so || status=1
fi
exit $status
