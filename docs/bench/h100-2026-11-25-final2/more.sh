#!/usr/bin/env bash
# The final tree's library on generation and CuPy under the lockstep
# protocol: native (CuPy's own pool for CuPy) against the library as
# scripts/build-capi.sh links it with the empty configuration.
# Built as lockstep.sh says; run there: cd DIR && OUT=... bash more.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?}/more
mkdir -p "$out"
cd "$here" || exit 1
L=$here/build/capi/libstreamalloc.so
export PYTHONUNBUFFERED=1
unset STREAMALLOC_CONF
date -u >"$out/machine.txt"
timeout 40 python3 scripts/torch-bench.py lockstep cupy --configs 'cupy-pool; streamalloc default' --out "$out/ls.jsonl" \
	--blocks-out "$out/blocks.jsonl" --lib "$L" --warmup 10 --block-steps 5 --blocks 100 >>"$out/ls.log" 2>&1
echo "cupy exit $? $(date -u +%T)" >>"$out/machine.txt"
timeout 120 python3 scripts/torch-bench.py lockstep generate --configs 'native; streamalloc default' --out "$out/ls.jsonl" \
	--blocks-out "$out/blocks.jsonl" --lib "$L" --warmup 5 --block-steps 1 --blocks 80 >>"$out/ls.log" 2>&1
echo "generate exit $? $(date -u +%T)" >>"$out/machine.txt"
python3 scripts/torch-bench.py lockstep-table "$out/blocks.jsonl" >"$out/lockstep-table.md" 2>&1
python3 scripts/torch-bench.py table "$out/ls.jsonl" >"$out/table.md" 2>&1
cp "$out/machine.txt" "$out/lockstep-table.md" "$out/table.md" "$OUT/"
tar -C "$out/.." -czf "$OUT/more.tgz" more && rm -rf "$out"
