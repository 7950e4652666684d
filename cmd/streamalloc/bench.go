// streamalloc bench: the benchmark suite of package bench, run through
// testing.Benchmark, printed as a table or JSON.
//
// The cases and their names are bench.Suite's, the same as go test's
// (Pair/resource=pool/size=4KiB is BenchmarkPair/resource=pool/size=4KiB
// in mr), so a row of this command and a line of `go test -bench` measure
// the same code. Flags are checked before the device is opened, and the
// benchtime the testing package keeps in a global flag is restored when
// the command returns.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr/registry"
)

type benchFlags struct {
	resources string
	json      bool
	benchtime string
	filter    string
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Benchmark the memory resources",
		Long: `Run the resource benchmark suite and print one row per case and resource:

  Pair/size=S            one allocate+free of S bytes on one stream (latency)
  Streams/goroutines=N   N goroutines, each on its own stream, 4 KiB pairs;
                         pairs/s is the total of all of them
  Random                 RMM-style random allocations: up to 512 live blocks
                         of 1 KiB to 4 MiB, a random allocate or free per op
  Notebook               the notebook loop: allocate 4 MiB, fill it with a
                         kernel, free, on one stream; direct (cuMemAlloc)
                         against stream-ordered async and pool, time per
                         iteration including the stream synchronizations
  Pipeline               a producer stream fills 1 MiB buffers, a consumer
                         stream uses and frees them; async with and without
                         its return wait, and pool: time per buffer and
                         peak reserved memory

Under the table, "one op" says what one iteration of each case timed.

Case names are those of go test -bench in package mr without "Benchmark"
(Pair/resource=pool/size=4KiB); --filter matches them. On the simulator the
times are the simulator's on this CPU, not a GPU's, and the output says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, _ := cmd.Flags().GetString("device")
			return runBench(cmd.OutOrStdout(), cmd.ErrOrStderr(), kind, f)
		},
	}
	cmd.Flags().StringVar(&f.resources, "resource", "all", "resources to benchmark: a comma-separated list of "+fmt.Sprint(registry.All())+", or all")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the results as a JSON array")
	cmd.Flags().StringVar(&f.benchtime, "benchtime", "1s", "run each case for this long (1s, 200ms) or this many iterations (100x), as go test -benchtime")
	cmd.Flags().StringVar(&f.filter, "filter", "", "run only the cases whose name (Pair/resource=pool/size=4KiB) matches this `REGEX`")
	return cmd
}

// benchRow is one result as --json prints it. The first seven fields are
// the documented schema; fields may be added, none renamed.
type benchRow struct {
	Case        string             `json:"case"` // the case without its resource: Pair/size=4KiB
	Resource    string             `json:"resource"`
	Device      string             `json:"device"`
	NsPerOp     float64            `json:"ns_per_op"`
	AllocsPerOp int64              `json:"allocs_per_op"`
	BytesPerOp  int64              `json:"bytes_per_op"`
	Metrics     map[string]float64 `json:"metrics"`    // pairs/s for Streams; never null
	Benchmark   string             `json:"benchmark"`  // the go test name: BenchmarkPair/resource=pool/size=4KiB
	Simulated   bool               `json:"simulated"`  // the device is the simulator
	Iterations  int                `json:"iterations"` // b.N
	Op          string             `json:"op"`         // what one op is (bench.Case.Op)
}

func runBench(stdout, stderr io.Writer, kind string, f benchFlags) error {
	names, err := registry.All().Parse(f.resources)
	if err != nil {
		return fmt.Errorf("--resource: %w", err)
	}
	var filter *regexp.Regexp
	if f.filter != "" {
		if filter, err = regexp.Compile(f.filter); err != nil {
			return fmt.Errorf("--filter: %w", err)
		}
	}
	restore, err := bench.SetBenchtime(f.benchtime)
	if err != nil {
		return fmt.Errorf("--benchtime: %w", err)
	}
	defer restore()
	var cases []bench.Case
	for _, c := range bench.Suite() {
		if slices.Contains(names, c.Resource) && (filter == nil || filter.MatchString(c.FullName())) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("no benchmark case matches --filter %q on --resource %s", f.filter, strings.Join(names, ","))
	}

	b, err := backend.Open(kind)
	if err != nil {
		return err
	}
	dev, err := b.Device(0)
	if err != nil {
		return fmt.Errorf("device 0: %w", err)
	}
	devName := dev.Properties().Name
	if !f.json {
		if b.Simulated() {
			fmt.Fprintf(stdout, "device: %s (sim) -- SIMULATED GPU: these are timings of the simulator on this CPU, not of a GPU\n", devName)
		} else {
			fmt.Fprintf(stdout, "device: %s (%s)\n", devName, b.Name())
		}
		fmt.Fprintf(stdout, "benchtime: %s per case, %d cases\n\n", f.benchtime, len(cases))
	}

	bar := newProgressBar(stderr, "bench")
	rows := make([]benchRow, 0, len(cases))
	for i, c := range cases {
		res, err := bench.Run(c, dev)
		if err != nil {
			return fmt.Errorf("bench %w", err)
		}
		rows = append(rows, newBenchRow(c, res, devName, b.Simulated()))
		if bar != nil {
			bar.Set64(int64(1000 * (i + 1) / len(cases)))
		}
	}
	if bar != nil {
		bar.Finish()
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if err := writeBenchTable(stdout, rows); err != nil {
		return err
	}
	if err := writeBenchOps(stdout, cases); err != nil {
		return err
	}
	return writeBenchRatios(stdout, rows)
}

func newBenchRow(c bench.Case, res testing.BenchmarkResult, dev string, simulated bool) benchRow {
	m := map[string]float64{}
	maps.Copy(m, res.Extra)
	return benchRow{
		Case:        c.Name(),
		Resource:    c.Resource,
		Device:      dev,
		NsPerOp:     float64(res.T.Nanoseconds()) / float64(res.N),
		AllocsPerOp: res.AllocsPerOp(),
		BytesPerOp:  res.AllocedBytesPerOp(),
		Metrics:     m,
		Benchmark:   "Benchmark" + c.FullName(),
		Simulated:   simulated,
		Iterations:  res.N,
		Op:          c.Op(),
	}
}

func writeBenchTable(w io.Writer, rows []benchRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tresource\titerations\tns/op\tB/op\tallocs/op\tmetrics\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t\n",
			r.Case, r.Resource, r.Iterations, formatNs(r.NsPerOp), r.BytesPerOp, r.AllocsPerOp, formatMetrics(r.Metrics))
	}
	return tw.Flush()
}

// comparisons are the ratios that say whether stream-ordered allocation
// pays (the pool against the driver's pool, both against cuMemAlloc),
// printed under the table when both rows ran.
var comparisons = []struct {
	workload   bench.Workload
	fast, slow string
	metric     string // "" compares ns/op (lower is better), else this metric (higher is better)
}{
	{bench.WorkloadPair, "pool", "async", ""},
	{bench.WorkloadStreams, "pool", "async", "pairs/s"},
	{bench.WorkloadNotebook, "async", "direct", ""},
	{bench.WorkloadNotebook, "pool", "direct", ""},
}

// writeBenchRatios prints, for each case that ran on both resources of a
// comparison, how many times faster the first was.
func writeBenchRatios(w io.Writer, rows []benchRow) error {
	type key struct{ name, resource string }
	byKey := map[key]benchRow{}
	var order []string
	for _, r := range rows {
		byKey[key{r.Case, r.Resource}] = r
		if !slices.Contains(order, r.Case) {
			order = append(order, r.Case)
		}
	}
	var lines []string
	for _, cmp := range comparisons {
		for _, name := range order {
			if name != string(cmp.workload) && !strings.HasPrefix(name, string(cmp.workload)+"/") {
				continue
			}
			a, okA := byKey[key{name, cmp.fast}]
			b, okB := byKey[key{name, cmp.slow}]
			if !okA || !okB {
				continue
			}
			var ratio float64
			var detail string
			if cmp.metric == "" {
				ratio = b.NsPerOp / a.NsPerOp
				detail = fmt.Sprintf("%s vs %s ns/op", formatNs(a.NsPerOp), formatNs(b.NsPerOp))
			} else {
				ratio = a.Metrics[cmp.metric] / b.Metrics[cmp.metric]
				detail = fmt.Sprintf("%s vs %s %s", formatQuantity(a.Metrics[cmp.metric]), formatQuantity(b.Metrics[cmp.metric]), cmp.metric)
			}
			lines = append(lines, fmt.Sprintf("  %s: %s %.1fx faster than %s (%s)", name, cmp.fast, ratio, cmp.slow, detail))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nratios:\n%s\n", strings.Join(lines, "\n"))
	return err
}

// formatNs prints a time per op with the precision go test uses.
func formatNs(ns float64) string {
	switch {
	case ns < 10:
		return fmt.Sprintf("%.2f", ns)
	case ns < 100:
		return fmt.Sprintf("%.1f", ns)
	}
	return fmt.Sprintf("%.0f", ns)
}

// formatQuantity prints a large count with an SI suffix: 1.25M, 830.0k.
func formatQuantity(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

func formatMetrics(m map[string]float64) string {
	var parts []string
	for _, unit := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, formatQuantity(m[unit])+" "+unit)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
