#!/usr/bin/env bash
# Generation with a growing KV cache under the lockstep protocol, longer
# than more.sh could: native against the library as scripts/build-capi.sh
# links it with the empty configuration, for at most GEN_SECONDS.
# Built as lockstep.sh says; run there: cd DIR && OUT=... bash generate.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}/generate
mkdir -p "$out"
cd "$here" || exit 1
L=$here/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
unset STREAMALLOC_CONF
date -u >"$out/machine.txt"
timeout "${GEN_SECONDS:-480}" python3 scripts/torch-bench.py lockstep generate --configs 'native; streamalloc default' \
	--out "$out/ls.jsonl" --blocks-out "$out/blocks.jsonl" --lib "$L" --warmup 5 --block-steps 1 --blocks 400 >>"$out/ls.log" 2>&1
echo "generate exit $? $(date -u +%T)" >>"$out/machine.txt"
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" >"$out/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$out/ls.jsonl" >"$out/table.md" 2>&1
cp "$out/machine.txt" "$out/lockstep-table.md" "$out/table.md" "$OUT/"
tar -C "$out/.." -czf "$OUT/generate.tgz" generate && rm -rf "$out"
