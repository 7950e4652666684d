// The page: results grouped by trace, each group a chart and a table,
// rendered through html/template.
//
// The template sees only the view types below, whose fields are already
// formatted strings, so the markup carries no formatting logic. The only
// value marked safe (template.HTML) is the SVG that vgsvg wrote, which
// escapes its own text.

package report

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"

	"github.com/streamalloc/streamalloc/replay"
)

// page is what the template renders.
type page struct {
	Title, Note string
	Sections    []section
}

// section is one trace: its chart (empty when no result recorded a
// series), the resources that recorded none, and its table rows.
type section struct {
	Trace    string
	Chart    template.HTML
	NoSeries []string
	Rows     []row
}

// row is one result, formatted for the table.
type row struct {
	Trace, Resource, Device string
	Events, Allocations     string
	PeakLive, PeakReserved  bytesCell
	Fragmentation           string
	NsPerEvent              string
	Failures                string
	Failed                  bool
}

// bytesCell is a byte count shown in a binary unit with the exact count
// beside it.
type bytesCell struct{ Human, Exact string }

func buildPage(results []*replay.Result, opts Options) (*page, error) {
	pg := &page{Title: opts.Title, Note: opts.Note}
	for _, g := range groupByTrace(results) {
		sec := section{Trace: g[0].Trace}
		var live []replay.Sample
		var lines []chartLine
		names := legendNames(g)
		for i, r := range g {
			sec.Rows = append(sec.Rows, newRow(r))
			if len(r.Series) == 0 {
				sec.NoSeries = append(sec.NoSeries, names[i])
				continue
			}
			lines = append(lines, chartLine{name: names[i], series: r.Series})
			if len(r.Series) > len(live) {
				live = r.Series
			}
		}
		if len(lines) > 0 {
			svg, err := renderChart(live, lines, opts.ChartWidth, opts.ChartHeight)
			if err != nil {
				return nil, fmt.Errorf("report: trace %q: %w", sec.Trace, err)
			}
			sec.Chart = template.HTML(svg) // vgsvg escapes all text it writes
		}
		pg.Sections = append(pg.Sections, sec)
	}
	return pg, nil
}

// groupByTrace splits results by trace name, groups in the order of each
// trace's first result, results in their order.
func groupByTrace(results []*replay.Result) [][]*replay.Result {
	var groups [][]*replay.Result
	index := map[string]int{}
	for _, r := range results {
		i, ok := index[r.Trace]
		if !ok {
			i = len(groups)
			index[r.Trace] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// legendNames names each result of one trace for the legend: its
// resource, with the device when the trace was replayed on more than one,
// and a "#n" suffix on repeats so that every line has its own name.
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

func newRow(r *replay.Result) row {
	return row{
		Trace:         r.Trace,
		Resource:      r.Resource,
		Device:        r.Device,
		Events:        groupDigits(uint64(max(r.Events, 0))),
		Allocations:   groupDigits(uint64(max(r.Allocations, 0))),
		PeakLive:      newBytesCell(r.PeakLiveBytes),
		PeakReserved:  newBytesCell(r.PeakReservedBytes),
		Fragmentation: strconv.FormatFloat(r.Fragmentation, 'f', 3, 64),
		NsPerEvent:    strconv.FormatFloat(r.NsPerEvent, 'f', 1, 64),
		Failures:      groupDigits(uint64(max(r.Failures, 0))),
		Failed:        r.Failures > 0,
	}
}

func newBytesCell(n uint64) bytesCell {
	u := unitFor(n)
	human := strconv.FormatUint(n, 10) + " B"
	if u.size > 1 {
		human = strconv.FormatFloat(float64(n)/u.size, 'f', 1, 64) + " " + u.name
	}
	return bytesCell{Human: human, Exact: groupDigits(n)}
}

// groupDigits writes n with a comma between groups of three digits.
func groupDigits(n uint64) string { return groupString(strconv.FormatUint(n, 10)) }

// groupString puts a comma between groups of three of the ASCII digits s.
func groupString(s string) string {
	var b strings.Builder
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// pageTemplate is the whole document. Its stylesheet is inline; the
// font-family rule backs the charts' Liberation Sans with metric-
// compatible local faces (it overrides vgsvg's inline style, hence
// !important).
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 4px; }
h2 { font-size: 1.15em; margin: 28px 0 8px; font-family: "Liberation Mono", "DejaVu Sans Mono", monospace; }
p.note { color: #555; margin: 0 0 12px; }
figure.chart { margin: 0; }
figure.chart svg { max-width: 100%; height: auto; }
figure.chart svg text { font-family: "Liberation Sans", Arial, Helvetica, sans-serif !important; }
p.noseries { color: #8a5a00; margin: 6px 0; }
table { border-collapse: collapse; margin-top: 8px; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num small { display: block; color: #777; }
tr.failed td.failures { color: #b00020; font-weight: bold; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{with .Note}}<p class="note">{{.}}</p>
{{end}}
{{- if not .Sections}}<p class="empty">No results to show.</p>
{{end}}
{{- range .Sections}}
<section class="trace">
<h2>{{.Trace}}</h2>
{{if .Chart}}<figure class="chart">
{{.Chart}}
<figcaption>Live bytes of the trace and bytes reserved by each resource, over the replay's events (each point the maximum since the previous one).</figcaption>
</figure>
{{end}}
{{- with .NoSeries}}<p class="noseries">No series was recorded for: {{range $i, $n := .}}{{if $i}}, {{end}}{{$n}}{{end}}.</p>
{{end}}
<table class="summary">
<thead><tr><th>trace</th><th>resource</th><th>device</th><th>events</th><th>allocations</th><th>peak live</th><th>peak reserved</th><th>fragmentation</th><th>ns/event</th><th>failures</th></tr></thead>
<tbody>
{{range .Rows}}<tr class="result{{if .Failed}} failed{{end}}"><td>{{.Trace}}</td><td>{{.Resource}}</td><td>{{.Device}}</td><td class="num">{{.Events}}</td><td class="num">{{.Allocations}}</td><td class="num">{{.PeakLive.Human}}<small>{{.PeakLive.Exact}} B</small></td><td class="num">{{.PeakReserved.Human}}<small>{{.PeakReserved.Exact}} B</small></td><td class="num">{{.Fragmentation}}</td><td class="num">{{.NsPerEvent}}</td><td class="num failures">{{.Failures}}</td></tr>
{{end}}</tbody>
</table>
</section>
{{- end}}
</body>
</html>
`))
