package replay_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
)

// A memory budget in a program's own tests: replay a trace the program
// recorded (an RMM log or a PyTorch snapshot, opened with trace.Open) on
// the simulated GPU, through the stack the program builds, and fail when
// it reserves more than the budget. In a test, replace the prints by
// t.Fatal(err); the error states the figures.
func ExampleCheck() {
	// In a test: f, err := trace.Open("testdata/serve.csv.gz", nil)
	log := `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000001,allocate,0x7f0000000000,1000000,0x0
1,10:00:00.000002,allocate,0x7f0000100000,3000000,0x7f
1,10:00:00.000003,free,0x7f0000000000,1000000,0x7f
1,10:00:00.000004,allocate,0x7f0000000000,500000,0x0
`
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, budget := range []uint64{32 << 20, 8 << 20} {
		async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		pool, err := mr.NewPool(async, mr.PoolOptions{})
		if err != nil {
			fmt.Println(err)
			return
		}
		tr := trace.NewCSVReader(strings.NewReader(log), "serve.csv")
		r, err := replay.Check(context.Background(), tr, dev, pool, replay.Budget{PeakReserved: budget}, replay.Options{Resource: "pool"})
		if err != nil {
			fmt.Println(err) // t.Fatal(err)
		} else {
			fmt.Printf("%s: peak reserved %d bytes, within %d\n", r.Trace, r.PeakReservedBytes, budget)
		}
		pool.Close()
		async.Close()
	}
	// Output:
	// serve.csv: peak reserved 16777216 bytes, within 33554432
	// replay: serve.csv on pool: over budget: peak reserved 16.0 MiB (16777216 bytes) > 8.0 MiB (8388608 bytes) (peak live 3.8 MiB (4000000 bytes))
}
