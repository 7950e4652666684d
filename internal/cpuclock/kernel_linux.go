package cpuclock

import (
	"bytes"
	"os"
)

// kernelTrustsTSC reports whether Linux's clock source is the
// time-stamp counter: the kernel checks that the counters of all CPUs
// are in step (and under a hypervisor, that it keeps them so), and falls
// back to another source if they are not.
func kernelTrustsTSC() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(bytes.TrimSpace(b)) == "tsc"
}
