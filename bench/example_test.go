package bench_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// The suite's cases, filtered the way the command filters them.
func ExampleSuite() {
	for _, c := range bench.Suite() {
		if c.Workload == bench.WorkloadNotebook || c.Workload == bench.WorkloadPair && c.Resource == "pool" {
			fmt.Println(c.FullName())
		}
	}
	// Output:
	// Pair/resource=pool/size=256B
	// Pair/resource=pool/size=4KiB
	// Pair/resource=pool/size=64KiB
	// Pair/resource=pool/size=1MiB
	// Notebook/resource=direct
	// Notebook/resource=async
	// Notebook/resource=pool
}

// Running one case outside go test, on the simulator, for a fixed number
// of iterations.
func ExampleRun() {
	restore, err := bench.SetBenchtime("10x")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer restore()
	dev, _ := sim.New(sim.Config{}).Device(0)
	c := bench.Case{Workload: bench.WorkloadStreams, Resource: "pool", Size: 4 << 10, Streams: 2}
	res, err := bench.Run(c, dev)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.FullName(), res.N, res.Extra["pairs/s"] > 0)
	// Output: Streams/resource=pool/goroutines=2 10 true
}
