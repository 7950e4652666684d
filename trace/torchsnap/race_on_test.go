//go:build race

package torchsnap

// raceEnabled says whether the tests run under the race detector.
const raceEnabled = true
