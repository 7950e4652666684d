#!/usr/bin/env bash
# html-check.sh: prove that the replay report renders in a real browser.
#
# Builds the HTML report of the three traces in replay/testdata replayed on
# the simulator with async and pool, opens it in headless Chromium and checks
# what the browser made of it:
#   1. --dump-dom of a copy of the page with a probe script appended (the page
#      itself has no script): the browser's own layout gives every path of each
#      chart its length; each chart must have the live line (black) and one
#      reserved line per resource (the palette's first colors), each a long
#      path of many segments, and a legend naming live, async, pool;
#   2. a screenshot (PNG) that is not blank and shows pixels of each line
#      color (report/internal/pngcheck, Go's image/png).
#
# The page comes from `streamalloc replay --html`, or, when the command does
# not build, from the report package's test that writes the same page
# (STREAMALLOC_REPORT_HTML). Installs Chromium and the Liberation fonts with
# apt-get when missing (as root, or through sudo). Not part of `go test`:
# CI has no browser.
#
#   scripts/html-check.sh [OUTDIR]          # default OUTDIR: a new temp dir
#   scripts/html-check.sh --update-doc      # also copy the screenshot of the
#                                           # first trace to docs/img/replay-report.png
#   HTML_CHECK_PAGE=page.html scripts/html-check.sh   # check that page instead
set -euo pipefail

cd "$(dirname "$0")/.."
update_doc=0
out=""
for a in "$@"; do
	case "$a" in
	--update-doc) update_doc=1 ;;
	-h | --help) sed -n '2,24p' "$0"; exit 0 ;;
	*) out="$a" ;;
	esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/html-check.XXXXXX)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# --- Chromium -----------------------------------------------------------------
if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -q "Liberation Sans"; then
	echo "html-check: installing chromium and fonts-liberation" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium fonts-liberation >/dev/null
fi
chromium --version 2>/dev/null # (Debian's wrapper prints a harmless shell error on stderr)

browser() {
	# As root Chromium needs --no-sandbox; the network flags keep it from
	# calling home (this machine has no network but the module proxy).
	local udd
	udd=$(mktemp -d)
	timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--user-data-dir="$udd" --hide-scrollbars --force-device-scale-factor=1 "$@" 2>"$out/chromium.log"
	rm -rf "$udd"
}

# --- The page -----------------------------------------------------------------
traces=(replay/testdata/torch-pipeline-2stream-b.csv.gz replay/testdata/torch-serve-varlen-b.csv.gz replay/testdata/torch-train-gpt-b.csv.gz)
page="$out/report.html"
from_test() {
	STREAMALLOC_REPORT_HTML="$page" go test -count=1 -run '^TestPageFromSharedTraces$' ./report >/dev/null
}
if [ -n "${HTML_CHECK_PAGE:-}" ]; then
	# Check a page made elsewhere (it must chart async and pool for the
	# three traces); used to see the checks fail on a broken page.
	echo "html-check: page from HTML_CHECK_PAGE=$HTML_CHECK_PAGE"
	cp "$HTML_CHECK_PAGE" "$page"
elif ! go build -o "$out/streamalloc" ./cmd/streamalloc || ! "$out/streamalloc" replay --help 2>/dev/null | grep -q -- "--html"; then
	echo "html-check: streamalloc does not build or its replay has no --html; page from go test ./report -run TestPageFromSharedTraces"
	from_test
elif "$out/streamalloc" replay --device sim --resource async,pool --html "$page" "${traces[@]}" >"$out/replay.txt" 2>"$out/replay.err"; then
	echo "html-check: page from streamalloc replay --device sim --resource async,pool --html"
	cat "$out/replay.txt"
else
	cat "$out/replay.err" >&2
	exit 1
fi
[ -s "$page" ] || { echo "html-check: no page at $page" >&2; exit 1; }
echo "html-check: page $page ($(wc -c <"$page") bytes)"

# --- 1. The DOM, with path lengths from the browser's layout ----------------------
probe="$out/report-probe.html"
python3 - "$page" "$probe" <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
(function () {
  var charts = [];
  document.querySelectorAll("figure.chart svg").forEach(function (svg) {
    var vb = svg.viewBox.baseVal, paths = [];
    svg.querySelectorAll("path").forEach(function (p) {
      paths.push({stroke: getComputedStyle(p).stroke, length: p.getTotalLength(),
                  segments: (p.getAttribute("d").match(/L/g) || []).length});
    });
    var r = svg.getBoundingClientRect();
    charts.push({width: vb.width, shownWidth: r.width, shownHeight: r.height, paths: paths,
                 texts: Array.from(svg.querySelectorAll("text"), function (t) { return t.textContent; })});
  });
  var pre = document.createElement("pre");
  pre.id = "html-check";
  pre.textContent = JSON.stringify(charts);
  document.body.appendChild(pre);
})();
</script>
"""
assert page.count("</body>") == 1, "page has no single </body>"
open(sys.argv[2], "w", encoding="utf-8").write(page.replace("</body>", probe + "</body>"))
EOF
browser --dump-dom "file://$probe" >"$out/dom.html"
python3 - "$out/dom.html" "${#traces[@]}" <<'EOF'
import html, json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
want_charts = int(sys.argv[2])
m = re.search(r'<pre id="html-check">(.*?)</pre>', dom, re.S)
if not m:
    sys.exit("html-check: the probe did not run (no #html-check in the DOM)")
charts = json.loads(html.unescape(m.group(1)))
errors = []
if len(charts) != want_charts or dom.count("<svg") != want_charts:
    errors.append("%d charts (%d <svg> in the DOM), want %d" % (len(charts), dom.count("<svg"), want_charts))
lines = {"live": "rgb(0, 0, 0)", "async": "rgb(0, 114, 178)", "pool": "rgb(213, 94, 0)"}
for i, c in enumerate(charts):
    if c["shownWidth"] < 300 or c["shownHeight"] < 150:
        errors.append("chart %d shown %.0fx%.0f px" % (i, c["shownWidth"], c["shownHeight"]))
    if c["texts"][-3:] != list(lines):
        errors.append("chart %d legend %s, want %s" % (i, c["texts"][-3:], list(lines)))
    for name, stroke in lines.items():
        # A step line over the whole replay: many segments and longer than
        # half the chart's width (in the SVG's own units).
        best = max([p["length"] for p in c["paths"] if p["stroke"] == stroke and p["segments"] > 50] or [0])
        print("chart %d: %-5s line length %.0f (chart width %.0f)" % (i, name, best, c["width"]))
        if best <= c["width"] / 2:
            errors.append("chart %d: no rendered %s line" % (i, name))
if errors:
    sys.exit("html-check: " + "; ".join(errors))
print("html-check: DOM ok: %d charts, each with live, async and pool lines" % len(charts))
EOF

# --- 2. Screenshots -------------------------------------------------------------
browser --window-size=1000,2000 --screenshot="$out/report.png" "file://$page" >/dev/null
go run ./report/internal/pngcheck -colors '#000000,#0072B2,#D55E00' -min-pixels 500 "$out/report.png"
# The first trace only (title, chart, table): the picture for the docs.
browser --window-size=960,740 --screenshot="$out/replay-report.png" "file://$page" >/dev/null
go run ./report/internal/pngcheck -colors '#000000,#0072B2,#D55E00' -min-pixels 150 "$out/replay-report.png"
if [ "$update_doc" = 1 ]; then
	mkdir -p docs/img
	cp "$out/replay-report.png" docs/img/replay-report.png
	echo "html-check: updated docs/img/replay-report.png"
fi
echo "html-check: OK ($out)"
