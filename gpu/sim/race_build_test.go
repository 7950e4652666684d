//go:build race

package sim_test

// raceBuild reports whether the tests were built with -race.
const raceBuild = true
