//go:build !race

package buf_test

const raceEnabled = false
