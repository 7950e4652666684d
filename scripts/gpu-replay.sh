#!/usr/bin/env bash
# gpu-replay.sh measures two things on a machine with an NVIDIA GPU:
#
#  1. Timed replay on the card: streamalloc replay --timed replays each
#     trace on async and pool twice, as fast as it can and in the trace's
#     own time (each stream's gaps enqueued as spin kernels), and the same
#     on the simulator for comparison.
#  2. Replay at scale on the host: a generated RMM log of 10 million events
#     with 200,000 blocks live at its peak on 10,000 streams, replayed on the
#     pool (over async) on the simulator, on one core (taskset -c 0,
#     GOMAXPROCS=1), with its events per second, its peak RSS and a CPU
#     profile.
#
# Build here (Go and gcc; the binary loads libcuda.so.1 at run time):
#     go build -o DIR/streamalloc ./cmd/streamalloc
#     go build -o DIR/gentrace ./report/internal/gentrace
# Run there (no Go needed), traces default to replay/testdata's pipeline:
#     scripts/gpu-replay.sh DIR [TRACE...]
# Logs, JSON and the profile go to $OUT (or DIR/logs). SCALE_EVENTS,
# SCALE_LIVE and SCALE_STREAMS change the generated log.
set -uo pipefail
dir=${1:?usage: gpu-replay.sh DIR [TRACE...]}
shift
traces=("$@")
[ ${#traces[@]} -gt 0 ] || traces=(replay/testdata/torch-pipeline-2stream-b.csv.gz)
out=${OUT:-$dir/logs}
mkdir -p "$out"
log="$out/replay.log"
status=0
{
	echo "# $(date -u), $(uname -srm), $(nproc) cores"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
	lscpu 2>/dev/null | grep -E 'Model name|L3' || true
} >"$log" 2>&1

for dev in cuda sim; do
	echo "== timed replay on $dev" | tee -a "$log"
	"$dir/streamalloc" replay --device "$dev" --resource async,pool --timed --json "${traces[@]}" >"$out/timed-$dev.json" 2>>"$log" || status=1
	python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("%-40s %-14s peak reserved %14d  fragmentation %.3f  %6.0f ns/event (own %6.0f)  wall %6.2f s  behind %7.2f ms" % (
        r["trace"].split("/")[-1], r["resource"], r["peak_reserved_bytes"], r["fragmentation"], r["ns_per_event"],
        r["own_ns_per_event"], r["wall_ns"] / 1e9, r.get("timed_behind_ns", 0) / 1e6))
' "$out/timed-$dev.json" 2>&1 | tee -a "$log"
done

n=${SCALE_EVENTS:-10000000} live=${SCALE_LIVE:-200000} streams=${SCALE_STREAMS:-10000}
scale=$(mktemp -d)/scale.csv
echo "== replay at scale: $n events, $live live, $streams streams" | tee -a "$log"
t0=$(date +%s%N)
"$dir/gentrace" -n "$n" -live "$live" -streams "$streams" >"$scale" || status=1
echo "generated $(stat -c %s "$scale") bytes in $((($(date +%s%N) - t0) / 1000000)) ms" | tee -a "$log"
# Peak RSS from getrusage of the child, in KiB.
GOMAXPROCS=1 python3 - "$dir/streamalloc" "$scale" "$out/scale.pprof" "$out/scale.json" <<'PY' 2>&1 | tee -a "$log" || status=1
import resource, subprocess, sys, time, os
exe, trace, prof, js = sys.argv[1:]
t = time.time()
with open(js, "w") as f:
    r = subprocess.run(["taskset", "-c", "0", exe, "replay", "--device", "sim", "--resource", "pool",
                        "--json", "--cpuprofile", prof, trace], stdout=f, timeout=int(os.environ.get("SCALE_TIMEOUT", "600")))
wall = time.time() - t
print("exit", r.returncode, "wall %.1f s, peak RSS %d MiB" % (wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10))
sys.exit(r.returncode)
PY
python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("%s on %s (over %s): %d events, %d streams, peak live %d, peak reserved %d, %.0f ns/event (own %.0f, upstream %.0f), wall %.1f s: %.2f M events/s" % (
        r["trace"], r["resource"], r.get("upstream", "-"), r["events"], r["streams"], r["peak_live_bytes"], r["peak_reserved_bytes"],
        r["ns_per_event"], r["own_ns_per_event"], r["upstream_ns_per_event"], r["wall_ns"] / 1e9, r["events"] / r["wall_ns"] * 1e3))
' "$out/scale.json" 2>&1 | tee -a "$log"
rm -f "$scale"
echo "log: $log (exit $status)"
exit "$status"
