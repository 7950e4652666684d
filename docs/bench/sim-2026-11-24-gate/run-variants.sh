#!/bin/bash
# Replays every recorded trace through the C ABI's pool on the simulator
# under each gate variant of split_giant, with the temporary instrumentation
# of gate-variants.patch applied to the tree (it is not part of the tree):
#
#   git apply docs/bench/sim-2026-11-24-gate/gate-variants.patch
#   docs/bench/sim-2026-11-24-gate/run-variants.sh > variants.txt
#   python3 docs/bench/sim-2026-11-24-gate/summarize.py variants.txt
#   git apply -R docs/bench/sim-2026-11-24-gate/gate-variants.patch
#
# Each line: variant, trace, configuration, peak reserved / peak live, peak
# reserved bytes, device allocations, device frees, and for the lengthened
# histories (gpt2-34-steps, resnet50-36-steps, cupy-timed) the device calls
# of the steady or timed steps. The variants are set through GATE_*
# variables that only the patch reads.
set -e
cd "$(git rev-parse --show-toplevel)"
go test -c -o /tmp/gate-pluggable.test ./pluggable
cd pluggable
run() { # label, then VAR=value... for env
	local lab=$1; shift
	env "$@" GATE_CONFS="${CONF:-pool,split_giant}" /tmp/gate-pluggable.test -test.run TestGateExplore -test.v 2>&1 |
		grep -v '^=== \|^---\|^PASS\|^ok' | sed "s/^/$lab /"
}
CONF=pool run default
run split_giant
for L in 4 8 16 32; do run "life<=$L" GATE_L=$L; done
for W in 4 16 64; do run "markstable$W" GATE_W=$W; done
for K in 1 2 3; do run "seen>$K" GATE_K=$K; done
run period GATE_P=1
for f in 2 4; do run "period,life*$f" GATE_P=1 GATE_PF=$f; done
run "period+markstable16" GATE_P=1 GATE_W=16
run "period+markstable64" GATE_P=1 GATE_W=64
run "period+life<=8" GATE_P=1 GATE_L=8
run "liveatgiant" GATE_G=sticky
run "liveatgiant-last" GATE_G=last
run "liveatgiant+period" GATE_G=sticky GATE_P=1
for C in 1 2 3; do run "regrown>=$C" GATE_C=$C; done
run "wholeidle" GATE_WHOLE=1
run "wholeidle+markstable16" GATE_WHOLE=1 GATE_W=16
run "tail" GATE_TAIL=1
run "tail+markstable16" GATE_TAIL=1 GATE_W=16
run "tail+period" GATE_TAIL=1 GATE_P=1
for S in 1 2 3; do run "steps-since-rise>=$S" GATE_S=$S GATE_SLO=0.5 GATE_SHI=0.9; done
for S in 1 2 3; do run "steps-since-livepeak>=$S" GATE_S=$S GATE_SMODE=live GATE_SLO=0.5 GATE_SHI=0.9; done
run "shadow" GATE_H=sticky
run "shadow-last" GATE_H=last
run "shadow+steps-since-livepeak>=1" GATE_H=sticky GATE_S=1 GATE_SMODE=live GATE_SLO=0.5 GATE_SHI=0.9
run "shadow-optimistic" GATE_H=sticky GATE_HOPT=1
run "shadow-optimistic+steps-since-livepeak>=1" GATE_H=sticky GATE_HOPT=1 GATE_S=1 GATE_SMODE=live GATE_SLO=0.5 GATE_SHI=0.9
run "shadow-by-pair" GATE_H=sticky GATE_PAIR=1
run "shadow-by-pair-optimistic" GATE_H=sticky GATE_PAIR=1 GATE_HOPT=1
run "shadow-by-pair-optimistic+steps-since-livepeak>=1" GATE_H=sticky GATE_PAIR=1 GATE_HOPT=1 GATE_S=1 GATE_SMODE=live GATE_SLO=0.5 GATE_SHI=0.9
run "step-period" GATE_V=1
run "step-period+steps-since-livepeak>=1" GATE_V=1 GATE_S=1 GATE_SMODE=live GATE_SLO=0.5 GATE_SHI=0.9
CONF=pool run "lru-release" GATE_LRU=1
run "lru-release+split_giant" GATE_LRU=1
for Q in 16 64 256; do CONF=pool run "quarantine$Q" GATE_Q=$Q; done
