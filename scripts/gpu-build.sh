#!/usr/bin/env bash
# gpu-build.sh builds, on a machine with Go (no GPU needed), a test binary
# for every package that has tests, into .gpubin/, together with the
# runner .gpubin/run.sh (a copy of scripts/gpu-run.sh). Copy .gpubin/ and
# the source tree (tests read their testdata from their package folder) to
# any Linux x86-64 machine with an NVIDIA driver, and run
#
#     .gpubin/run.sh            # every test binary, STREAMALLOC_DEVICE=cuda
#     .gpubin/run.sh bench      # the GPU benchmarks, -test.count=6
#
# No Go is needed there: the binaries load libcuda.so.1 at run time.
#
# Usage: scripts/gpu-build.sh [package patterns...]   (default ./...)
#   GPU_BUILD_RACE=1     build with -race
#   GPU_BUILD_KEEP_GOING=1  build what builds, list what did not, exit 1
#
# The binaries are stripped and gzipped to keep .gpubin/ small enough to
# travel; run.sh unpacks them on first use.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=.gpubin
module=$(go list -m)
patterns=("$@")
[ ${#patterns[@]} -eq 0 ] && patterns=(./...)

flags=(-ldflags=-s\ -w)
[ "${GPU_BUILD_RACE:-}" = 1 ] && flags+=(-race)

rm -rf "$out"
mkdir -p "$out"
: >"$out/MANIFEST"
failed=()
# Packages with tests: name in .gpubin, import path, folder in the tree.
while read -r path dir; do
	[ -n "$path" ] || continue
	rel=${path#"$module"}
	rel=${rel#/}
	name=${rel//\//_}
	[ -n "$name" ] || name=root
	reldir=${dir#"$root"}
	reldir=${reldir#/}
	[ -n "$reldir" ] || reldir=.
	if go test -c "${flags[@]}" -o "$out/$name.test" "$path"; then
		gzip -9 -n "$out/$name.test"
		printf '%s %s %s\n' "$name" "$reldir" "$path" >>"$out/MANIFEST"
		echo "built $name"
	else
		failed+=("$path")
		[ "${GPU_BUILD_KEEP_GOING:-}" = 1 ] || { echo "gpu-build: $path does not build" >&2; exit 1; }
	fi
done < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "${patterns[@]}")

cp scripts/gpu-run.sh "$out/run.sh"
chmod +x "$out/run.sh"
{
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +dirty)"
	go version
} >"$out/BUILDINFO"
du -sh "$out" | awk '{print "gpu-build: .gpubin is " $1}'
if [ ${#failed[@]} -gt 0 ]; then
	echo "gpu-build: did not build: ${failed[*]}" >&2
	exit 1
fi
