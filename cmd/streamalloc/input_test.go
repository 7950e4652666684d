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
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != len(registry.Replay()) {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, r := range rows {
		if r["failures"] != float64(len(sizes)) || r["allocations"] != float64(len(sizes)+1) {
			t.Errorf("%s: %v failures of %v allocations, want %d of %d", r["resource"], r["failures"], r["allocations"], len(sizes), len(sizes)+1)
		}
	}
}
