// The replay table: what `streamalloc replay` prints without --json.
//
// It fits a terminal of 120 columns: the device is said once above
// everything, each trace is a heading (its name on a line, then what the
// trace itself measures: events, allocations, streams, peak live bytes,
// frees of unknown pointers), and under it one row per resource with only
// what differs between resources. A column whose value is the same for
// every resource of a trace (failures and hazards, usually all 0) is left
// out of the rows and said once under them, so no column repeats one value
// down the table. Host times are per event: the resource's calls in all
// (ns/event) and, where a suballocator was built over a timed upstream,
// its own share and its upstream's.

package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/streamalloc/streamalloc/replay"
)

// tableColumn is one per-resource column of the replay table.
type tableColumn struct {
	head string
	cell func(row replayRow) string
	// optional columns are left out, and said once, when every row has
	// the same value.
	optional bool
}

func replayColumns(rows []replayRow) []tableColumn {
	best := rows[0].PeakReservedBytes
	for _, r := range rows {
		best = min(best, r.PeakReservedBytes)
	}
	cols := []tableColumn{
		{head: "resource", cell: func(r replayRow) string { return r.Resource }},
		{head: "peak reserved", cell: func(r replayRow) string { return formatBytes(r.PeakReservedBytes) }},
		{head: "bytes", cell: func(r replayRow) string { return groupDigits(r.PeakReservedBytes) }},
	}
	if len(rows) > 1 {
		cols = append(cols, tableColumn{head: "vs least", cell: func(r replayRow) string {
			if r.PeakReservedBytes == best {
				return "least"
			}
			if best == 0 {
				return "-"
			}
			return fmt.Sprintf("+%.1f%%", 100*(float64(r.PeakReservedBytes)/float64(best)-1))
		}})
	}
	cols = append(cols,
		tableColumn{head: "fragmentation", cell: func(r replayRow) string { return fmt.Sprintf("%.3f", r.Fragmentation) }},
		tableColumn{head: "ns/event", cell: func(r replayRow) string { return groupDigits(uint64(r.NsPerEvent + 0.5)) }},
	)
	// A suballocator's time apart from its upstream's: "own" is what the
	// resource itself costs, "upstream" the share of its calls to the
	// upstream (a growth's cuMemAllocAsync), per event.
	if slices.ContainsFunc(rows, func(r replayRow) bool { return r.Upstream != "" }) {
		cols = append(cols,
			tableColumn{head: "own ns", cell: func(r replayRow) string { return groupDigits(uint64(r.OwnNsPerEvent + 0.5)) }},
			tableColumn{head: "upstream ns", cell: func(r replayRow) string {
				if r.Upstream == "" {
					return "-"
				}
				return groupDigits(uint64(r.UpstreamNsPerEvent+0.5)) + " " + r.Upstream
			}},
		)
	}
	cols = append(cols,
		tableColumn{head: "failures", optional: true, cell: func(r replayRow) string { return groupDigits(uint64(max(r.Failures, 0))) }},
	)
	if rows[0].SanitizerReports != nil {
		cols = append(cols, tableColumn{head: "hazards", optional: true, cell: func(r replayRow) string {
			if r.SanitizerReports == nil {
				return "-"
			}
			return strconv.Itoa(*r.SanitizerReports)
		}})
	}
	return cols
}

// writeReplayTable prints rows (in the order replayed) grouped by trace.
func writeReplayTable(w io.Writer, rows []replayRow) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	dev := rows[0].Device
	if rows[0].Simulated {
		dev += " -- SIMULATED GPU: reserved bytes are the resources' decisions, times the simulator's on this CPU"
	}
	fmt.Fprintf(&b, "device: %s\n", dev)
	for _, g := range replay.GroupByTrace(rows, func(r replayRow) string { return r.Trace }) {
		r := g[0]
		facts := []string{
			groupDigits(uint64(max(r.Events, 0))) + " events",
			groupDigits(uint64(max(r.Allocations, 0))) + " allocations",
			count(r.Streams, "stream"),
			"peak live " + formatBytes(r.PeakLiveBytes),
		}
		if r.UnknownFrees > 0 {
			facts = append(facts, count(int(r.UnknownFrees), "unknown free")+" (skipped)")
		}
		if r.TraceFailures > 0 {
			facts = append(facts, count(int(r.TraceFailures), "failure")+" in the trace")
		}
		fmt.Fprintf(&b, "\n%s\n  %s\n", r.Trace, strings.Join(facts, ", "))

		var shown []tableColumn
		var same []string
		for _, c := range replayColumns(g) {
			v := c.cell(g[0])
			constant := len(g) > 1
			for _, r := range g[1:] {
				constant = constant && c.cell(r) == v
			}
			if c.optional && constant {
				same = append(same, c.head+" "+v)
				continue
			}
			shown = append(shown, c)
		}
		// Numbers right-aligned; the resource names padded to one width
		// so that they read left-aligned.
		width := len(shown[0].head)
		for _, r := range g {
			width = max(width, len(r.Resource))
		}
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		line := func(cell func(tableColumn) string) {
			fmt.Fprintf(tw, "%-*s\t", width, cell(shown[0]))
			for _, c := range shown[1:] {
				fmt.Fprintf(tw, "%s\t", cell(c))
			}
			fmt.Fprintln(tw)
		}
		line(func(c tableColumn) string { return c.head })
		for _, r := range g {
			line(func(c tableColumn) string { return c.cell(r) })
		}
		tw.Flush()
		if len(same) > 0 {
			fmt.Fprintf(&b, "  %s for every resource\n", strings.Join(same, ", "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func count(n int, what string) string {
	s := groupDigits(uint64(max(n, 0))) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}

// groupDigits writes n with a comma between groups of three digits.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
