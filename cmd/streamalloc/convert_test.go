package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

// Converting a trace and replaying the result gives the same figures as
// replaying the original, for a CSV log and for a PyTorch snapshot, plain
// and gzip'd.
func TestConvertReplaysTheSame(t *testing.T) {
	csv := writeFile(t, "t.csv", smallTrace)
	for _, tc := range []struct{ name, in, out string }{
		{"csv to csv.gz", csv, "c.csv.gz"},
		{"snapshot to csv", "../../trace/torchsnap/testdata/snapshot.pickle", "s.csv"},
		{"gzip'd snapshot to csv.gz", "../../trace/torchsnap/testdata/snapshot-p2.pickle.gz", "s2.csv.gz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), tc.out)
			if _, _, err := run(t, "convert", tc.in, out); err != nil {
				t.Fatal(err)
			}
			f, err := trace.Open(out, nil)
			if err != nil {
				t.Fatal(err)
			}
			if f.Format() != trace.FormatCSV {
				t.Errorf("%s is %s, want %s", out, f.Format(), trace.FormatCSV)
			}
			f.Close()
			want, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool", "--json", tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool", "--json", out)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := replayFigures(t, got), replayFigures(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("replay of the conversion differs:\n%v\nwant\n%v", g, w)
			}
		})
	}
}

// replayFigures decodes replay's JSON output and drops what differs from
// run to run or names the file: the times and the trace's name.
func replayFigures(t *testing.T, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, r := range rows {
		for _, k := range []string{"trace", "ns_per_event", "wall_ns"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("replay output lacks %q: %v", k, r)
			}
			delete(r, k)
		}
	}
	return rows
}

// Bad inputs are refused with their sentinel errors, and leave no output
// file behind.
func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	notTrace := writeFile(t, "x.csv", "hello\n")
	badLine := writeFile(t, "b.csv", trace.Header+"\n1,10:00:00.000001,allocate,0x10,abc,0x0\n")
	for _, tc := range []struct {
		name string
		args []string
		want error
	}{
		{"missing input", []string{filepath.Join(dir, "none.csv"), filepath.Join(dir, "o1.csv")}, os.ErrNotExist},
		{"not a trace", []string{notTrace, filepath.Join(dir, "o2.csv")}, trace.ErrHeader},
		{"bad line", []string{badLine, filepath.Join(dir, "o3.csv")}, trace.ErrSize},
		{"negative max-expansion", []string{"--max-expansion", "-1", notTrace, filepath.Join(dir, "o5.csv")}, errNegative},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"convert"}, tc.args...)...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	out := filepath.Join(dir, "o6.csv")
	csv := writeFile(t, "t.csv", smallTrace)
	if _, _, err := run(t, "convert", csv, filepath.Join(dir, "no", "o6.csv")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("convert into a missing folder: err = %v, want %v", err, os.ErrNotExist)
	}
	if _, _, err := run(t, "convert", badLine, out); !errors.Is(err, trace.ErrSize) {
		t.Fatalf("err = %v, want %v", err, trace.ErrSize)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("failed conversions left files: %v", left)
	}
}
