package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/trace"
)

// A trace from a pipe (/dev/stdin) is read once for all resources: every resource
// replays every event, whether it is a CSV log (spooled) or a snapshot
// (decoded once).
func TestReplayPipe(t *testing.T) {
	pkl, err := os.ReadFile("../../trace/torchsnap/testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		data   string
		events float64
	}{
		{"csv", smallTrace, 5},
		{"gzip csv", gzipped(t, smallTrace), 5},
		{"snapshot", string(pkl), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			// As a shell's pipe to /dev/stdin: opening the path again
			// reads an empty pipe once the writer is done.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			go func() {
				w.Write([]byte(tc.data))
				w.Close()
			}()
			p := fmt.Sprintf("/dev/fd/%d", r.Fd())
			out, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool,arena", "--json", p)
			if err != nil {
				t.Fatal(err)
			}
			var rows []map[string]any
			if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, r := range rows {
				if ev, _ := r["events"].(float64); ev <= 0 || ev != rows[0]["events"] || (tc.events > 0 && ev != tc.events) {
					t.Errorf("%s: %v events, want %v (as the first resource: %v)", r["resource"], r["events"], tc.events, rows[0]["events"])
				}
			}
		})
	}
}

// --max-expansion raises the bound on a snapshot's expansion: refused by
// default, replayed with a higher bound.
func TestReplayMaxExpansion(t *testing.T) {
	p := writeFile(t, "rep.pickle", expandingSnapshot(100, 700)) // 70,000 entries in 1.7 KB
	if _, _, err := run(t, "replay", "--device", "sim", "--resource", "direct", p); !errors.Is(err, trace.ErrExpansion) {
		t.Fatalf("default bound: error %v, want %v", err, trace.ErrExpansion)
	}
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "direct", "--max-expansion", "100000", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0]["events"] != 70000.0 {
		t.Errorf("%v\n%s", err, out)
	}
}

// A request no resource can hold, up to 2^63-1 bytes, is an out-of-memory
// failure at every resource: the replay counts it and goes on.
func TestReplayImpossibleSize(t *testing.T) {
	var b strings.Builder
	b.WriteString("Thread,Time,Action,Pointer,Size,Stream\n")
	sizes := []string{"9223372036854775807", "9223372036854775552", "9223372036852678657", "4611686018427387904"}
	for i, n := range sizes {
		fmt.Fprintf(&b, "1,10:00:00.%06d,allocate,0x%x,%s,0x0\n", i, 0x10000*(i+1), n)
	}
	b.WriteString("1,10:00:01.000000,allocate,0x9000000,4096,0x0\n")
	p := writeFile(t, "huge.csv", b.String())
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "all", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != len(registry.Replay().Every()) {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, r := range rows {
		if r["failures"] != float64(len(sizes)) || r["allocations"] != float64(len(sizes)+1) {
			t.Errorf("%s: %v failures of %v allocations, want %d of %d", r["resource"], r["failures"], r["allocations"], len(sizes), len(sizes)+1)
		}
	}
}

// streamalloc soak runs on the simulator for the time it is given, says
// the GPU is simulated, ends with an OK verdict and prints the result as
// JSON; bad flags are refused.
func TestSoakCommand(t *testing.T) {
	out, _, err := run(t, "soak", "--device", "sim", "--duration", "600ms", "--interval", "200ms", "--goroutines", "4", "--max-size", "262144", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"SIMULATED GPU", "corrupted words 0, leaked bytes 0", "verdict: OK", `"CorruptedWords": 0`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := run(t, "soak", "--device", "sim", "--duration", "0s"); !errors.Is(err, errNotPositive) {
		t.Errorf("--duration 0: %v, want %v", err, errNotPositive)
	}
}

// The host pools replay by name, never in "all": a trace's device
// allocations against page-locked memory, to study the pools. Requests no
// block could hold are out-of-memory failures, the rest are served, and
// the sanitizer finds every reuse ordered.
func TestReplayHostPools(t *testing.T) {
	var b strings.Builder
	b.WriteString("Thread,Time,Action,Pointer,Size,Stream\n")
	sizes := []string{"9223372036854775807", "9223372036852678657"}
	for i, n := range sizes {
		fmt.Fprintf(&b, "1,10:00:00.%06d,allocate,0x%x,%s,0x0\n", i, 0x10000*(i+1), n)
	}
	// Two streams, a free on each, and reuse after them.
	b.WriteString("1,10:00:01.000000,allocate,0x9000000,5000,0x1\n")
	b.WriteString("1,10:00:01.000001,free,0x9000000,5000,0x1\n")
	b.WriteString("1,10:00:01.000002,allocate,0xa000000,5000,0x2\n")
	b.WriteString("1,10:00:01.000003,allocate,0xb000000,3<<20,0x1\n")
	b.WriteString("1,10:00:01.000004,free,0xa000000,5000,0x2\n")
	p := writeFile(t, "host.csv", strings.Replace(b.String(), "3<<20", "3145728", 1))
	out, _, err := run(t, "replay", "--device", "sim", "--resource", "hostpool,hostpool_driver", "--sanitize", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%v\n%s", err, out)
	}
	for i, want := range []string{"hostpool", "hostpool_driver"} {
		r := rows[i]
		if r["resource"] != want || r["failures"] != float64(len(sizes)) || r["allocations"] != float64(len(sizes)+3) || r["frees"] != float64(2) {
			t.Errorf("row %d: %v", i, r)
		}
		if r["peak_reserved_bytes"].(float64) < 3<<20+5000 {
			t.Errorf("%s: peak reserved %v, below the peak live bytes", want, r["peak_reserved_bytes"])
		}
	}
	// Two streams reusing each other's memory: the driver's host pool
	// orders that reuse itself, which the sanitizer learns from its
	// reuse policies (without them it counts a dozen hazards here).
	out, _, err = run(t, "replay", "--device", "sim", "--resource", "hostpool,hostpool_driver", "--sanitize",
		"../../replay/testdata/torch-pipeline-2stream-b.csv.gz")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "failures 0, hazards 0 for every resource") {
		t.Errorf("the sanitizer's count is not 0 hazards for both:\n%s", out)
	}
	out, _, err = run(t, "replay", "--device", "sim", "--resource", "all", "--json", p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "hostpool") {
		t.Errorf("replay of all ran a host pool:\n%s", out)
	}
}
