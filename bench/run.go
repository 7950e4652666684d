// Running cases outside go test: testing.Benchmark, the benchtime it
// reads, and the error of a failed case.

package bench

import (
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// benchtimeFlag is the testing package's flag that testing.Benchmark
// reads for how long (or how many times) to run.
const benchtimeFlag = "test.benchtime"

// SetBenchtime sets how long Run runs each case: a duration ("1s",
// "200ms") or a count of iterations ("100x"), as go test's -benchtime. It
// registers the testing flags if the program has not (testing.Init), and
// returns a function that restores the previous value. A bad value
// changes nothing and returns an error.
func SetBenchtime(v string) (restore func(), err error) {
	testing.Init()
	f := flag.Lookup(benchtimeFlag)
	if f == nil {
		return nil, fmt.Errorf("bench: the testing package has no -%s flag", benchtimeFlag)
	}
	old := f.Value.String()
	if err := f.Value.Set(v); err != nil {
		return nil, fmt.Errorf("%q is not a duration like 1s or a count like 100x (%v)", v, err)
	}
	return func() { f.Value.Set(old) }, nil
}

// Run runs c on dev through testing.Benchmark, for the benchtime in
// effect (see SetBenchtime), and returns the result. If the case failed,
// the error says which case and why.
func Run(c Case, dev gpu.Device) (testing.BenchmarkResult, error) {
	res, err := benchmark(func(b *testing.B) { c.Run(b, dev) })
	if err != nil {
		return res, fmt.Errorf("%s: %w", c.FullName(), err)
	}
	return res, nil
}

// benchmark is testing.Benchmark(f) that returns, when f failed, the
// error it recorded.
func benchmark(f func(b *testing.B)) (testing.BenchmarkResult, error) {
	var got *testing.B
	res := testing.Benchmark(func(b *testing.B) {
		got = b
		f(b)
	})
	switch {
	case got == nil:
		return res, errors.New("did not run")
	case got.Failed():
		if err := takeFailure(got); err != nil {
			return res, err
		}
		return res, errors.New("failed")
	case res.N == 0:
		return res, errors.New("ran no iterations")
	}
	return res, nil
}
