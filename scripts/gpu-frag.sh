#!/usr/bin/env bash
# gpu-frag.sh replays, on a machine with an NVIDIA GPU, every trace of
# replay/testdata, pluggable/testdata and testdata/traces on the chunked
# pool (over async) and on the pool growing in place over Virtual
# (pool_vmm), once on the card and once on the simulator, and prints peak
# reserved over peak live for each with whether the two devices agree to
# the byte; then the tests that pin pool_vmm's figures
# (replay's TestPoolVirtualRecordedTraces, mr's TestPoolVirtualTraces)
# on the card.
#
# Build here:  scripts/gpu-build.sh ./replay ./mr
#              go build -o .gpubin/streamalloc ./cmd/streamalloc
# Copy .gpubin/ and the folders the traces and tests read (replay/testdata,
# pluggable/testdata, testdata/traces, mr/testdata), then run there, from
# the folder that holds them (no Go needed):
#              scripts/gpu-frag.sh [.gpubin]     (logs in $OUT or .gpubin/logs)
set -uo pipefail
bin=${1:-.gpubin}
out=${OUT:-$bin/logs}
mkdir -p "$out"
exe=$bin/streamalloc
if [ ! -x "$exe" ] && [ -f "$exe.gz" ]; then
	gzip -dc "$exe.gz" >"$exe" && chmod +x "$exe"
fi
traces=(replay/testdata/*.csv.gz pluggable/testdata/*.csv.gz testdata/traces/*.gz)
status=0
for dev in cuda sim; do
	echo "== replay on $dev"
	"$exe" replay --device "$dev" --resource pool,pool_vmm --json "${traces[@]}" >"$out/frag-$dev.json" 2>"$out/frag-$dev.err" || status=1
done
python3 - "$out/frag-cuda.json" "$out/frag-sim.json" <<'PY' | tee "$out/frag.txt" || status=1
import json, sys
card = {(r["trace"].split("/")[-1], r["resource"]): r for r in json.load(open(sys.argv[1]))}
sim = {(r["trace"].split("/")[-1], r["resource"]): r for r in json.load(open(sys.argv[2]))}
bad = 0
print("%-36s %-9s %14s %14s %9s %9s  %s" % ("trace", "resource", "peak reserved", "peak live", "card", "sim", "same bytes"))
for k in sorted(card, key=lambda k: (k[1], k[0])):
    c, s = card[k], sim.get(k)
    same = s is not None and c["peak_reserved_bytes"] == s["peak_reserved_bytes"] and c["peak_live_bytes"] == s["peak_live_bytes"]
    bad += not same
    print("%-36s %-9s %14d %14d %9.4f %9s  %s" % (k[0], k[1], c["peak_reserved_bytes"], c["peak_live_bytes"], c["fragmentation"],
          "%.4f" % s["fragmentation"] if s else "-", "yes" if same else "NO"))
print("%d of %d differ" % (bad, len(card)))
sys.exit(1 if bad else 0)
PY
TEST_TIMEOUT=4m TEST_RUN='TestPoolVirtualRecordedTraces' "$bin/run.sh" test replay || status=1
TEST_TIMEOUT=4m TEST_RUN='TestPoolVirtualTraces' "$bin/run.sh" test mr || status=1
exit $status
