//go:build !race

package mr_test

// raceDetector reports whether the external tests run under the race
// detector, which makes them several times slower: large tests scale down.
const raceDetector = false
