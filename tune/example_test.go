package tune_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/tune"
)

// Pick the pool's options for a workload from its trace, on simulated
// GPUs, and print the Go code and the configuration string of the
// setting that reserves least.
func Example() {
	log := `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000001,allocate,0x1000,3000000,0x0
1,10:00:00.000002,allocate,0x2000,5000000,0x0
1,10:00:00.000003,free,0x1000,3000000,0x0
1,10:00:00.000004,allocate,0x3000,1000,0x0
`
	tr, err := tune.Load(trace.NewCSVReader(strings.NewReader(log), "example.csv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	grid, err := tune.Grid([]string{"pool"})
	if err != nil {
		fmt.Println(err)
		return
	}
	outs, err := tune.Run(context.Background(), []*tune.Trace{tr}, grid, tune.Options{
		NewDevice: func() (gpu.Device, error) { return sim.New(sim.Config{}).Device(0) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	best, err := tune.LeastReserved(outs, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	conf, _ := best.Setting.Conf()
	fmt.Printf("%v: %d bytes reserved for %d live\n", best.Setting, best.ReservedBytes, best.Traces[0].PeakLiveBytes)
	fmt.Println(best.Setting.GoCode())
	fmt.Println("STREAMALLOC_CONF=" + conf)
	// Output:
	// pool (defaults): 10485760 bytes reserved for 8000000 live
	// res, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	// STREAMALLOC_CONF=pool,split_big=false
}
