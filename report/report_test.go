package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files of package report")

// tinyTimeline is a timeline of 6 events on two streams: a block in a
// chunk, one refused, one passed to the upstream whole, one freed on the
// other stream, with times and a stack.
func tinyTimeline() *replay.Timeline {
	return &replay.Timeline{
		Events:  6,
		Times:   []time.Duration{10 * time.Hour, 10*time.Hour + 5*time.Microsecond, 10*time.Hour + 4*time.Microsecond, 10*time.Hour + 9*time.Microsecond, 10*time.Hour + 20*time.Microsecond, 10*time.Hour + 21*time.Microsecond},
		Streams: []uint64{0, 0x7f00},
		Blocks: []replay.Block{
			{Alloc: 0, Free: 3, Size: 1000, Stream: 0, FreeStream: 1, Addr: 0x7f0000000000, Stack: 0},
			{Alloc: 1, Free: 4, Size: 1 << 40, Stream: 0, FreeStream: 0, Failed: true, Stack: -1},
			{Alloc: 2, Free: -1, Size: 3 << 20, Stream: 1, FreeStream: -1, Addr: 0x7f0100000000, Stack: 1},
			{Alloc: 5, Free: -1, Size: 256, Stream: 1, FreeStream: -1, Addr: 0x7f0000000400, Stack: 0},
		},
		Reserved:      []replay.Step{{Event: 0, Bytes: 2 << 20}, {Event: 2, Bytes: 5 << 20}, {Event: 4, Bytes: 3 << 20}},
		SegmentsKnown: true,
		Segments:      []replay.SegmentSpan{{Base: 0x7f0000000000, Size: 2 << 20, Stream: 0, From: 0, To: -1}},
		Stacks: [][]trace.Frame{
			{{Function: "forward", File: "train.py", Line: 42}, {Function: "<module>", File: "train.py", Line: 7}},
			{{Function: "step", File: "optim.py", Line: 3}, {Function: "<module>", File: "train.py", Line: 7}},
		},
	}
}

func tinyResult(resource string) *replay.Result {
	return &replay.Result{Trace: "tiny.pickle", Resource: resource, Device: "Simulated H100", Simulated: true,
		Events: 6, Allocations: 4, Frees: 2, PeakLiveBytes: 1<<40 + 3<<20 + 1000, PeakReservedBytes: 5 << 20,
		Fragmentation: 0.5, NsPerEvent: 123.45, Failures: 1, Streams: 2, Timeline: tinyTimeline()}
}

func write(t testing.TB, results []*replay.Result, opts Options) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, results, opts); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// The data the page embeds for a small trace, decoded as the page's
// script reads it, against a golden file: every column and the header.
func TestPageDataGolden(t *testing.T) {
	a, b := tinyResult("pool"), tinyResult("direct")
	b.Timeline.SegmentsKnown, b.Timeline.Segments = false, nil
	page := write(t, []*replay.Result{a, b}, Options{})
	data, err := pageData(page)
	if err != nil {
		t.Fatal(err)
	}
	d := data["sa-data-0"]
	if len(data) != 1 || d == nil {
		t.Fatalf("containers %v", data)
	}
	cols := map[string]string{}
	for name, vals := range d.cols {
		cols[name] = fmt.Sprint(vals)
	}
	delete(d.raw, "columns")
	got, err := json.MarshalIndent(map[string]any{"header": d.raw, "columns": cols}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/tiny-page-data.golden.json"
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got)+"\n" != string(want) {
		t.Errorf("page data differs from %s (go test ./report -run TestPageDataGolden -update to accept):\n%s", golden, got)
	}
}

var rowRE = regexp.MustCompile(`(?s)<tr class="result([^"]*)">(.*?)</tr>`)

func TestPageStructure(t *testing.T) {
	train := tinyResult("pool")
	train.Trace = "train & <eval>.csv"
	async := tinyResult("async")
	async.Trace = train.Trace
	async.PeakReservedBytes = 8 << 20
	async.Failures = 0
	other := tinyResult("pool")
	other.Trace, other.Simulated, other.Device = "serve.csv", false, "NVIDIA H100"
	noSeries := tinyResult("direct")
	noSeries.Trace, noSeries.Timeline, noSeries.PeakReservedBytes = "serve.csv", nil, 6<<20
	opts := Options{Title: "T & T", Command: "streamalloc replay --html 'a b.html' x.csv", Date: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC), Note: "a note"}
	page := write(t, []*replay.Result{train, other, async, noSeries}, opts)

	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(page, "</html>\n") {
		t.Errorf("not a whole document: %.80s ... %s", page, page[max(0, len(page)-40):])
	}
	for _, want := range []string{
		"<title>T &amp; T</title>",
		"<code>streamalloc replay --html &#39;a b.html&#39; x.csv</code>",
		"<dd>2026-11-24 10:00:00 UTC</dd>",
		"<dd>Simulated H100 (simulated); NVIDIA H100</dd>",
		`<p class="banner" id="simulated">`,
		`<p class="note">a note</p>`,
		"<h2>train &amp; &lt;eval&gt;.csv</h2>",
		`<section class="trace" id="trace-0" data-data="sa-data-0">`,
		`<section class="trace" id="trace-1" data-data="sa-data-1">`,
		"6 events · 4 allocations · 2 streams · peak live 1.0 TiB · 21.000 µs of trace time",
		"Not charted: direct (Simulated H100) (no timeline or series recorded, or a timeline of other events).",
		"<th>device</th>", // two devices: a device column
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Self-contained: nothing names a URL or loads anything.
	for _, bad := range []string{"http:", "https:", "//cdn", "<link", "@import", "url(", "<img", "<iframe", " src=", "fetch("} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	// Summary rows, by trace, with the least reserving marked.
	rows := rowRE.FindAllStringSubmatch(page, -1)
	if len(rows) != 4 {
		t.Fatalf("%d summary rows, want 4", len(rows))
	}
	for i, want := range []struct{ class, resource, vs string }{
		{" failed best first", "pool", "least"},
		{"", "async", "&#43;60.0%"}, // html/template writes + as &#43;
		{" failed best first", "pool (NVIDIA H100)", "least"},
		{" failed", "direct (Simulated H100)", "&#43;20.0%"},
	} {
		if rows[i][1] != want.class || !strings.Contains(rows[i][2], `<td class="resource">`+want.resource+"</td>") ||
			!strings.Contains(rows[i][2], `<td class="num vs">`+want.vs+"</td>") {
			t.Errorf("row %d: class %q cells %s, want %+v", i, rows[i][1], rows[i][2], want)
		}
	}
	if !strings.Contains(rows[0][2], `<th scope="rowgroup" rowspan="2"><a href="#trace-0">train &amp; &lt;eval&gt;.csv</a></th>`) ||
		!strings.Contains(rows[0][2], "5.0 MiB<small>5,242,880 B</small>") {
		t.Errorf("first row: %s", rows[0][2])
	}
	// The data: the first trace charts both resources, the second only
	// the one with a timeline.
	data, err := pageData(page)
	if err != nil {
		t.Fatal(err)
	}
	names := func(d *decoded) (out []string) {
		for _, r := range d.header.Resources {
			out = append(out, r.Name+"/"+r.Color+"/"+r.Segments)
		}
		return out
	}
	if got := fmt.Sprint(names(data["sa-data-0"])); got != "[pool/#0072B2/reported async/#D55E00/reported]" {
		t.Errorf("trace 0 resources %s", got)
	}
	if got := fmt.Sprint(names(data["sa-data-1"])); got != "[pool (NVIDIA H100)/#0072B2/reported]" {
		t.Errorf("trace 1 resources %s", got)
	}
	if h := data["sa-data-0"].header; h.Name != train.Trace || h.Events != 6 || !h.Timed || h.Blocks != 4 || h.SeriesOnly {
		t.Errorf("trace 0 header %+v", h)
	}
}

// The simulated banner appears only when a result ran on the simulator.
func TestPageSimulatedBanner(t *testing.T) {
	r := tinyResult("pool")
	r.Simulated = false
	if page := write(t, []*replay.Result{r}, Options{}); strings.Contains(page, `id="simulated"`) || strings.Contains(page, "(simulated)") {
		t.Error("banner on a page of a real device")
	}
}

// Names from the results reach the page escaped; none can end the data
// or the script elements.
func TestPageEscapes(t *testing.T) {
	evil := `</script><script>alert("x")</script>&`
	r := tinyResult(evil)
	r.Trace, r.Device = evil, evil
	r.Timeline.Stacks[0][0].Function = evil
	page := write(t, []*replay.Result{r}, Options{Title: evil, Command: evil, Note: evil})
	if strings.Contains(page, "alert(") && strings.Contains(page, `<script>alert`) {
		t.Errorf("unescaped name in the page")
	}
	if n := strings.Count(page, "<script"); n != 2 {
		t.Errorf("%d script elements, want 2 (the data and the viewer)", n)
	}
	data, err := pageData(page)
	if err != nil {
		t.Fatal(err)
	}
	h := data["sa-data-0"].header
	if h.Name != evil || h.Resources[0].Name != evil || !strings.HasPrefix(h.Frames[0], evil) {
		t.Errorf("names in the data: %q %q %q", h.Name, h.Resources[0].Name, h.Frames[0])
	}
	if strings.Contains(strings.ToLower(viewerJS), "</script") {
		t.Error("viewer.js contains </script")
	}
}

// A trace with series but no timeline is drawn from the series: each
// point's maximum from the first event it covers.
func TestPageSeriesOnly(t *testing.T) {
	r := &replay.Result{Trace: "t", Resource: "pool", Device: "d", Events: 30, PeakReservedBytes: 900,
		Series: []replay.Sample{{Event: 9, Live: 100, Reserved: 500}, {Event: 19, Live: 300, Reserved: 900}, {Event: 29, Live: 50, Reserved: 800}}}
	data, err := pageData(write(t, []*replay.Result{r}, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	d := data["sa-data-0"]
	if !d.header.SeriesOnly || d.header.Events != 30 || d.header.Blocks != 0 {
		t.Errorf("header %+v", d.header)
	}
	for col, want := range map[string]string{
		"live.ev": "[0 10 20]", "live.val": "[100 300 50]", "r0.res.ev": "[0 10 20]", "r0.res.val": "[500 900 800]",
	} {
		if got := fmt.Sprint(d.cols[col]); got != want {
			t.Errorf("%s = %s, want %s", col, got, want)
		}
	}
}

// Two results of one trace name whose timelines differ (two files of the
// same name): the first is charted, the other listed as not charted.
func TestPageDifferentTimelines(t *testing.T) {
	a, b := tinyResult("pool"), tinyResult("arena")
	b.Timeline.Blocks[0].Size++
	page := write(t, []*replay.Result{a, b}, Options{})
	if !strings.Contains(page, "Not charted: arena") {
		t.Error("the differing result is not listed as not charted")
	}
	data, err := pageData(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(data["sa-data-0"].header.Resources); n != 1 {
		t.Errorf("%d resources charted, want 1", n)
	}
}

func TestPageEmpty(t *testing.T) {
	page := write(t, nil, Options{})
	if !strings.Contains(page, "No results to show.") || strings.Contains(page, "<table") || strings.Contains(page, "sa-data") ||
		!strings.Contains(page, "<title>streamalloc replay</title>") {
		t.Errorf("empty page:\n%s", page)
	}
}

// errWriter fails every write.
type errWriter struct{}

var errDisk = errors.New("disk full")

func (errWriter) Write([]byte) (int, error) { return 0, errDisk }

func TestWriteHTMLErrors(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, []*replay.Result{tinyResult("pool"), nil}, Options{}); !errors.Is(err, ErrNilResult) || buf.Len() != 0 {
		t.Errorf("nil result: %v, %d bytes written", err, buf.Len())
	}
	if err := WriteHTML(errWriter{}, []*replay.Result{tinyResult("pool")}, Options{}); !errors.Is(err, errDisk) {
		t.Errorf("failing writer: %v", err)
	}
	// A size beyond what the page's numbers hold exactly is clamped, not
	// an error: the page still draws.
	r := tinyResult("pool")
	r.Timeline.Reserved[1].Bytes = 1 << 62
	if err := WriteHTML(&buf, []*replay.Result{r}, Options{}); err != nil {
		t.Errorf("huge reserved bytes: %v", err)
	}
}

// The same resource on two devices and twice on one: each has its own name.
func TestLegendNames(t *testing.T) {
	a, b, c := tinyResult("pool"), tinyResult("pool"), tinyResult("pool")
	b.Device = "NVIDIA H100"
	got := legendNames([]*replay.Result{a, b, c})
	if want := "[pool (Simulated H100) pool (NVIDIA H100) pool (Simulated H100) #2]"; fmt.Sprint(got) != want {
		t.Errorf("names %q, want %s", got, want)
	}
}

func TestTimelineTimes(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		in   []time.Duration
		want string
	}{
		{nil, "[]"},
		{[]time.Duration{5, 7, 6, 9}, "[0 2 2 4]"},                                    // a step back is held
		{[]time.Duration{23*h + 59*time.Minute, 1 * time.Minute}, "[0 120000000000]"}, // midnight
	} {
		if got := fmt.Sprint(timelineTimes(tc.in)); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.in, got, tc.want)
		}
	}
}

// Arbitrary timelines (random segments, blocks inside and outside them,
// refusals, frees after the timeline) always make a page whose data
// decode to the timeline's blocks.
func FuzzWriteHTML(f *testing.F) {
	f.Add(uint64(1), "t", "pool", true)
	f.Add(uint64(2), "", "", false)
	f.Add(uint64(3), "<a>", "x\x00y", true)
	f.Fuzz(func(t *testing.T, seed uint64, name, resource string, known bool) {
		tl := randomTimelineSeed(seed, known)
		r := &replay.Result{Trace: name, Resource: resource, Events: tl.Events, Timeline: tl}
		page := write(t, []*replay.Result{r, r}, Options{})
		data, err := pageData(page)
		if err != nil {
			t.Fatal(err)
		}
		d := data["sa-data-0"]
		if d == nil || d.header.Blocks != len(tl.Blocks) || len(d.cols["alloc"]) != len(tl.Blocks) || len(d.header.Resources) != 2 {
			t.Fatalf("data %+v", d)
		}
		for i, b := range tl.Blocks {
			if d.cols["alloc"][i] != b.Alloc || d.cols["free"][i] != b.Free || d.cols["size"][i] != b.Size {
				t.Fatalf("block %d: %d %d %d, want %+v", i, d.cols["alloc"][i], d.cols["free"][i], d.cols["size"][i], b)
			}
		}
	})
}
