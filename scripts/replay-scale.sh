#!/usr/bin/env bash
# replay-scale.sh compares streamalloc binaries on the replay at scale: a
# generated RMM log (10 million events, 200,000 blocks live at its peak,
# 10,000 streams by default) replayed on the pool over async on the
# simulator, on one core (taskset -c 0, GOMAXPROCS=1). Each binary runs
# ROUNDS times (2 by default), interleaved (A B A B), so that a change in
# the machine's load shows in both; each run reports its wall time, events
# per second and peak RSS (getrusage of the child). The last binary then
# runs once more with --cpuprofile.
#
# Build here:
#     go build -o DIR/gentrace ./report/internal/gentrace
#     go build -o DIR/sa-NAME ./cmd/streamalloc     # one per tree compared
# Run there (no Go needed):
#     scripts/replay-scale.sh DIR DIR/sa-old DIR/sa-new
# Logs, JSON and the profile go to $OUT (or DIR/logs). SCALE_EVENTS,
# SCALE_LIVE, SCALE_STREAMS and ROUNDS change the log and the rounds.
set -uo pipefail
dir=${1:?usage: replay-scale.sh DIR BIN...}
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$dir/streamalloc")
out=${OUT:-$dir/logs}
mkdir -p "$out"
log="$out/scale.log"
status=0
{
	echo "# $(date -u), $(uname -srm), $(nproc) cores"
	lscpu 2>/dev/null | grep -E 'Model name|L3' || true
} >"$log" 2>&1

n=${SCALE_EVENTS:-10000000} live=${SCALE_LIVE:-200000} streams=${SCALE_STREAMS:-10000}
scale=$(mktemp -d)/scale.csv
echo "== $n events, $live live, $streams streams" | tee -a "$log"
"$dir/gentrace" -n "$n" -live "$live" -streams "$streams" >"$scale" || status=1
echo "generated $(stat -c %s "$scale") bytes" | tee -a "$log"

# run BIN NAME [EXTRA...]: one replay, its line in the log.
run() {
	local exe=$1 name=$2
	shift 2
	GOMAXPROCS=1 python3 - "$exe" "$scale" "$out/$name.json" "$@" <<'PY' 2>&1 | tee -a "$log" || status=1
import json, resource, subprocess, sys, time
exe, trace, js, *extra = sys.argv[1:]
t = time.time()
with open(js, "w") as f:
    r = subprocess.run(["taskset", "-c", "0", exe, "replay", "--device", "sim", "--resource", "pool",
                        "--json", *extra, trace], stdout=f, timeout=300)
wall = time.time() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
res = json.load(open(js))[0] if r.returncode == 0 else {}
print("%-28s exit %d  wall %5.2f s  %5.2f M events/s  peak RSS %4d MiB  %5.0f ns/event (own %5.0f)" % (
    js.split("/")[-1], r.returncode, wall, res.get("events", 0) / wall / 1e6, rss,
    res.get("ns_per_event", 0), res.get("own_ns_per_event", 0)))
sys.exit(r.returncode)
PY
}

for round in $(seq 1 "${ROUNDS:-2}"); do
	for b in "${bins[@]}"; do
		run "$b" "$(basename "$b")-$round"
	done
done
last=${bins[${#bins[@]}-1]}
run "$last" "$(basename "$last")-profile" --cpuprofile "$out/$(basename "$last").pprof"
rm -f "$scale"
echo "log: $log (exit $status)"
exit "$status"
