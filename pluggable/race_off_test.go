//go:build !race

package pluggable

// raceEnabled says whether the tests run under the race detector.
const raceEnabled = false
