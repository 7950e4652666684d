#!/usr/bin/env bash
# gpu-test.sh: on a machine with both Go and an NVIDIA GPU, build the test
# binaries (scripts/gpu-build.sh) and run them there (.gpubin/run.sh).
#
# Usage: scripts/gpu-test.sh [test|bench] [package patterns...]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=test
case "${1:-}" in
test | bench) mode=$1; shift ;;
esac
scripts/gpu-build.sh "$@"
exec .gpubin/run.sh "$mode"
