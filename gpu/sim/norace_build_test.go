//go:build !race

package sim_test

const raceBuild = false
