package main

import (
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/replay"
)

// The table of shared traces on every resource, sanitized (the widest it
// gets): it fits 120 columns, each trace is a heading followed by its
// facts and one row per resource, the device is said once, and no row
// column holds one value for every resource (failures and hazards, all 0
// here, are said once under the rows).
func TestReplayTableLayout(t *testing.T) {
	// Two of the three (the two-stream one and the longest-named): the
	// third adds time, not width.
	traces := []string{"../../replay/testdata/torch-pipeline-2stream-b.csv.gz", "../../replay/testdata/torch-serve-varlen-b.csv.gz"}
	out, _, err := run(t, append([]string{"replay", "--device", "sim", "--resource", "all", "--sanitize"}, traces...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		if n := len([]rune(l)); n > 120 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, l)
		}
	}
	if !strings.HasPrefix(lines[0], "device: Simulated H100 -- SIMULATED GPU") || strings.Count(out, "Simulated H100") != 1 {
		t.Errorf("the device is not said once, first:\n%s", out)
	}
	blocks := strings.Split(out, "\n\n")[1:]
	if len(blocks) != len(traces) {
		t.Fatalf("%d trace blocks, want %d:\n%s", len(blocks), len(traces), out)
	}
	for i, blk := range blocks {
		rows := strings.Split(strings.TrimRight(blk, "\n"), "\n")
		if rows[0] != traces[i] || !strings.Contains(rows[1], " events, ") || !strings.Contains(rows[1], "peak live ") {
			t.Errorf("trace %d: heading %q, facts %q", i, rows[0], rows[1])
		}
		head := strings.Fields(rows[2])
		if head[0] != "resource" || strings.Contains(rows[2], "failures") || strings.Contains(rows[2], "hazards") {
			t.Errorf("trace %d: header %q", i, rows[2])
		}
		names := registry.Replay().Every()
		body := rows[3 : 3+len(names)]
		for k, r := range body {
			if f := strings.Fields(r); len(f) == 0 || f[0] != names[k] {
				t.Errorf("trace %d row %d: %q, want resource %s", i, k, r, names[k])
			}
		}
		// No shown column is constant: every column's cells differ
		// somewhere (cells split on runs of 2+ spaces).
		cells := func(r string) []string {
			var out []string
			for _, c := range strings.Split(strings.TrimSpace(r), "  ") {
				if c = strings.TrimSpace(c); c != "" {
					out = append(out, c)
				}
			}
			return out
		}
		first := cells(body[0])
		for c := range first {
			constant := true
			for _, r := range body[1:] {
				constant = constant && cells(r)[c] == first[c]
			}
			if constant {
				t.Errorf("trace %d: column %d (%s) is %q on every row", i, c, head[min(c, len(head)-1)], first[c])
			}
		}
		if last := rows[len(rows)-1]; last != "  failures 0, hazards 0 for every resource" {
			t.Errorf("trace %d: last line %q", i, last)
		}
	}
}

// A column that differs between resources stays in the rows (a resource
// that refused allocations shows its failures next to the others' 0);
// the trace's own counts go to its heading; a trace replayed on one
// resource has no comparison column.
func TestReplayTableColumns(t *testing.T) {
	res := func(trace, name string, reserved uint64, failures int64) replayRow {
		return replayRow{Result: &replay.Result{Trace: trace, Resource: name, Device: "NVIDIA H100", Events: 1234567,
			Allocations: 600000, Streams: 1, PeakLiveBytes: 3 << 30, PeakReservedBytes: reserved, Fragmentation: 1.5,
			NsPerEvent: 99.6, Failures: failures, UnknownFrees: 2, TraceFailures: 1}}
	}
	var b strings.Builder
	if err := writeReplayTable(&b, []replayRow{
		res("a.csv", "pool", 4<<30, 0), res("a.csv", "async", 5<<30, 3), res("b.csv", "pool", 4<<30, 0),
	}); err != nil {
		t.Fatal(err)
	}
	want := `device: NVIDIA H100

a.csv
  1,234,567 events, 600,000 allocations, 1 stream, peak live 3.0 GiB, 2 unknown frees (skipped), 1 failure in the trace
  resource  peak reserved          bytes  vs least  fragmentation  ns/event  failures
  pool            4.0 GiB  4,294,967,296     least          1.500       100         0
  async           5.0 GiB  5,368,709,120    +25.0%          1.500       100         3

b.csv
  1,234,567 events, 600,000 allocations, 1 stream, peak live 3.0 GiB, 2 unknown frees (skipped), 1 failure in the trace
  resource  peak reserved          bytes  fragmentation  ns/event  failures
  pool            4.0 GiB  4,294,967,296          1.500       100         0
`
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
}

// A suballocator built over a timed upstream shows its own time and its
// upstream's next to the total; a resource that stands alone has "-".
func TestReplayTableUpstreamColumns(t *testing.T) {
	rows := []replayRow{
		{Result: &replay.Result{Trace: "a.csv", Resource: "async", Device: "NVIDIA H100", Events: 10, Allocations: 5,
			Streams: 1, PeakLiveBytes: 1 << 20, PeakReservedBytes: 32 << 20, Fragmentation: 32, NsPerEvent: 3000, OwnNsPerEvent: 3000}},
		{Result: &replay.Result{Trace: "a.csv", Resource: "pool", Device: "NVIDIA H100", Events: 10, Allocations: 5,
			Streams: 1, PeakLiveBytes: 1 << 20, PeakReservedBytes: 2 << 20, Fragmentation: 2, NsPerEvent: 1200.4,
			Upstream: "async", UpstreamCalls: 1, UpstreamNsPerEvent: 1120.2, OwnNsPerEvent: 80.2}},
	}
	var b strings.Builder
	if err := writeReplayTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := `device: NVIDIA H100

a.csv
  10 events, 5 allocations, 1 stream, peak live 1.0 MiB
  resource  peak reserved       bytes  vs least  fragmentation  ns/event  own ns  upstream ns
  async          32.0 MiB  33,554,432  +1500.0%         32.000     3,000   3,000            -
  pool            2.0 MiB   2,097,152     least          2.000     1,200      80  1,120 async
  failures 0 for every resource
`
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
}
