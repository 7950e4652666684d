//go:build !streamalloc_vmmtrace

// Growth in place without its timing trace (virtual_trace_on.go): the
// build tag streamalloc_vmmtrace exists only to measure where Virtual's
// commits and decommits spend their time under a real workload.

package mr

import "time"

const vmmTraceOn = false

func vmmTrace(op string, granules, pieces int, start time.Time) {}
