#!/usr/bin/env bash
# ResNet-50 and generation under the lockstep protocol with the library
# whose empty configuration is pluggable.Recommended (V below), beside
# native and the chunked pool: the two workloads the final call did not
# settle (ResNet-50 was not in it; generation ran out of time).
# Built here: scripts/build-capi.sh DIR/build/capi; cp -r python DIR/;
# mkdir DIR/scripts && cp scripts/*.py scripts/*.sh DIR/scripts/.
# Run there: OUT=... DIR/more.sh; everything is packed into $OUT/more.tgz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}/more
mkdir -p "$out"
{ date -u; nvidia-smi -L; nproc; } >"$out/machine.txt" 2>&1
cd "$here" || exit 1
L=$here/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
V='pool,upstream=vmm,mapped_slack,small_at_peak'
timeout 130 python3 scripts/torch-bench.py lockstep resnet50 --configs "native; streamalloc pool; streamalloc $V" \
	--out "$out/ls.jsonl" --blocks-out "$out/blocks.jsonl" --lib "$L" --warmup 12 --block-steps 1 --blocks 250 >>"$out/ls.log" 2>&1
echo "resnet50 exit $? $(date -u +%T)" >>"$out/machine.txt"
timeout 270 python3 scripts/torch-bench.py lockstep generate --configs "native; streamalloc $V" \
	--out "$out/ls.jsonl" --blocks-out "$out/blocks.jsonl" --lib "$L" --warmup 5 --block-steps 1 --blocks 100 >>"$out/ls.log" 2>&1
echo "generate exit $? $(date -u +%T)" >>"$out/machine.txt"
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" >"$out/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$out/ls.jsonl" >"$out/table.md" 2>&1
tar -C "$out/.." -czf "$out/../more.tgz" more && rm -rf "$out"
