//go:build !amd64

package cpuclock

// rdtsc is never called where there is no counter to read (tsc is false).
func rdtsc() uint64 { return 0 }

func invariantTSC() bool { return false }
