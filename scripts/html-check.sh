#!/usr/bin/env bash
# html-check.sh: check the replay viewer as a person would, in headless
# Chromium, against the replay's own JSON.
#
# Replays the three traces of replay/testdata on the simulator with async,
# pool and arena (`streamalloc replay --json --html`), opens the page in
# Debian's chromium through playwright-core (scripts/viewer-check, pinned by
# its package-lock.json) and checks, for every trace and resource: the
# reserved line's highest pixels in a screenshot lie where the JSON's peak
# lies on the chart's axes; wheel zoom and drag keep the peak in view and
# hovering its events shows the peak's exact bytes; the active memory's top
# is the peak live bytes and names a block; clicking the peak opens the
# segments of that moment, whose bytes (for pool) are the reserved bytes.
# Also: no request leaves the file, no console error, the summary table has
# the JSON's peaks, the simulated banner. Fails (exit 1) on any difference.
#
# Installs chromium and fonts-liberation with apt-get when missing (as root,
# or through sudo), and the node packages with npm ci.
#
#   scripts/html-check.sh [OUTDIR]          # default OUTDIR: a new temp dir
#   scripts/html-check.sh --large N         # also a generated trace of N events
#                                           # (report/internal/gentrace): page
#                                           # size, load and render time
#   scripts/html-check.sh --update-doc      # copy the first trace's picture to
#                                           # docs/img/replay-viewer.png
#   HTML_CHECK_PAGE=page.html HTML_CHECK_JSON=results.json scripts/html-check.sh
#                                           # check that page instead (to see
#                                           # the check fail on a broken one)
set -euo pipefail

cd "$(dirname "$0")/.."
update_doc=0 large=0 out=""
while [ $# -gt 0 ]; do
	case "$1" in
	--update-doc) update_doc=1 ;;
	--large) large="$2"; shift ;;
	-h | --help) sed -n '2,28p' "$0"; exit 0 ;;
	*) out="$1" ;;
	esac
	shift
done
[ -n "$out" ] || out=$(mktemp -d /tmp/html-check.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)
started=$(date +%s)

# --- Chromium and the node packages -------------------------------------------
if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -q "Liberation Sans"; then
	echo "html-check: installing chromium and fonts-liberation" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
echo "html-check: $(chromium --version 2>/dev/null | head -1)"
(cd scripts/viewer-check && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

# --- The page and the JSON ------------------------------------------------------
go build -o "$out/streamalloc" ./cmd/streamalloc
if [ -n "${HTML_CHECK_PAGE:-}" ]; then
	cp "$HTML_CHECK_PAGE" "$out/page.html"
	cp "${HTML_CHECK_JSON:?set HTML_CHECK_JSON to the results of the page}" "$out/results.json"
else
	"$out/streamalloc" replay --device sim --resource async,pool,arena --json --html "$out/page.html" \
		replay/testdata/torch-pipeline-2stream-b.csv.gz replay/testdata/torch-serve-varlen-b.csv.gz \
		replay/testdata/torch-train-gpt-b.csv.gz >"$out/results.json"
fi
echo "html-check: page $out/page.html ($(wc -c <"$out/page.html") bytes)"
node scripts/viewer-check/check.mjs "$out/page.html" "$out/results.json" "$out"

if [ "$large" -gt 0 ]; then
	mkdir -p "$out/large"
	go run ./report/internal/gentrace -n "$large" >"$out/large/trace.csv"
	t0=$(date +%s%N)
	"$out/streamalloc" replay --device sim --resource pool,async --json --html "$out/large/page.html" \
		"$out/large/trace.csv" >"$out/large/results.json"
	t1=$(date +%s%N)
	echo "html-check: large trace of $large events: replay and page in $(((t1 - t0) / 1000000)) ms, page $(wc -c <"$out/large/page.html") bytes"
	node scripts/viewer-check/check.mjs "$out/large/page.html" "$out/large/results.json" "$out/large"
	echo "html-check: large page timing (ms): $(cat "$out/large/timing.json")"
fi

if [ "$update_doc" = 1 ]; then
	mkdir -p docs/img
	cp "$out/doc.png" docs/img/replay-viewer.png
	echo "html-check: updated docs/img/replay-viewer.png"
fi
echo "html-check: OK in $(($(date +%s) - started)) s ($out)"
