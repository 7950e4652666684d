#!/usr/bin/env bash
# What entering Go costs inside PyTorch, in one device call: four
# configurations under the lockstep protocol (scripts/torch-bench.py
# lockstep: one process per configuration alive at once, taking turns step
# by step, each step paired with native's same step):
#   native                  PyTorch's caching allocator
#   control cache           libtorch_control.so in cache mode: a caching
#                           allocator in C alone behind CUDAPluggableAllocator
#                           (capi/testdata/torch_control.c), no Go, no driver
#                           call once warm: the floor of any pluggable allocator
#   control cache+go        the same cache, and on every call (requests for 0
#                           bytes and frees of NULL included, as the library
#                           gets them) one empty call into libstreamalloc.so
#                           (sa_last_error): the floor of any pluggable
#                           allocator written in Go
#   streamalloc default     libstreamalloc.so as scripts/build-capi.sh links
#                           it, the empty configuration (pluggable.Recommended)
# GPT-2 first (GPT2_PAIRS groups of GPT2_BLOCKS step pairs, at most
# GPT2_SECONDS), then ResNet-50 with what time is left (RESNET_PAIRS groups
# of RESNET_BLOCKS), then, if GEN_ARMS names configurations, generation
# with the rest, inside BUDGET seconds in all. Before them (unless
# SMOKE=0), one short GPT-2 run of the control alone in each of its two
# modes, with its per-call detail (TORCH_CONTROL_DETAIL), to time its calls.
#
# Built on the development machine, in the folder DIR this script runs from:
#     scripts/build-capi.sh DIR/build/capi && cp -r python DIR/
#     mkdir DIR/scripts && cp scripts/*.py scripts/*.sh DIR/scripts/ && cp docs/bench/h100-2026-11-25-crossing/crossing.sh DIR/
# Run there (the folder carried): cd DIR && OUT=... bash crossing.sh
# Everything it writes is packed into $OUT/crossing.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}/crossing
mkdir -p "$out"
cd "$here" || exit 1
began=$(date +%s)
budget=${BUDGET:-560}
left() { echo $((budget - ($(date +%s) - began))); }
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader; nproc
  python3 -c 'import torch, transformers, torchvision; print("torch", torch.__version__, "transformers", transformers.__version__, "torchvision", torchvision.__version__)'; } >"$out/machine.txt" 2>&1
L=$here/build/capi/libstreamalloc.so
C=$here/build/capi/libtorch_control.so
export PYTHONUNBUFFERED=1
unset STREAMALLOC_CONF
# 1. The control alone in cache mode, then in cache+go, each call timed
#    and histogrammed (the detail files, by mode).
if [ "${SMOKE:-1}" != 0 ]; then
	for m in cache cache+go; do
		TORCH_CONTROL_DETAIL=$out/detail-$m.txt timeout 90 python3 scripts/torch-bench.py run gpt2 control --conf "$m" \
			--out "$out/smoke.jsonl" --lib "$L" --control-lib "$C" --warmup 12 --steps 12 >>"$out/smoke.log" 2>&1
		echo "smoke $m exit $? $(date -u +%T)" >>"$out/machine.txt"
	done
fi
ARMS='native; control cache; control cache+go; streamalloc default'
# GPT-2's four processes do not fit one H100 at once: the cache keeps about
# 2.4 times GPT-2's live bytes (31 GiB), so with two cache processes the
# one that grows last runs out of device memory and thrashes (it gives its
# blocks back and takes them again, 146,000 driver calls in 450 steps).
# GPT2_ARMS names a set that fits, e.g. 'native; control cache; control cache+go'.
GPT2_ARMS=${GPT2_ARMS:-$ARMS}
RESNET_ARMS=${RESNET_ARMS:-$ARMS}
# 2. GPT-2 (GPT2_SECONDS=0 skips it).
t=$(left); [ "$t" -gt "${GPT2_SECONDS:-330}" ] && t=${GPT2_SECONDS:-330}
if [ "$t" -ge 60 ]; then
	timeout "$t" python3 scripts/torch-bench.py lockstep gpt2 --configs "$GPT2_ARMS" --out "$out/ls.jsonl" \
		--blocks-out "$out/blocks.jsonl" --lib "$L" --control-lib "$C" --warmup 18 --block-steps 1 \
		--blocks "${GPT2_BLOCKS:-450}" --pairs "${GPT2_PAIRS:-2}" >>"$out/ls.log" 2>&1
	echo "gpt2 exit $? $(date -u +%T)" >>"$out/machine.txt"
	nvidia-smi --query-gpu=memory.used --format=csv,noheader >>"$out/machine.txt" 2>&1
fi
# 3. ResNet-50 with what is left (20 s kept for the tables and the
#    archive), at most RESNET_SECONDS (RESNET_SECONDS=0 skips it; unset,
#    240 when generation follows, else all that is left).
t=$(($(left) - 20))
if [ -n "${RESNET_SECONDS:-}" ] || [ -n "${GEN_ARMS:-}" ]; then
	[ "$t" -gt "${RESNET_SECONDS:-240}" ] && t=${RESNET_SECONDS:-240}
fi
if [ "$t" -ge 60 ]; then
	timeout "$t" python3 scripts/torch-bench.py lockstep resnet50 --configs "$RESNET_ARMS" --out "$out/ls.jsonl" \
		--blocks-out "$out/blocks.jsonl" --lib "$L" --control-lib "$C" --warmup 12 --block-steps 1 \
		--blocks "${RESNET_BLOCKS:-600}" --pairs "${RESNET_PAIRS:-1}" >>"$out/ls.log" 2>&1
	echo "resnet50 exit $? $(date -u +%T)" >>"$out/machine.txt"
else
	echo "resnet50 skipped: $t s left" >>"$out/machine.txt"
fi
# 4. Generation, when GEN_ARMS names its configurations, with what is left
#    (the time limit ends it: its step pairs are in blocks.jsonl).
t=$(($(left) - 20))
if [ -n "${GEN_ARMS:-}" ] && [ "$t" -ge 60 ]; then
	timeout "$t" python3 scripts/torch-bench.py lockstep generate --configs "$GEN_ARMS" --out "$out/ls.jsonl" \
		--blocks-out "$out/blocks.jsonl" --lib "$L" --control-lib "$C" --warmup 5 --block-steps 1 \
		--blocks 400 >>"$out/ls.log" 2>&1
	echo "generate exit $? $(date -u +%T)" >>"$out/machine.txt"
fi
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" >"$out/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" --ref cache >"$out/lockstep-table-vs-cache.md" 2>&1
python3 scripts/torch-bench.py table "$out/ls.jsonl" >"$out/table.md" 2>&1
[ -f "$out/smoke.jsonl" ] && python3 scripts/torch-bench.py table "$out/smoke.jsonl" >"$out/table-smoke.md" 2>&1
echo "done $(date -u +%T)" >>"$out/machine.txt"
tar -C "$out/.." -czf "$OUT/crossing.tgz" crossing && cp "$out/machine.txt" "$out/lockstep-table.md" "$out/lockstep-table-vs-cache.md" "$out/table.md" "$OUT/"
rm -rf "$out"
