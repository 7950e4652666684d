package report_test

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
)

// ramp returns a series of n points, one per 10 events, whose live bytes
// rise to peakLive and whose reserved bytes stay reserved above them.
func ramp(n int, peakLive, reserved uint64) []replay.Sample {
	s := make([]replay.Sample, n)
	for i := range s {
		live := peakLive * uint64(i+1) / uint64(n)
		s[i] = replay.Sample{Event: int64(i*10 + 9), Live: live, Reserved: live + reserved}
	}
	return s
}

func result(trace, resource string, series []replay.Sample) *replay.Result {
	r := &replay.Result{Trace: trace, Resource: resource, Device: "sim", Events: int64(10 * len(series)),
		Allocations: int64(5 * len(series)), Series: series, NsPerEvent: 123.45}
	for _, s := range series {
		r.PeakLiveBytes = max(r.PeakLiveBytes, s.Live)
		r.PeakReservedBytes = max(r.PeakReservedBytes, s.Reserved)
	}
	if r.PeakLiveBytes > 0 {
		r.Fragmentation = float64(r.PeakReservedBytes) / float64(r.PeakLiveBytes)
	}
	return r
}

// sections splits a page into its per-trace sections.
func sections(t *testing.T, page string) []string {
	t.Helper()
	var out []string
	for {
		i := strings.Index(page, `<section class="trace">`)
		if i < 0 {
			return out
		}
		j := strings.Index(page[i:], "</section>")
		if j < 0 {
			t.Fatalf("unterminated section in\n%s", page[i:])
		}
		out = append(out, page[i:i+j])
		page = page[i+j:]
	}
}

var (
	svgTextRE = regexp.MustCompile(`(?s)<text [^>]*>([^<]*)</text>`)
	rowRE     = regexp.MustCompile(`(?s)<tr class="result[^"]*">(.*?)</tr>`)
	cellRE    = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	pathRE    = regexp.MustCompile(`<path d="(M[^"]+)" style="([^"]*)"`)
)

// svgTexts returns the text elements of the svg in sec.
func svgTexts(sec string) []string {
	var out []string
	for _, m := range svgTextRE.FindAllStringSubmatch(sec, -1) {
		out = append(out, m[1])
	}
	return out
}

// linesStroked returns how many path elements of sec are stroked with
// color (the reserved lines and their legend thumbnails) and have more
// than 10 segments.
func linesStroked(sec, color string) int {
	n := 0
	for _, m := range pathRE.FindAllStringSubmatch(sec, -1) {
		if strings.Contains(m[2], "stroke:"+color) && strings.Count(m[1], "L") > 10 {
			n++
		}
	}
	return n
}

func TestWriteHTMLStructure(t *testing.T) {
	results := []*replay.Result{
		result("train.csv.gz", "pool", ramp(300, 3<<30, 1<<29)),
		result("serve.csv", "pool", ramp(50, 200<<20, 64<<20)),
		result("train.csv.gz", "async", ramp(300, 3<<30, 1<<30)),
		result("train.csv.gz", "direct", nil), // no series: a row and a note
		result("serve.csv", "async", ramp(50, 200<<20, 10<<20)),
		result("empty.csv", "pool", nil),
	}
	results[2].Failures = 7
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, results, report.Options{Title: "T & T", Note: "go test"}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()

	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(page, "</html>\n") {
		t.Errorf("not a whole HTML document:\n%.200s ... %s", page, page[max(0, len(page)-50):])
	}
	if !strings.Contains(page, "<title>T &amp; T</title>") || !strings.Contains(page, `<p class="note">go test</p>`) {
		t.Error("title or note missing or unescaped")
	}
	// Self-contained: nothing fetched. The SVG namespaces are names, not
	// fetches; nothing else may name a URL.
	rest := strings.NewReplacer(`xmlns="http://www.w3.org/2000/svg"`, "", `xmlns:xlink="http://www.w3.org/1999/xlink"`, "").Replace(page)
	for _, bad := range []string{"http:", "https:", "//cdn", "<script", "<link", "@import", "url(", "<img", "<iframe", "src="} {
		if strings.Contains(rest, bad) {
			t.Errorf("page contains %q: not self-contained", bad)
		}
	}
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d <svg> elements, want 2 (train and serve; empty has no series)", n)
	}

	want := []struct {
		trace     string
		resources []string // in table order
		charted   []string // resources with a reserved line, in legend order
		noSeries  string
	}{
		{"train.csv.gz", []string{"pool", "async", "direct"}, []string{"pool", "async"}, "No series was recorded for: direct."},
		{"serve.csv", []string{"pool", "async"}, []string{"pool", "async"}, ""},
		{"empty.csv", []string{"pool"}, nil, "No series was recorded for: pool."},
	}
	secs := sections(t, page)
	if len(secs) != len(want) {
		t.Fatalf("%d sections, want %d", len(secs), len(want))
	}
	colors := []string{"#0072B2", "#D55E00"} // the palette's first two
	for i, w := range want {
		sec := secs[i]
		if !strings.Contains(sec, "<h2>"+w.trace+"</h2>") {
			t.Errorf("section %d: heading %q missing", i, w.trace)
		}
		if got := strings.Count(sec, "<svg"); got != min(len(w.charted), 1) {
			t.Errorf("%s: %d svg, want %d", w.trace, got, min(len(w.charted), 1))
		}
		if len(w.charted) > 0 {
			texts := svgTexts(sec)
			// The legend: live once, then each charted resource, in order.
			legend := append([]string{"live"}, w.charted...)
			if tail := texts[max(0, len(texts)-len(legend)):]; fmt.Sprint(tail) != fmt.Sprint(legend) {
				t.Errorf("%s: legend %q, want %q (all texts %q)", w.trace, tail, legend, texts)
			}
			if !slicesContain(texts, "event") || !slicesContain(texts, "bytes (GiB)") && !slicesContain(texts, "bytes (MiB)") {
				t.Errorf("%s: axis labels missing: %q", w.trace, texts)
			}
			// One reserved line per resource, in its color, plus the live
			// line in black.
			for j := range w.charted {
				if n := linesStroked(sec, colors[j]); n != 1 {
					t.Errorf("%s: %d long lines in %s, want 1 for %s", w.trace, n, colors[j], w.charted[j])
				}
			}
			if n := linesStroked(sec, "#000000"); n != 1 {
				t.Errorf("%s: %d long black lines, want 1 (live)", w.trace, n)
			}
		}
		if w.noSeries != "" && !strings.Contains(sec, w.noSeries) {
			t.Errorf("%s: note %q missing", w.trace, w.noSeries)
		}
		if w.noSeries == "" && strings.Contains(sec, "No series") {
			t.Errorf("%s: unexpected no-series note", w.trace)
		}
		rows := rowRE.FindAllStringSubmatch(sec, -1)
		if len(rows) != len(w.resources) {
			t.Fatalf("%s: %d rows, want %d", w.trace, len(rows), len(w.resources))
		}
		for j, row := range rows {
			cells := cellRE.FindAllStringSubmatch(row[1], -1)
			if len(cells) != 10 {
				t.Fatalf("%s row %d: %d cells, want 10", w.trace, j, len(cells))
			}
			if cells[0][1] != w.trace || cells[1][1] != w.resources[j] || cells[2][1] != "sim" {
				t.Errorf("%s row %d: trace/resource/device %q %q %q", w.trace, j, cells[0][1], cells[1][1], cells[2][1])
			}
		}
	}

	// The async row of train: every column, formatted.
	rows := rowRE.FindAllStringSubmatch(secs[0], -1)
	var cells []string
	for _, c := range cellRE.FindAllStringSubmatch(rows[1][1], -1) {
		cells = append(cells, c[1])
	}
	r := results[2]
	wantCells := []string{"train.csv.gz", "async", "sim", "3,000", "1,500",
		"3.0 GiB<small>3,221,225,472 B</small>", "4.0 GiB<small>4,294,967,296 B</small>",
		"1.333", "123.5", "7"}
	if fmt.Sprint(cells) != fmt.Sprint(wantCells) {
		t.Errorf("async row\n got %q\nwant %q\n(result %+v)", cells, wantCells, *r)
	}
	if !strings.Contains(rows[1][0], `class="result failed"`) {
		t.Error("row with failures not marked failed")
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Names from the results are escaped in the page and in the chart.
func TestWriteHTMLEscapes(t *testing.T) {
	evil := `<script>alert("x")</script>&`
	var buf bytes.Buffer
	err := report.WriteHTML(&buf, []*replay.Result{result(evil, evil, ramp(20, 1<<20, 0))}, report.Options{Note: evil})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "<script") {
		t.Errorf("unescaped name in page:\n%s", buf.String())
	}
	if n := strings.Count(buf.String(), "&lt;script&gt;"); n < 4 { // heading, note, row, legend
		t.Errorf("escaped name appears %d times, want at least 4", n)
	}
}

// errWriter fails every write.
type errWriter struct{}

var errDisk = errors.New("disk full")

func (errWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriteHTMLErrors(t *testing.T) {
	ok := []*replay.Result{result("t", "pool", ramp(10, 1<<20, 0))}
	for _, tc := range []struct {
		name    string
		results []*replay.Result
		opts    report.Options
		w       func() (interface{ Write([]byte) (int, error) }, *bytes.Buffer)
		want    error
	}{
		{name: "nil result", results: []*replay.Result{ok[0], nil}, want: report.ErrNilResult},
		{name: "negative width", results: ok, opts: report.Options{ChartWidth: -1}, want: report.ErrOptions},
		{name: "negative height", results: ok, opts: report.Options{ChartHeight: -5}, want: report.ErrOptions},
		{name: "too narrow", results: ok, opts: report.Options{ChartWidth: 199}, want: report.ErrOptions},
		{name: "too high", results: ok, opts: report.Options{ChartHeight: 20001}, want: report.ErrOptions},
		{name: "writer fails", results: ok, want: errDisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var err error
			if tc.want == errDisk {
				err = report.WriteHTML(errWriter{}, tc.results, tc.opts)
			} else {
				err = report.WriteHTML(&buf, tc.results, tc.opts)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes on bad input", buf.Len())
			}
		})
	}
}

func TestWriteHTMLEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, nil, report.Options{}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if !strings.Contains(page, "No results to show.") || strings.Contains(page, "<svg") ||
		!strings.Contains(page, "<title>streamalloc replay</title>") {
		t.Errorf("empty page:\n%s", page)
	}
}

// The same results on two devices: each line names its device, and a
// repeated resource gets a number.
func TestLegendNames(t *testing.T) {
	a := result("t", "pool", ramp(20, 1<<20, 0))
	b := result("t", "pool", ramp(20, 1<<20, 1<<20))
	b.Device = "NVIDIA H100"
	c := result("t", "pool", ramp(20, 1<<20, 2<<20))
	var buf bytes.Buffer
	if err := report.WriteHTML(&buf, []*replay.Result{a, b, c}, report.Options{}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(buf.String())
	want := []string{"live", "pool (sim)", "pool (NVIDIA H100)", "pool (sim) #2"}
	if tail := texts[max(0, len(texts)-len(want)):]; fmt.Sprint(tail) != fmt.Sprint(want) {
		t.Errorf("legend %q, want %q", tail, want)
	}
}

// Arbitrary series (unordered events, zeros, extremes) and names never
// make WriteHTML panic or fail, and each trace with a series gets exactly
// one chart.
func FuzzWriteHTML(f *testing.F) {
	f.Add("t", "pool", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(1))
	f.Add("", "", []byte{}, uint8(0))
	f.Add("<a>", "x\x00y", []byte{255, 255, 255, 255, 255, 255, 255, 255, 0, 0}, uint8(3))
	f.Fuzz(func(t *testing.T, trace, resource string, data []byte, n uint8) {
		var series []replay.Sample
		for len(data) >= 3 {
			series = append(series, replay.Sample{
				Event:    int64(int8(data[0])) << (data[1] % 56),
				Live:     uint64(data[1]) << (data[2] % 57),
				Reserved: ^uint64(0) >> (data[2] % 64),
			})
			data = data[3:]
		}
		var results []*replay.Result
		for i := range int(n % 4) {
			results = append(results, &replay.Result{Trace: trace, Resource: fmt.Sprint(resource, i), Series: series})
		}
		var buf bytes.Buffer
		if err := report.WriteHTML(&buf, results, report.Options{}); err != nil {
			t.Fatal(err)
		}
		want := 0
		if len(results) > 0 && len(series) > 0 {
			want = 1
		}
		if got := strings.Count(buf.String(), "<svg"); got != want {
			t.Errorf("%d svg, want %d", got, want)
		}
	})
}

// Pages may be written from several goroutines at once (gonum's font
// cache is shared); run under -race.
func TestWriteHTMLConcurrent(t *testing.T) {
	results := []*replay.Result{result("a", "pool", ramp(200, 1<<30, 1<<28)), result("a", "async", ramp(200, 1<<30, 1<<29))}
	var want bytes.Buffer
	if err := report.WriteHTML(&want, results, report.Options{}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var buf bytes.Buffer
			err := report.WriteHTML(&buf, results, report.Options{})
			if err == nil && !bytes.Equal(buf.Bytes(), want.Bytes()) {
				err = errors.New("page differs from the one written alone")
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// A page of 3 traces × 5 resources with full 2000-point series, the
// largest --html page the shared traces make.
func BenchmarkWriteHTML(b *testing.B) {
	var results []*replay.Result
	for _, tr := range []string{"a", "b", "c"} {
		for i, rs := range []string{"direct", "async", "pool", "arena", "binning"} {
			results = append(results, result(tr, rs, ramp(2000, 1<<30, uint64(i)<<27)))
		}
	}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := report.WriteHTML(&buf, results, report.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "page-bytes")
}
