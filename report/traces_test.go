package report_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
	"github.com/streamalloc/streamalloc/trace"
)

// pageEnv names a file that TestPageFromSharedTraces writes its page to;
// scripts/html-check.sh sets it to screenshot the page in Chromium.
const pageEnv = "STREAMALLOC_REPORT_HTML"

// The page of the three shared traces (replay/testdata) replayed on the
// simulator with async and pool, as `streamalloc replay --device sim
// --resource async,pool --html` draws it: one chart per trace whose
// legend names both resources, and a table row per replay.
func TestPageFromSharedTraces(t *testing.T) {
	files, err := filepath.Glob("../replay/testdata/*.csv.gz")
	if err != nil || len(files) != 3 {
		t.Fatalf("shared traces: %v %v", files, err)
	}
	resources := []struct {
		name string
		make func(dev *sim.Device) (mr.Resource, error)
	}{
		{"async", func(dev *sim.Device) (mr.Resource, error) {
			return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
		}},
		{"pool", func(dev *sim.Device) (mr.Resource, error) {
			return mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
		}},
	}
	var results []*replay.Result
	for _, file := range files {
		for _, rs := range resources {
			d, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			res, err := rs.make(d.(*sim.Device))
			if err != nil {
				t.Fatal(err)
			}
			f, err := trace.Open(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.Run(context.Background(), f, d, res, replay.Options{Resource: rs.name, Device: "sim", SeriesPoints: 2000})
			f.Close()
			if err != nil {
				t.Fatalf("%s on %s: %v", file, rs.name, err)
			}
			results = append(results, r)
		}
	}

	var buf bytes.Buffer
	err = report.WriteHTML(&buf, results, report.Options{
		Title: "streamalloc replay: shared traces on the simulator",
		Note:  "go test ./report -run TestPageFromSharedTraces (async, pool; --device sim)",
	})
	if err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if n := strings.Count(page, "<svg"); n != len(files) {
		t.Errorf("%d charts, want %d", n, len(files))
	}
	secs := sections(t, page)
	if len(secs) != len(files) {
		t.Fatalf("%d sections, want %d", len(secs), len(files))
	}
	for i, sec := range secs {
		name := results[2*i].Trace
		if !strings.Contains(sec, "<h2>"+name+"</h2>") {
			t.Errorf("section %d is not %s", i, name)
		}
		texts := svgTexts(sec)
		if tail := texts[max(0, len(texts)-3):]; strings.Join(tail, ",") != "live,async,pool" {
			t.Errorf("%s: legend %q", name, tail)
		}
		for _, color := range []string{"#000000", "#0072B2", "#D55E00"} {
			if n := linesStroked(sec, color); n != 1 {
				t.Errorf("%s: %d long lines in %s, want 1", name, n, color)
			}
		}
		if n := len(rowRE.FindAllString(sec, -1)); n != len(resources) {
			t.Errorf("%s: %d rows, want %d", name, n, len(resources))
		}
	}
	if out := os.Getenv(pageEnv); out != "" {
		if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, buf.Len())
	}
}
