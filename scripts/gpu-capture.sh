#!/usr/bin/env bash
# gpu-capture.sh runs, on a machine with an NVIDIA GPU, the checks of CUDA
# graph capture (issue 12) from the test binaries that scripts/gpu-build.sh
# made, and the capture benchmark:
#
#   - cuda: the raw capture entry points (a relaxed capture's replay, the
#     thread rule of global captures, graph memory attributes);
#   - gpu_cudagpu: the backend conformance suite, whose capture part pins
#     what the driver answers to every call a capture forbids (the
#     simulator must answer the same), and the backend's capture threads;
#   - mr: the resource conformance suites, whose capture part replays a
#     captured allocate / fill / check / free loop 1,000 times on one and on
#     two streams while other streams allocate and fill from the same
#     resource, counting corrupted words on the card;
#   - buf: tracked buffers in a captured step on two streams, replayed 200
#     times between fills and checks outside the graph (and the same loop
#     untracked, whose checks must find corrupted words), and the capture
#     rules of buffers (lifetimes, refusals);
#   - sanitize: graphs under the sanitizer (a launch reading freed or
#     reused memory refused, correctly ordered graphs not reported);
#   - mr bench: BenchmarkCaptureStep, -test.count 5.
#
# Build here:  scripts/gpu-build.sh ./cuda ./gpu/cudagpu ./mr ./buf ./sanitize
# Run there:   scripts/gpu-capture.sh [.gpubin]      (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
status=0
TEST_TIMEOUT=4m TEST_RUN='Capture|ThreadExchange' "$bin/run.sh" test cuda || status=1
TEST_TIMEOUT=4m TEST_RUN='Conformance|Capture' "$bin/run.sh" test gpu_cudagpu || status=1
TEST_TIMEOUT=6m TEST_RUN='Conformance' "$bin/run.sh" test mr || status=1
TEST_TIMEOUT=4m TEST_RUN='Capture|Example_graph' "$bin/run.sh" test buf || status=1
TEST_TIMEOUT=4m TEST_RUN='Graph' "$bin/run.sh" test sanitize || status=1
BENCH=CaptureStep BENCH_COUNT=${BENCH_COUNT:-5} BENCH_TIME=${BENCH_TIME:-2000x} "$bin/run.sh" bench mr || status=1
exit $status
