package main

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/pluggable"
	"github.com/streamalloc/streamalloc/tune"
)

func TestTuneBadInput(t *testing.T) {
	p := writeFile(t, "small.csv", smallTrace)
	for _, tc := range []struct {
		args []string
		want error
	}{
		{[]string{"--max-ns", "-1", p}, errNegative},
		{[]string{"--max-fragmentation", "-0.5", p}, errNegative},
		{[]string{"--workers", "-2", p}, errNegative},
		{[]string{"--resource", "direct", p}, registry.ErrUnknown},
		{[]string{"--resource", "pool,", p}, registry.ErrUnknown},
		{[]string{"--max-ns", "0.001", p}, tune.ErrNoSetting},
		{[]string{"--max-fragmentation", "0.5", p}, tune.ErrNoSetting},
		{[]string{p + ".missing"}, os.ErrNotExist},
	} {
		_, _, err := run(t, append([]string{"tune"}, tc.args...)...)
		if !errors.Is(err, tc.want) {
			t.Errorf("tune %v: %v, want %v", tc.args, err, tc.want)
		}
	}
	if _, _, err := run(t, "tune"); err == nil || !strings.Contains(err.Error(), "requires at least 1 arg") {
		t.Errorf("tune with no trace: %v", err)
	}
	if _, _, err := run(t, "tune", writeFile(t, "bad.csv", "not,a,trace\n")); err == nil {
		t.Error("tune of a file that is no trace: no error")
	}
}

// The JSON has the documented fields; the picks are outcomes of the run,
// with Go code and, for pool and async, a configuration string that
// pluggable parses into the same options.
func TestTuneJSON(t *testing.T) {
	p := writeFile(t, "small.csv", smallTrace)
	out, stderr, err := run(t, "tune", "--resource", "pool,async", "--json", "--check", "--device", "sim", p)
	if err != nil {
		t.Fatal(err)
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, but got %q", stderr)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"check_device", "defaults", "fastest", "least_reserved", "outcomes", "replays", "traces"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	var rep tuneReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	grid, _ := tune.Grid([]string{"pool", "async"})
	if len(rep.Outcomes) != len(grid) || rep.Replays != len(grid) || len(rep.Traces) != 1 || len(rep.Defaults) != 2 {
		t.Errorf("%d outcomes, %d replays, traces %v, %d defaults; want %d, %d, 1, 2",
			len(rep.Outcomes), rep.Replays, rep.Traces, len(rep.Defaults), len(grid), len(grid))
	}
	for _, pk := range []tunePick{rep.LeastReserved, rep.Fastest} {
		if !slices.ContainsFunc(rep.Outcomes, func(o tune.Outcome) bool { return o.Setting == pk.Setting && o.ReservedBytes == pk.ReservedBytes }) {
			t.Errorf("pick %v is no outcome of the run", pk.Setting)
		}
		if pk.GoCode != pk.Setting.GoCode() || pk.GoCode == "" {
			t.Errorf("go code %q", pk.GoCode)
		}
		if len(pk.Checked) != 1 || pk.Checked[0] != pk.Traces[0].PeakReservedBytes {
			t.Errorf("%v: checked %v, predicted %d (the simulator checks itself exactly)", pk.Setting, pk.Checked, pk.Traces[0].PeakReservedBytes)
		}
		if pk.Conf == "" {
			if _, ok := pk.Setting.Conf(); ok || pk.NoConf == "" {
				t.Errorf("%v: no conf string, and no reason (%q)", pk.Setting, pk.NoConf)
			}
			continue
		}
		c, err := pluggable.ParseConfig(pk.Conf)
		if err != nil {
			t.Fatalf("%q: %v", pk.Conf, err)
		}
		switch s := pk.Setting; s.Resource {
		case "pool":
			if c.Kind != "pool" || c.ChunkSize != uint64(s.Pool.ChunkSize) || c.ReleaseThreshold != uint64(s.Pool.ReleaseThreshold) || c.SplitBig != s.Pool.SplitBig {
				t.Errorf("%v: conf %q parses to %+v", s, pk.Conf, c)
			}
		case "async":
			if c.Kind != "async" || c.AsyncPool != "own" || c.ReleaseThreshold != s.Async.ReleaseThreshold {
				t.Errorf("%v: conf %q parses to %+v", s, pk.Conf, c)
			}
		}
	}
}

// The picks are validated settings unless --unvalidated: on a trace where
// every async setting reserves the same, async alone picks its defaults
// (the only validated one), and with --unvalidated the JSON marks what it
// picked.
func TestTuneValidated(t *testing.T) {
	p := writeFile(t, "small.csv", smallTrace)
	out, _, err := run(t, "tune", "--resource", "async", "--json", "--device", "sim", p)
	if err != nil {
		t.Fatal(err)
	}
	var rep tuneReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, pk := range []tunePick{rep.LeastReserved, rep.Fastest} {
		if pk.Setting != (tune.Setting{Resource: "async"}) || !pk.Validated {
			t.Errorf("pick %v (validated %v), want async's defaults", pk.Setting, pk.Validated)
		}
	}
	n := 0
	for _, o := range rep.Outcomes {
		if !o.Validated {
			n++
		}
	}
	if n != len(rep.Outcomes)-1 {
		t.Errorf("%d of %d async outcomes unvalidated, want all but the defaults", n, len(rep.Outcomes))
	}
	out, _, err = run(t, "tune", "--resource", "async", "--unvalidated", "--max-fragmentation", "100", "--device", "sim", p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "least reserved (host time at most any ns/event): async (defaults)\n") {
		t.Errorf("ties go to the defaults, listed first:\n%s", out)
	}
}

func TestTuneText(t *testing.T) {
	p := writeFile(t, "small.csv", smallTrace)
	out, _, err := run(t, "tune", "--resource", "arena", "--device", "sim", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 traces, 12 settings, 12 replays on the simulator",
		"least reserved (host time at most any ns/event): arena",
		"Go:               res, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{",
		"STREAMALLOC_CONF: none (the configuration string builds pool and async only)",
		"defaults:\n  arena (defaults)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
