package cpuclock

// rdtsc reads the time-stamp counter (RDTSC; not serializing: it may run
// a few instructions early, which a clock of microsecond lines ignores).
func rdtsc() uint64

// cpuid executes CPUID with leaf in EAX and sub in ECX.
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// invariantTSC reports whether the CPU says its time-stamp counter is
// invariant: it ticks at one rate in every power state and frequency
// (CPUID 8000_0007h, EDX bit 8, on Intel and AMD alike).
func invariantTSC() bool {
	if max, _, _, _ := cpuid(0x8000_0000, 0); max < 0x8000_0007 {
		return false
	}
	_, _, _, d := cpuid(0x8000_0007, 0)
	return d&(1<<8) != 0
}
