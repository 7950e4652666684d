package main

import (
	"encoding/json"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/bench"
)

// The whole suite on the simulator: a header that says it is simulated,
// one row per case in the suite's order, and the ratios.
func TestBenchTable(t *testing.T) {
	testing.Init()
	before := flag.Lookup("test.benchtime").Value.String()
	out, stderr, err := run(t, "bench", "--device", "sim", "--benchtime", "2x")
	if err != nil {
		t.Fatal(err)
	}
	if after := flag.Lookup("test.benchtime").Value.String(); after != before {
		t.Errorf("benchtime left at %q, was %q", after, before)
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet got %q", stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	suite := bench.Suite()
	if len(lines) < 4+len(suite) {
		t.Fatalf("%d lines for %d cases:\n%s", len(lines), len(suite), out)
	}
	if !strings.Contains(lines[0], "SIMULATED GPU") || !strings.HasPrefix(lines[1], "benchtime: 2x per case, 76 cases") {
		t.Errorf("header:\n%s\n%s", lines[0], lines[1])
	}
	if got := strings.Fields(lines[3]); !slices.Equal(got, []string{"case", "resource", "iterations", "ns/op", "B/op", "allocs/op", "metrics"}) {
		t.Errorf("columns %q", got)
	}
	for i, c := range suite {
		f := strings.Fields(lines[4+i])
		if len(f) < 7 || f[0] != c.Name() || f[1] != c.Resource || f[2] != "2" {
			t.Errorf("row %d = %q, want %s on %s, 2 iterations", i, lines[4+i], c.Name(), c.Resource)
			continue
		}
		if c.Workload == bench.WorkloadStreams != strings.HasSuffix(lines[4+i], " pairs/s") {
			t.Errorf("row %d: metrics %q", i, f[6:])
		}
	}
	// What one op is, once per case, between the table and the ratios.
	ops := out[strings.Index(out, "\none op:\n"):]
	for _, c := range suite {
		if want := "  " + c.Name() + " "; !strings.Contains(ops, want) || !strings.Contains(ops, c.Op()) {
			t.Errorf("one op: lacks %s: %s", c.Name(), c.Op())
		}
	}
	if n := strings.Count(ops, "\n  Pair/size=4KiB "); n != 1 {
		t.Errorf("Pair/size=4KiB said %d times under one op", n)
	}
	for _, l := range strings.Split(ops, "\n") {
		if len([]rune(l)) > 120 {
			t.Errorf("line wider than 120 columns: %q", l)
		}
	}
	for _, want := range []string{
		"\nratios:\n",
		"  Pair/size=4KiB: pool ",
		"  Streams/goroutines=16: pool ",
		"  Notebook: async ",
		"  Notebook: pool ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`Notebook: pool [0-9.]+x faster than direct \([0-9.]+ vs [0-9.]+ ns/op\)`).MatchString(out) {
		t.Errorf("notebook ratio line malformed:\n%s", out)
	}
}

// --json: an array of objects with the documented fields, one per case
// the filter and resources select, in the suite's order.
func TestBenchJSON(t *testing.T) {
	out, _, err := run(t, "bench", "--device", "sim", "--benchtime", "20x", "--json",
		"--resource", "direct, pool,async,pool", "--filter", `^(Pair/.*/size=4KiB|Streams/.*/goroutines=2|Notebook/.*)$`)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var want [][2]string
	for _, w := range []string{"Pair/size=4KiB", "Streams/goroutines=2", "Notebook"} {
		for _, r := range []string{"direct", "async", "pool"} {
			want = append(want, [2]string{w, r})
		}
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	fields := []string{"case", "resource", "device", "ns_per_op", "allocs_per_op", "bytes_per_op", "metrics", "benchmark", "simulated", "iterations", "op"}
	for i, r := range rows {
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		if slices.Sort(keys); !slices.Equal(keys, slices.Sorted(slices.Values(fields))) {
			t.Errorf("row %d fields %v, want %v", i, keys, fields)
		}
		c, res := want[i][0], want[i][1]
		if op, _ := r["op"].(string); !strings.HasPrefix(op, map[string]string{"Pair/size=4KiB": "one Allocate of 4KiB", "Streams/goroutines=2": "a round: 2 goroutines", "Notebook": "Allocate 4MiB, fill it"}[c]) {
			t.Errorf("row %d: op %q", i, op)
		}
		if r["case"] != c || r["resource"] != res || r["device"] != "Simulated H100" || r["simulated"] != true || r["iterations"] != 20.0 {
			t.Errorf("row %d = %v, want %s on %s", i, r, c, res)
		}
		if ns, _ := r["ns_per_op"].(float64); ns <= 0 {
			t.Errorf("row %d: ns_per_op %v", i, r["ns_per_op"])
		}
		full := strings.Replace(c, "/", "/resource="+res+"/", 1)
		if c == "Notebook" {
			full = c + "/resource=" + res
		}
		if r["benchmark"] != "Benchmark"+full {
			t.Errorf("row %d: benchmark %v, want Benchmark%s", i, r["benchmark"], full)
		}
		m, ok := r["metrics"].(map[string]any)
		if !ok {
			t.Errorf("row %d: metrics %v is not an object", i, r["metrics"])
		}
		if ps, _ := m["pairs/s"].(float64); strings.HasPrefix(c, "Streams") != (ps > 0) {
			t.Errorf("row %d: metrics %v", i, m)
		}
	}
	// The pool's pair is served from its free lists: no Go allocation.
	if rows[2]["allocs_per_op"] != 0.0 {
		t.Errorf("pool pair allocates: %v", rows[2])
	}
}

// Bad flags: a clear error before anything runs, and the testing
// package's benchtime left as it was.
func TestBenchBadFlags(t *testing.T) {
	testing.Init()
	before := flag.Lookup("test.benchtime").Value.String()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--resource", "pool,nope"}, `--resource: unknown resource "nope" (want one of direct, managed, async, pool, fixedsize, binning, arena, vmm, pool_vmm, pool_vmm_holes, pool_vmm_holes_pair, async_noreturnwait, or all)`},
		{[]string{"--resource", ""}, `--resource: unknown resource ""`},
		{[]string{"--filter", "Pair/(size"}, "--filter: error parsing regexp: missing closing )"},
		{[]string{"--filter", "NoSuchCase"}, `no benchmark case matches --filter "NoSuchCase" on --resource `},
		{[]string{"--resource", "managed", "--filter", "Notebook"}, `no benchmark case matches --filter "Notebook" on --resource managed`},
		{[]string{"--benchtime", "fast"}, `--benchtime: "fast" is not a duration like 1s or a count like 100x (invalid duration)`},
		{[]string{"--benchtime", "0x"}, `--benchtime: "0x" is not a duration like 1s or a count like 100x (invalid count)`},
		{[]string{"--benchtime", "-1s"}, `--benchtime: "-1s" is not a duration`},
		{[]string{"--device", "tpu"}, "unknown kind"},
		{[]string{"extra"}, `unknown command "extra" for "streamalloc bench"`},
	}
	for _, tc := range cases {
		args := append([]string{"bench", "--device", "sim", "--benchtime", "1x"}, tc.args...)
		out, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%v: output before the error:\n%s", tc.args, out)
		}
	}
	if after := flag.Lookup("test.benchtime").Value.String(); after != before {
		t.Errorf("benchtime left at %q, was %q", after, before)
	}
}
