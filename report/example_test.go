package report_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
	"github.com/streamalloc/streamalloc/trace"
)

// Replay a trace against a pool with a timeline, and write the viewer
// page. In a program the trace comes from trace.Open and the page goes to
// the file named by --html.
func ExampleWriteHTML() {
	log := trace.Header + `
1,10:00:00.000000,allocate,0x1000,4194304,0
1,10:00:00.000100,allocate,0x2000,1048576,0
1,10:00:00.000250,free,0x1000,4194304,0
1,10:00:00.000300,allocate,0x3000,8388608,0
`
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	r, err := replay.Run(context.Background(), trace.NewCSVReader(strings.NewReader(log), "train.csv"), dev, pool,
		replay.Options{Resource: "pool", Timeline: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	var page strings.Builder
	if err := report.WriteHTML(&page, []*replay.Result{r}, report.Options{Command: "example"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println("blocks:", len(r.Timeline.Blocks), "segments:", len(r.Timeline.Segments))
	fmt.Println("sections:", strings.Count(page.String(), `<section class="trace"`))
	fmt.Println("simulated banner:", strings.Contains(page.String(), `id="simulated"`))
	// Output:
	// blocks: 3 segments: 3
	// sections: 1
	// simulated banner: true
}
