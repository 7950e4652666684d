#!/bin/bash
# Replays every recorded trace, and the lengthened GPT-2 and ResNet-50
# histories and CuPy's timed steps, through the C ABI's pool on the
# simulator under slack= (mr.PoolOptions.ReservedSlack), with and without
# split_giant. explore.patch adds the driver test (not part of the tree):
#
#   git apply docs/bench/sim-2026-11-24-slack/explore.patch
#   docs/bench/sim-2026-11-24-slack/run.sh > variants.txt
#   git apply -R docs/bench/sim-2026-11-24-slack/explore.patch
#
# Each line: trace, configuration, peak reserved / peak live, peak reserved
# bytes, device allocations, device frees, and for gpt2-34-steps,
# resnet50-36-steps and cupy-timed the device calls of the steady or timed
# steps (allocations+frees).
set -e
cd "$(git rev-parse --show-toplevel)"
go test -c -o /tmp/slack-pluggable.test ./pluggable
cd pluggable
C="pool;pool,split_giant"
for s in 0.005 0.01 0.02 0.03 0.04 0.05 0.08 0.1; do C="$C;pool,slack=$s;pool,split_giant,slack=$s"; done
for s in 0.15 0.2 0.3 0.5 1; do C="$C;pool,slack=$s"; done
SLACK_CONFS="$C" /tmp/slack-pluggable.test -test.run TestSlackExplore | grep -v '^PASS$'
