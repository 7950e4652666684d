//go:build !race

package mr

// raceEnabled reports whether the tests run under the race detector,
// which makes them several times slower: large tests scale down.
const raceEnabled = false
