// Failure reporting that survives testing.Benchmark.
//
// testing.Benchmark runs a benchmark with its output discarded, so a
// b.Fatal message would be lost to a caller outside go test. Every
// failure in this package goes through fatalf or errorf, which keep the
// first error of each *testing.B in failures before failing it the usual
// way; Run takes that error back out. Under go test the log carries the
// message as always, and the map keeps one small entry per failed
// benchmark.

package bench

import (
	"fmt"
	"sync"
	"testing"
)

// failures maps a *testing.B to the first error recorded for it.
var failures sync.Map

// fatalf records the error and stops the benchmark (b.Fatal). It must be
// called from the benchmark's goroutine.
func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	err := fmt.Errorf(format, args...)
	failures.LoadOrStore(b, err)
	b.Fatal(err)
}

// errorf records the error and marks the benchmark failed without
// stopping it (b.Error): for cleanups, which must all run.
func errorf(b *testing.B, format string, args ...any) {
	b.Helper()
	err := fmt.Errorf(format, args...)
	failures.LoadOrStore(b, err)
	b.Error(err)
}

// takeFailure removes and returns the error recorded for b, if any.
func takeFailure(b *testing.B) error {
	if v, ok := failures.LoadAndDelete(b); ok {
		return v.(error)
	}
	return nil
}
