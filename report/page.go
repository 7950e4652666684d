// The page: the markup (html/template), then one data element per trace
// and the viewer's script and style (viewer.js, viewer.css, embedded).
//
// The template sees only the view types below, whose fields are already
// formatted strings. The data elements and the script are written after
// the template, not through it: a container is base64 (no character that
// HTML or a script element treats specially), and viewer.js contains no
// "</script" (report_test.go checks), so neither needs escaping, and
// html/template would otherwise treat them as JavaScript to escape.

package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamalloc/streamalloc/replay"
)

//go:embed viewer.js
var viewerJS string

//go:embed viewer.css
var viewerCSS string

// palette holds the resources' colors: the Okabe–Ito colors, which stay
// distinguishable to color-blind readers, less the yellow that is
// unreadable on white. Past its length colors repeat.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"}

// page is what the template renders, and what follows it.
type page struct {
	Title, Command, Date, Note string
	Devices                    []string
	Simulated                  bool
	Summary                    []summaryRow
	MultiDevice                bool
	Traces                     []traceSection
	Style                      template.CSS
}

// traceSection is one trace.
type traceSection struct {
	ID, DataID string
	Name       string
	Facts      []string
	Left       []string // results not charted
	blob       string
	HasChart   bool
}

// summaryRow is one result in the summary table. Trace cells are set on
// the first row of each trace only (Rows is then its row count).
type summaryRow struct {
	TraceID, Trace       string
	Rows                 int
	Resource, Device     string
	PeakReserved         bytesCell
	VsBest               string
	Best                 bool
	Fragmentation        string
	NsPerEvent, Failures string
	Failed               bool
}

// bytesCell is a byte count in a binary unit with the exact count beside it.
type bytesCell struct{ Human, Exact string }

func buildPage(results []*replay.Result, opts Options) (*page, error) {
	pg := &page{Title: opts.Title, Command: opts.Command, Note: opts.Note, Style: template.CSS(viewerCSS)}
	if !opts.Date.IsZero() {
		pg.Date = opts.Date.Format("2006-01-02 15:04:05 MST")
	}
	for _, r := range results {
		d := r.Device
		if r.Simulated {
			d += " (simulated)"
			pg.Simulated = true
		}
		if !slices.Contains(pg.Devices, d) {
			pg.Devices = append(pg.Devices, d)
		}
	}
	pg.MultiDevice = len(pg.Devices) > 1
	for gi, g := range replay.GroupByTrace(results, func(r *replay.Result) string { return r.Trace }) {
		sec := traceSection{ID: "trace-" + strconv.Itoa(gi), DataID: "sa-data-" + strconv.Itoa(gi), Name: g[0].Trace}
		sec.Facts = traceFacts(g)
		names := legendNames(g)
		charted := make([]chartedResult, len(g))
		for i, r := range g {
			charted[i] = chartedResult{r: r, name: names[i], color: palette[i%len(palette)]}
		}
		td, err := buildTraceData(g[0].Trace, charted)
		if err != nil {
			return nil, fmt.Errorf("report: trace %q: %w", g[0].Trace, err)
		}
		sec.Left, sec.blob, sec.HasChart = td.left, td.blob, td.blob != ""
		pg.Traces = append(pg.Traces, sec)
		pg.Summary = append(pg.Summary, summaryRows(sec.ID, g, names)...)
	}
	return pg, nil
}

// writeTail writes what follows the template: the data elements and the
// script.
func (pg *page) writeTail(w io.Writer) error {
	var b strings.Builder
	for _, t := range pg.Traces {
		if t.blob == "" {
			continue
		}
		b.WriteString(`<script type="application/octet-stream" id="` + t.DataID + `">`)
		b.WriteString(t.blob)
		b.WriteString("</script>\n")
	}
	b.WriteString("<script>\n")
	b.WriteString(viewerJS)
	b.WriteString("</script>\n</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// traceFacts are the properties of the trace that every result of it
// shares, taken from the first.
func traceFacts(g []*replay.Result) []string {
	r := g[0]
	facts := []string{
		groupDigits(uint64(max(r.Events, 0))) + " events",
		groupDigits(uint64(max(r.Allocations, 0))) + " allocations",
		plural(r.Streams, "stream"),
		"peak live " + newBytesCell(r.PeakLiveBytes).Human,
	}
	for _, x := range g {
		if x.Timeline != nil && len(x.Timeline.Times) > 1 {
			ts := timelineTimes(x.Timeline.Times)
			facts = append(facts, formatDuration(time.Duration(ts[len(ts)-1]))+" of trace time")
			break
		}
	}
	if r.UnknownFrees > 0 {
		facts = append(facts, plural(int(r.UnknownFrees), "free")+" of unknown pointers (skipped)")
	}
	if r.TraceFailures > 0 {
		facts = append(facts, plural(int(r.TraceFailures), "allocation failure")+" in the trace")
	}
	return facts
}

func plural(n int, what string) string {
	s := groupDigits(uint64(max(n, 0))) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}

// formatDuration writes d with three significant decimals in s, ms or µs.
func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + " s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) + " ms"
	}
	return strconv.FormatFloat(float64(d)/1e3, 'f', 3, 64) + " µs"
}

// summaryRows are the rows of one trace: the least reserving result is
// marked best, the others say how much more they reserved.
func summaryRows(id string, g []*replay.Result, names []string) []summaryRow {
	best := g[0].PeakReservedBytes
	for _, r := range g {
		best = min(best, r.PeakReservedBytes)
	}
	rows := make([]summaryRow, len(g))
	for i, r := range g {
		row := summaryRow{
			Resource:      names[i],
			Device:        r.Device,
			PeakReserved:  newBytesCell(r.PeakReservedBytes),
			Fragmentation: strconv.FormatFloat(r.Fragmentation, 'f', 3, 64),
			NsPerEvent:    strconv.FormatFloat(r.NsPerEvent, 'f', 1, 64),
			Failures:      groupDigits(uint64(max(r.Failures, 0))),
			Failed:        r.Failures > 0,
		}
		switch {
		case len(g) == 1:
		case r.PeakReservedBytes == best:
			row.Best, row.VsBest = true, "least"
		case best > 0:
			row.VsBest = "+" + strconv.FormatFloat(100*(float64(r.PeakReservedBytes)/float64(best)-1), 'f', 1, 64) + "%"
		}
		rows[i] = row
	}
	rows[0].TraceID, rows[0].Trace, rows[0].Rows = id, g[0].Trace, len(g)
	return rows
}

// legendNames names each result of one trace: its resource, with the
// device when the trace was replayed on more than one, and a "#n" suffix
// on repeats so that every line has its own name.
func legendNames(g []*replay.Result) []string {
	devices := map[string]bool{}
	for _, r := range g {
		devices[r.Device] = true
	}
	seen := map[string]int{}
	names := make([]string, len(g))
	for i, r := range g {
		n := r.Resource
		if n == "" {
			n = "(unnamed)"
		}
		if len(devices) > 1 {
			n += " (" + r.Device + ")"
		}
		seen[n]++
		if k := seen[n]; k > 1 {
			n += " #" + strconv.Itoa(k)
		}
		names[i] = n
	}
	return names
}

// byteUnits are the binary units, largest first.
var byteUnits = []struct {
	name string
	size float64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

func newBytesCell(n uint64) bytesCell {
	human := strconv.FormatUint(n, 10) + " B"
	for _, u := range byteUnits {
		if float64(n) >= u.size {
			human = strconv.FormatFloat(float64(n)/u.size, 'f', 1, 64) + " " + u.name
			break
		}
	}
	return bytesCell{Human: human, Exact: groupDigits(n)}
}

// groupDigits writes n with a comma between groups of three digits.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// pageTemplate is the document up to the data elements.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
{{.Style}}</style>
</head>
<body>
<header class="top">
<h1>{{.Title}}</h1>
{{if .Simulated}}<p class="banner" id="simulated"><strong>Simulated.</strong> These replays ran on the simulated GPU (gpu/sim) on this machine's CPU, not on a GPU: reserved bytes are what each resource decided, times per event are the simulator's.</p>
{{end}}<dl class="meta">
{{- with .Command}}<div><dt>command</dt><dd><code>{{.}}</code></dd></div>{{end}}
{{- with .Date}}<div><dt>date</dt><dd>{{.}}</dd></div>{{end}}
{{- with .Devices}}<div><dt>device</dt><dd>{{range $i, $d := .}}{{if $i}}; {{end}}{{$d}}{{end}}</dd></div>{{end}}
</dl>
{{with .Note}}<p class="note">{{.}}</p>
{{end}}</header>
<main>
{{- if not .Traces}}
<p class="empty">No results to show.</p>
{{- else}}
<table class="summary">
<thead><tr><th>trace</th><th>resource</th>{{if .MultiDevice}}<th>device</th>{{end}}<th>peak reserved</th><th>vs least</th><th>fragmentation</th><th>ns/event</th><th>failures</th></tr></thead>
<tbody>
{{- range .Summary}}
<tr class="result{{if .Failed}} failed{{end}}{{if .Best}} best{{end}}{{if .Trace}} first{{end}}">
{{- if .Trace}}<th scope="rowgroup" rowspan="{{.Rows}}"><a href="#{{.TraceID}}">{{.Trace}}</a></th>{{end -}}
<td class="resource">{{.Resource}}</td>{{if $.MultiDevice}}<td>{{.Device}}</td>{{end}}<td class="num">{{.PeakReserved.Human}}<small>{{.PeakReserved.Exact}} B</small></td><td class="num vs">{{.VsBest}}</td><td class="num">{{.Fragmentation}}</td><td class="num">{{.NsPerEvent}}</td><td class="num failures">{{.Failures}}</td></tr>
{{- end}}
</tbody>
</table>
<p class="legend-note">Fragmentation is peak reserved over the trace's peak live bytes; ns/event the host time in the resource's calls per allocation or free.</p>
{{- end}}
{{- range .Traces}}
<section class="trace" id="{{.ID}}"{{if .HasChart}} data-data="{{.DataID}}"{{end}}>
<h2>{{.Name}}</h2>
<p class="facts">{{range $i, $f := .Facts}}{{if $i}} · {{end}}{{$f}}{{end}}</p>
{{- with .Left}}
<p class="left">Not charted: {{range $i, $n := .}}{{if $i}}, {{end}}{{$n}}{{end}} (no timeline or series recorded, or a timeline of other events).</p>
{{- end}}
{{- if .HasChart}}
<div class="viewer"><noscript>The charts need JavaScript.</noscript></div>
{{- end}}
</section>
{{- end}}
</main>
`))
