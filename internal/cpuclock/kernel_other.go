//go:build !linux

package cpuclock

// kernelTrustsTSC has nothing to ask outside Linux: the CPU's own answer
// (invariantTSC) decides.
func kernelTrustsTSC() bool { return true }
