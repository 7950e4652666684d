//go:build race

package buf_test

const raceEnabled = true
