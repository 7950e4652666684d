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

func ExampleRun() {
	log := `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000001,allocate,0x7f0000000000,1000000,0x0
1,10:00:00.000002,allocate,0x7f0000100000,3000000,0x7f
1,10:00:00.000003,free,0x7f0000000000,1000000,0x7f
1,10:00:00.000004,free,0xdead00,16,0x0
1,10:00:00.000005,allocate,0x7f0000000000,500000,0x0
`
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	res := mr.NewDirect(dev)
	r, err := replay.Run(context.Background(), trace.NewCSVReader(strings.NewReader(log), "example.csv"),
		dev, res, replay.Options{Resource: "direct"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s on %s: %d events, %d allocations, %d streams\n", r.Trace, r.Resource, r.Events, r.Allocations, r.Streams)
	fmt.Printf("peak live %d, peak reserved %d, unknown frees %d, freed at the end %d\n",
		r.PeakLiveBytes, r.PeakReservedBytes, r.UnknownFrees, r.FreedAtEnd)
	// Output:
	// example.csv on direct: 5 events, 3 allocations, 2 streams
	// peak live 4000000, peak reserved 4000000, unknown frees 1, freed at the end 2
}
