//go:build race

package tune_test

// raceEnabled: the race detector slows the simulator's replays about
// fortyfold, so the held-traces test replays one trace there.
const raceEnabled = true
