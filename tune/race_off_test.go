//go:build !race

package tune_test

const raceEnabled = false
