#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the module for a short time each: the
# seeds run in every `go test`, this is the fuzzing itself. CI runs it
# (.ci/run) with the default time.
#
#   scripts/fuzz.sh [FUZZTIME] [PACKAGES...]
#
# FUZZTIME is go test's -fuzztime (default 100x: a hundred new inputs per
# target, about a minute for the module's targets on two cores, most of it
# building them). A count rather than a duration: with a duration, Go 1.26's
# fuzzing coordinator can fail a target with a bare "context deadline
# exceeded" when the time runs out, having found nothing and written no
# input (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to
# race, and a slow machine only takes longer. PACKAGES
# default to ./.... A new interesting input is minimized for at most 5 s
# (-fuzzminimizetime), so one slow minimization cannot take a run's whole
# time. A failure stops the script with go test's report and a non-zero
# status, and the input that failed is written under the package's
# testdata/fuzz, where `go test` replays it from then on.
#
# The targets are those `go test -list` names. When the whole module is
# fuzzed, the script then checks them against every `func Fuzz...` in the
# module's test files and fails if one was not run (a package whose tests
# do not build, or a target in a file the list does not see), so a new
# target cannot be left out of CI unnoticed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-100x}
shift || true
pkgs=("${@:-./...}")
module=$(go list -m)
ran=$(mktemp)
trap 'rm -f "$ran"' EXIT
for pkg in $(go list "${pkgs[@]}"); do
	targets=$(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	for target in $targets; do
		echo "== $pkg $target"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 5s "$pkg"
		rel=${pkg#"$module"}
		echo ".${rel}:${target}" >>"$ran"
	done
done
if [ $# -eq 0 ]; then
	missing=$(comm -23 \
		<(grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . |
			sed -e 's#/[^/]*_test\.go:func #:#' | sort -u) \
		<(sort -u "$ran"))
	if [ -n "$missing" ]; then
		echo "fuzz.sh: fuzz targets not run:" >&2
		echo "$missing" >&2
		exit 1
	fi
	echo "fuzz.sh: all $(sort -u "$ran" | wc -l) fuzz targets ran for $fuzztime each"
fi
