//go:build streamalloc_vmmtrace

// Growth in place with a timing trace: built with the tag
// streamalloc_vmmtrace, Virtual writes one line on standard error for each
// commit of a growable allocation (the granules, the pieces it mapped and
// the time of its driver calls) and each reap that unmapped pieces. The
// tag exists only for that measurement (BENCHMARKS.md); no other build
// pays for it.

package mr

import (
	"fmt"
	"os"
	"time"
)

const vmmTraceOn = true

func vmmTrace(op string, granules, pieces int, start time.Time) {
	fmt.Fprintf(os.Stderr, "vmmtrace %d %s granules=%d pieces=%d us=%d\n",
		time.Now().UnixMicro(), op, granules, pieces, time.Since(start).Microseconds())
}
