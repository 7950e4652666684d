#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the module for a short time each: the
# seeds run in every `go test`, this is the fuzzing itself.
#
#   scripts/fuzz.sh [FUZZTIME] [PACKAGES...]
#
# FUZZTIME is go test's -fuzztime (default 5s); PACKAGES default to ./....
# A new interesting input is minimized for at most 5 s (-fuzzminimizetime),
# so one slow minimization cannot take a run's whole time. A failure stops
# the script with go test's report, and the input that failed is written
# under the package's testdata/fuzz, where `go test` replays it from then
# on.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-5s}
shift || true
pkgs=("${@:-./...}")
for pkg in $(go list "${pkgs[@]}"); do
	targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for target in $targets; do
		echo "== $pkg $target"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$pkg"
	done
done
