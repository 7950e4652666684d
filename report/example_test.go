package report_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
)

// A page for one trace replayed against two resources, one of which
// recorded a series. In a program the results come from replay.Run with
// Options.SeriesPoints set, and w is the file named by --html.
func ExampleWriteHTML() {
	series := []replay.Sample{
		{Event: 99, Live: 1 << 30, Reserved: 2 << 30},
		{Event: 199, Live: 3 << 29, Reserved: 2 << 30},
		{Event: 249, Live: 0, Reserved: 2 << 30},
	}
	results := []*replay.Result{
		{Trace: "train.csv.gz", Resource: "pool", Device: "sim", Events: 250, Allocations: 125,
			PeakLiveBytes: 3 << 29, PeakReservedBytes: 2 << 30, Fragmentation: 4.0 / 3, Series: series},
		{Trace: "train.csv.gz", Resource: "direct", Device: "sim", Events: 250, Allocations: 125,
			PeakLiveBytes: 3 << 29, PeakReservedBytes: 3 << 29, Fragmentation: 1},
	}
	var page strings.Builder
	if err := report.WriteHTML(&page, results, report.Options{Title: "train"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println("charts:", strings.Count(page.String(), "<svg"))
	fmt.Println("rows:", strings.Count(page.String(), `<tr class="result`))
	fmt.Println(strings.Contains(page.String(), "No series was recorded for: direct."))
	// Output:
	// charts: 1
	// rows: 2
	// true
}
