package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/sanitize"
	"github.com/streamalloc/streamalloc/trace"
)

// run executes the command with args and returns its output and error.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errb.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInfoSim(t *testing.T) {
	out, _, err := run(t, "info", "--device", "sim")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIMULATED GPU", "devices: 1", "device 0: Simulated", "(simulated)", "stream-ordered memory pools: true", "80.0 GiB total",
		"driver: none", "next: go run ./cmd/streamalloc replay replay/testdata/*.csv.gz"} {
		if !strings.Contains(out, want) {
			t.Errorf("info output lacks %q:\n%s", want, out)
		}
	}
	// The simulator's driver version is made up: info does not print it.
	if strings.Contains(out, "driver version") {
		t.Errorf("info prints a driver version on the simulator:\n%s", out)
	}
}

const smallTrace = `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000001,allocate,0x1000,1048576,0x0
1,10:00:00.000002,allocate,0x2000,4096,0x7
1,10:00:00.000003,free,0x1000,1048576,0x0
1,10:00:00.000004,free,0x9999,64,0x0
1,10:00:00.000005,allocate,0x3000,512,0x0
`

// The JSON output has exactly the documented fields for every trace and
// resource, with the counts of the trace.
func TestReplayJSON(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2", len(rows))
	}
	for i, want := range []string{"direct", "pool"} {
		r := rows[i]
		for _, f := range []string{"trace", "resource", "device", "events", "allocations", "peak_live_bytes",
			"peak_reserved_bytes", "fragmentation", "ns_per_event", "failures"} {
			if _, ok := r[f]; !ok {
				t.Errorf("row %d lacks field %q", i, f)
			}
		}
		if r["resource"] != want || r["events"] != 5.0 || r["allocations"] != 3.0 ||
			r["peak_live_bytes"] != float64(1048576+4096) || r["unknown_frees"] != 1.0 || r["failures"] != 0.0 {
			t.Errorf("row %d = %v", i, r)
		}
		if r["simulated"] != true {
			t.Errorf("row %d: simulated = %v on the simulator", i, r["simulated"])
		}
		if r["fragmentation"].(float64) < 1 {
			t.Errorf("row %d: fragmentation %v < 1", i, r["fragmentation"])
		}
	}
}

func TestReplayGzipTableAndLog(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(smallTrace))
	zw.Close()
	p := writeFile(t, "t.csv.gz", gz.String())
	logPath := filepath.Join(t.TempDir(), "replay.csv")
	out, stderr, err := run(t, "replay", "--device", "sim", "--resource", "all", "--log", logPath, p)
	if err != nil {
		t.Fatal(err)
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet got %q", stderr)
	}
	for _, name := range registry.Replay().Every() {
		if !strings.Contains(out, " "+name+" ") {
			t.Errorf("table lacks resource %s:\n%s", name, out)
		}
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	// Per resource: 3 allocations, the trace's 1 known free, 2 frees at
	// the end; one header for the whole file.
	if lines[0] != "Thread,Time,Action,Pointer,Size,Stream" || len(lines) != 1+6*len(registry.Replay().Every()) {
		t.Errorf("log has %d lines, header %q", len(lines), lines[0])
	}
	// The log replays.
	out, _, err = run(t, "replay", "--device", "sim", "--resource", "direct", "--json", logPath)
	if err != nil {
		t.Fatalf("replaying the log: %v", err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0]["allocations"] != float64(3*len(registry.Replay().Every())) {
		t.Errorf("log replay: %v %s", err, out)
	}
}

func TestReplayHTML(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	page := filepath.Join(t.TempDir(), "r.html")
	if _, _, err := run(t, "replay", "--device", "sim", "--resource", "async,pool", "--html", page, p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// One trace with its data, the command line and the simulator said.
	for _, want := range []string{`<section class="trace" id="trace-0" data-data="sa-data-0">`, `<script type="application/octet-stream" id="sa-data-0">`,
		`<p class="banner" id="simulated">`, "streamalloc replay --device=sim --html=" + page + " --resource=async,pool " + p + "</code>"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// gzipped returns data gzip-compressed.
func gzipped(t *testing.T, data string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(data))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// badInput is a malformed trace, the sentinel its error
// must match, and the line it must name: 0 where the format or the damage
// has none (a pickle, a gzip header), -1 for any line after the header
// (damage inside gzip data shows at the line being decompressed).
type badInput struct {
	name, content string
	sentinel      error
	line          int64
}

func badInputs(t *testing.T) []badInput {
	header := "Thread,Time,Action,Pointer,Size,Stream\n"
	long := header + strings.Repeat("1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n", 5000)
	z := []byte(gzipped(t, long))
	corrupt := bytes.Clone(z)
	corrupt[len(z)/2] ^= 0x55
	pkl, err := os.ReadFile("../../trace/torchsnap/testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	return []badInput{
		{"columns", header + "1,10:00:00.000001,allocate,0x10,5\n", trace.ErrColumns, 2},
		{"size", header + "1,10:00:00.000001,allocate,0x10,five,0x0\n", trace.ErrSize, 2},
		{"negative", header + "1,10:00:00.000001,allocate,0x10,-5,0x0\n", trace.ErrNegativeSize, 2},
		{"action", header + "1,10:00:00.000001,allocate,0x10,5,0x0\n1,10:00:00.000002,steal,0x10,5,0x0\n", trace.ErrAction, 3},
		{"header", "Thread,Time,Action,Pointer,Size\n", trace.ErrHeader, 1},
		{"gzip header", "\x1f\x8b\x08\x00garbage", trace.ErrCompressed, 0},
		{"truncated gzip", string(z[:len(z)/2]), trace.ErrCompressed, -1},
		{"corrupt gzip", string(corrupt), trace.ErrCompressed, -1},
		{"pickle", "\x80\x04\x95garbage", trace.ErrPickle, 0},
		{"truncated pickle", string(pkl[:len(pkl)/2]), trace.ErrPickle, 0},
		{"expanding pickle", expandingSnapshot(2000, 1000), trace.ErrExpansion, 0},
		{"long decimal pickle", "\x80\x02L" + strings.Repeat("9", 5<<20) + "L\n.", trace.ErrPickle, 0},
	}
}

// expandingSnapshot is a pickled snapshot whose device_traces holds n
// references to one list of m references to one alloc entry: n*m entries
// in 2(n+m) bytes and change.
func expandingSnapshot(n, m int) string {
	entry := "}(X\x06\x00\x00\x00actionX\x05\x00\x00\x00allocX\x04\x00\x00\x00addrK\x0aX\x04\x00\x00\x00sizeK\x0au"
	list := "](" + entry + "q\x00" + strings.Repeat("h\x00", m-1) + "e"
	return "\x80\x02}(X\x0d\x00\x00\x00device_traces](" + list + "q\x01" + strings.Repeat("h\x01", n-1) + "eu."
}

// Bad input: an error matching the sentinel, with one message that names
// the file and the line.
func TestReplayBadInput(t *testing.T) {
	for _, tc := range badInputs(t) {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "bad.csv", tc.content)
			_, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool", p)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("error %v, want %v", err, tc.sentinel)
			}
			var pe *trace.ParseError
			if !errors.As(err, &pe) || pe.File != p {
				t.Fatalf("error %v is not a *trace.ParseError naming %s", err, p)
			}
			want := p + ": "
			switch {
			case tc.line > 0 && pe.Line == tc.line:
				want = fmt.Sprintf("%s:%d: ", p, tc.line)
			case tc.line < 0 && pe.Line >= 2:
				want = fmt.Sprintf("%s:%d: ", p, pe.Line)
			case tc.line != 0 || pe.Line != 0:
				t.Errorf("error at line %d, want %d", pe.Line, tc.line)
			}
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line naming %q", err, want)
			}
		})
	}
}

// The binary itself: bad input exits with status 1 and one line on
// standard error, never a panic (status 2 and a stack); an unknown free
// exits 0. The test binary runs main when STREAMALLOC_TEST_MAIN is set.
func TestExitStatus(t *testing.T) {
	if os.Getenv("STREAMALLOC_TEST_MAIN") == "1" {
		os.Args = append([]string{"streamalloc"}, strings.Fields(os.Getenv("STREAMALLOC_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runMain := func(args ...string) (int, string, string) {
		cmd := exec.Command(exe, "-test.run=^TestExitStatus$")
		cmd.Env = append(os.Environ(), "STREAMALLOC_TEST_MAIN=1", "STREAMALLOC_TEST_ARGS="+strings.Join(args, " "))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	for _, tc := range badInputs(t) {
		p := writeFile(t, "bad.csv", tc.content)
		code, out, stderr := runMain("replay", "--device", "sim", p)
		if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.HasPrefix(stderr, "streamalloc: ") || !strings.Contains(stderr, p) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1, nothing, one line naming %s", tc.name, code, out, stderr, p)
		}
	}
	p := writeFile(t, "t.csv", smallTrace)
	code, out, stderr := runMain("replay", "--device", "sim", p)
	if code != 0 || stderr != "" {
		t.Fatalf("good trace: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	// The trace's heading counts the one unknown free of smallTrace.
	if !strings.Contains(out, ", 1 unknown free (skipped)\n") {
		t.Errorf("no unknown free in the table:\n%s", out)
	}
}

func TestBadFlags(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--device", "sim", "--resource", "nope", p}, `unknown resource "nope"`},
		{[]string{"replay", "--device", "tpu", p}, "unknown kind"},
		{[]string{"replay", "--device", "sim"}, "requires at least 1 arg"},
		{[]string{"replay", "--device", "sim", filepath.Join(t.TempDir(), "missing.csv")}, "missing.csv"},
		{[]string{"info", "extra"}, "unknown command"},
		{[]string{"replay", "--device", "sim", "--max-expansion", "-1", p}, "--max-expansion -1: must not be negative"},
	}
	for _, tc := range cases {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// --sanitize runs the replay under the sanitizer: the JSON gains
// sanitizer_reports (0 for a correct resource), the table a hazards
// column, and the peak reserved bytes stay those of the resource.
func TestReplaySanitize(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "pool,async", "--sanitize", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, r := range rows {
		if r["sanitizer_reports"] != 0.0 {
			t.Errorf("%s: sanitizer_reports = %v, want 0", r["resource"], r["sanitizer_reports"])
		}
		if r["peak_reserved_bytes"].(float64) <= r["peak_live_bytes"].(float64) {
			t.Errorf("%s: peak reserved %v not above peak live %v: usage not read through the sanitizer",
				r["resource"], r["peak_reserved_bytes"], r["peak_live_bytes"])
		}
	}
	out, _, err = run(t, "replay", "--device", "sim", "--resource", "pool", "--sanitize", p)
	if err != nil || !strings.Contains(out, "hazards") {
		t.Errorf("table without a hazards column (%v):\n%s", err, out)
	}
	out, _, err = run(t, "replay", "--device", "sim", "--resource", "pool", "--json", p)
	if err != nil || strings.Contains(out, "sanitizer_reports") {
		t.Errorf("JSON without --sanitize mentions the sanitizer (%v):\n%s", err, out)
	}
}

// With --sanitize and --log together the sanitizer still sees every
// allocation and free: the logger sits above it, not beside it.
func TestReplaySanitizeAndLog(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	z := sanitize.New(sanitize.Options{OnReport: func(*sanitize.Report) {}})
	res := mr.NewDirect(dev)
	var log bytes.Buffer
	chain := mr.Chain(stack(res, z, trace.NewCSVWriter(&log)))
	if len(chain) != 3 {
		t.Fatalf("chain %T, want logging, sanitizer, direct", chain)
	}
	if _, ok := chain[0].(*mr.Logging); !ok {
		t.Errorf("top of the chain is %T, want *mr.Logging", chain[0])
	}
	if zr, ok := chain[1].(*sanitize.Resource); !ok || zr.Sanitizer() != z {
		t.Errorf("below the logger: %T, want the replay's *sanitize.Resource", chain[1])
	}
	if chain[2] != mr.Resource(res) {
		t.Errorf("bottom of the chain is %T, want the resource", chain[2])
	}

	p := writeFile(t, "t.csv", smallTrace)
	logPath := filepath.Join(t.TempDir(), "replay.csv")
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "pool", "--sanitize", "--log", logPath, "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0]["sanitizer_reports"] != 0.0 {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// 3 allocations, 1 known free, 2 frees at the end, and the header.
	if n := strings.Count(string(b), "\n"); n != 1+6 {
		t.Errorf("log has %d lines, want 7:\n%s", n, b)
	}
}

// --upstream picks what suballocators draw from: async by default, direct
// when asked. The pool's row names its upstream and splits its time; a
// resource that stands alone has neither. An unknown name is refused with
// registry.ErrUpstream before anything is replayed.
func TestReplayUpstream(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "async"},
		{[]string{"--upstream", "async"}, "async"},
		{[]string{"--upstream", "direct"}, "direct"},
	} {
		args := append([]string{"replay", "--device", "sim", "--resource", "direct,pool", "--json"}, tc.args...)
		out, _, err := run(t, append(args, p)...)
		if err != nil {
			t.Fatal(err)
		}
		var rows []replay.Result
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		direct, pool := rows[0], rows[1]
		if direct.Upstream != "" || direct.UpstreamCalls != 0 || direct.OwnNsPerEvent != direct.NsPerEvent {
			t.Errorf("%v: direct has an upstream: %+v", tc.args, direct)
		}
		// The trace's 1 MiB block makes the pool grow at least once.
		if pool.Upstream != tc.want || pool.UpstreamCalls < 1 || pool.UpstreamNsPerEvent <= 0 ||
			math.Abs(pool.OwnNsPerEvent+pool.UpstreamNsPerEvent-pool.NsPerEvent) > 1e-6 {
			t.Errorf("%v: pool over %s: %+v", tc.args, tc.want, pool)
		}
		// A driver pool reserves whole granules behind the pool.
		if tc.want == "async" && pool.PeakUpstreamReservedBytes < pool.PeakReservedBytes {
			t.Errorf("%v: the driver pool peaked at %d bytes, the pool at %d", tc.args, pool.PeakUpstreamReservedBytes, pool.PeakReservedBytes)
		}
	}
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "pool", "--upstream", "cuda", p)
	if !errors.Is(err, registry.ErrUpstream) || out != "" {
		t.Errorf("--upstream cuda: %q, %v; want ErrUpstream and no output", out, err)
	}
}

// --timed adds a row per resource replayed in the trace's time: stream
// 0x1 is busy for 80 ms of the trace (40 ms at --time-scale 0.5) before its
// free, so async cannot hand the block to stream 0x2 and grows again.
func TestReplayTimed(t *testing.T) {
	const cross = `Thread,Time,Action,Pointer,Size,Stream
1,10:00:00.000000,allocate,0x7f0000000000,20971520,0x1
1,10:00:00.080000,free,0x7f0000000000,20971520,0x1
1,10:00:00.080100,allocate,0x7f0002000000,20971520,0x2
`
	p := writeFile(t, "cross.csv", cross)
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "async,pool", "--timed", "--time-scale", "0.5", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []replay.Result
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []struct {
		resource string
		timed    bool
		reserved uint64
	}{
		{"async", false, 32 << 20}, {"async (timed)", true, 64 << 20},
		{"pool", false, 0}, {"pool (timed)", true, 0},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.Resource != w.resource || r.Timed != w.timed || (w.reserved != 0 && r.PeakReservedBytes != w.reserved) {
			t.Errorf("row %d: %s timed %v reserved %d; want %+v", i, r.Resource, r.Timed, r.PeakReservedBytes, w)
		}
		if w.timed && (r.TimedKernels != 1 || r.TimedWork != 40*time.Millisecond) {
			t.Errorf("row %d: %d kernels, %v of work; want 1, 40ms (80 ms at scale 0.5)", i, r.TimedKernels, r.TimedWork)
		}
	}
	for _, scale := range []string{"0", "-1", "NaN"} {
		_, _, err := run(t, "replay", "--device", "sim", "--timed", "--time-scale", scale, p)
		if !errors.Is(err, errNotPositive) {
			t.Errorf("--time-scale %s: %v; want errNotPositive", scale, err)
		}
	}
}
