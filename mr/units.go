// Byte counts as a person reads them: binary (IEC) units, as nvidia-smi
// and PyTorch's memory_summary print them.
//
// FormatBytes is what every String method, the summary and the
// out-of-memory errors of this package print, so a number reads the same
// wherever a user meets it.

package mr

import "strconv"

// FormatBytes renders n bytes in IEC units: "0 B", "1023 B", "1.5 KiB",
// "80.0 GiB". Below 1 KiB it prints the exact count; above, one decimal,
// rounded to nearest (so 1.96 GiB prints as "2.0 GiB").
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	const prefixes = "KMGTPE"
	exp := 0
	div := float64(unit)
	// Round first, so that 1023.96 KiB prints as 1.0 MiB, not 1024.0 KiB.
	for exp < len(prefixes)-1 && float64(n)/div >= unit-0.05 {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/div, 'f', 1, 64) + " " + prefixes[exp:exp+1] + "iB"
}
