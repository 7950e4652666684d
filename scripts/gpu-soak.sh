#!/usr/bin/env bash
# gpu-soak.sh runs the soak (streamalloc soak: Pool over Async, 16
# goroutines on their own streams, every allocation filled and checked by a
# kernel, hand-offs between streams behind events and through buf) on a
# machine with an NVIDIA GPU, and keeps its log.
#
# Build here (Go and gcc; the binary loads libcuda.so.1 at run time):
#     go build -o .gpubin/streamalloc ./cmd/streamalloc
# Run there (no Go needed):
#     scripts/gpu-soak.sh [DURATION] [BINARY]      default 10m, .gpubin/streamalloc
#
# The log, a line per minute and the summary, goes to standard output and
# to $OUT/soak-DATE.log (or .gpubin/logs). The exit status is the soak's:
# 0 only if no word was corrupted, no byte leaked, the device got all its
# memory back and the counters agree. Extra flags for streamalloc soak go in
# SOAK_FLAGS (say SOAK_FLAGS='--goroutines 32 --max-size 16777216').
set -uo pipefail
duration=${1:-10m}
bin=${2:-.gpubin/streamalloc}
logs=${OUT:-.gpubin/logs}
mkdir -p "$logs"
log="$logs/soak-$(date -u +%Y-%m-%dT%H%M%SZ).log"
{
	echo "# $(date -u), $(uname -srm)"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
	"$bin" info --device cuda
} >"$log" 2>&1
# shellcheck disable=SC2086
"$bin" soak --device cuda --duration "$duration" ${SOAK_FLAGS:-} 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
echo "log: $log (exit $status)"
exit "$status"
