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
# SOAK_FLAGS (say SOAK_FLAGS='--goroutines 32 --max-size 16777216');
# SOAK_DEVICE picks the backend (default cuda; sim tries the script here).
#
# Where one command may run for less than the soak (a remote runner that
# stops each command after 10 minutes, say), start it detached and collect
# it with a second command:
#     SOAK_DETACH=1 scripts/gpu-soak.sh 10m BINARY   # returns at once
#     scripts/gpu-soak.sh wait [SECONDS]             # waits (default 590 s)
# The detached run survives its command (setsid) and writes under
# SOAK_DIR (default /tmp/streamalloc-soak); wait copies its log to $OUT (or
# .gpubin/logs) and exits with the soak's status, or 124 if it is still
# running when SECONDS have passed.
set -uo pipefail
dir=${SOAK_DIR:-/tmp/streamalloc-soak}
logs=${OUT:-.gpubin/logs}
if [ "${1:-}" = wait ]; then
	deadline=$((SECONDS + ${2:-590}))
	while [ ! -e "$dir/status" ] && [ $SECONDS -lt $deadline ]; do
		sleep 2
	done
	mkdir -p "$logs"
	cp "$dir"/soak-*.log "$logs"/ 2>/dev/null
	tail -n 6 "$dir"/soak-*.log 2>/dev/null
	[ -e "$dir/status" ] || { echo "gpu-soak: still running after ${2:-590} s" >&2; exit 124; }
	exit "$(cat "$dir/status")"
fi
duration=${1:-10m}
bin=${2:-.gpubin/streamalloc}
if [ "${SOAK_DETACH:-}" = 1 ]; then
	rm -rf "$dir"
	mkdir -p "$dir"
	OUT=$dir SOAK_DETACH= setsid nohup "$0" "$duration" "$bin" >"$dir/console" 2>&1 </dev/null &
	echo "gpu-soak: started, pid $!; collect with: $0 wait"
	exit 0
fi
mkdir -p "$logs"
log="$logs/soak-$(date -u +%Y-%m-%dT%H%M%SZ).log"
{
	echo "# $(date -u), $(uname -srm)"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
	"$bin" info --device "${SOAK_DEVICE:-cuda}"
} >"$log" 2>&1
# shellcheck disable=SC2086
"$bin" soak --device "${SOAK_DEVICE:-cuda}" --duration "$duration" ${SOAK_FLAGS:-} 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
echo "log: $log (exit $status)"
# A detached run (its logs are SOAK_DIR) leaves its status for wait.
[ "$logs" = "$dir" ] && echo "$status" >"$dir/status.tmp" && mv "$dir/status.tmp" "$dir/status"
exit "$status"
