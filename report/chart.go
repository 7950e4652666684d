// The chart of one trace: live and reserved bytes over the replay, drawn
// by gonum.org/v1/plot into an SVG document that the page inlines.
//
// The plot takes the left part of the canvas and the legend a strip on the
// right, so no line ever hides under a legend entry. The y unit (B, KiB,
// MiB, GiB, TiB) is the largest whose value of the chart's maximum is at
// least 1, so tick labels stay short. Lines are steps (plotter.PreStep): a
// series point is the maximum over the events since the previous point,
// and the step draws it over exactly those events.

package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/streamalloc/streamalloc/replay"
)

// yTicks labels the byte axis.
var yTicks = niceTicks{target: 6}

// maxChartPoints bounds the points of one line; longer series are thinned
// by maxima. A few thousand steps are already finer than the pixels of a
// chart.
const maxChartPoints = 2000

// chartLine is one reserved line: its legend name and its series.
type chartLine struct {
	name   string
	series []replay.Sample
}

// sansFont is the face every text of a chart uses. Liberation Sans ships
// with gonum (so text is measured exactly) and is metric compatible with
// Arial, which the page's stylesheet names as its fallback.
var sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// palette holds the reserved lines' colors: the Okabe–Ito colors, which
// stay distinguishable to color-blind readers, less the yellow that is
// unreadable on white. Past its length colors repeat with a dash pattern.
var palette = []color.RGBA{
	{0x00, 0x72, 0xB2, 0xff}, // blue
	{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	{0x00, 0x9E, 0x73, 0xff}, // bluish green
	{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	{0xE6, 0x9F, 0x00, 0xff}, // orange
	{0x56, 0xB4, 0xE9, 0xff}, // sky blue
}

// byteUnit is a binary unit for the y axis.
type byteUnit struct {
	name string
	size float64
}

var byteUnits = []byteUnit{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// unitFor returns the largest unit in which max is at least 1.
func unitFor(max uint64) byteUnit {
	for _, u := range byteUnits {
		if float64(max) >= u.size {
			return u
		}
	}
	return byteUnits[len(byteUnits)-1]
}

// renderChart draws live (the trace's live bytes) and one reserved line
// per entry of lines into an SVG element of w × h CSS pixels and returns
// the element's markup, starting at "<svg".
func renderChart(live []replay.Sample, lines []chartLine, w, h int) (svg string, err error) {
	// gonum reports some misuse by panicking; none is expected with the
	// inputs built here, but a report must not take the command down.
	defer func() {
		if r := recover(); r != nil {
			svg, err = "", fmt.Errorf("draw chart: %v", r)
		}
	}()

	var ymax uint64
	for _, s := range live {
		ymax = max(ymax, s.Live)
	}
	for _, l := range lines {
		for _, s := range l.series {
			ymax = max(ymax, s.Reserved)
		}
	}
	unit := unitFor(ymax)

	p := plot.New()
	setFont(p)
	p.X.Label.Text = "event"
	p.Y.Label.Text = "bytes (" + unit.name + ")"
	p.X.Tick.Marker = niceTicks{target: 8, group: true}
	p.Y.Tick.Marker = yTicks
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{0xe0}
	grid.Horizontal.Color = color.Gray{0xe0}
	p.Add(grid)

	legend := plot.NewLegend()
	legend.TextStyle.Font = font.From(sansFont, 10)
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(18)

	liveLine, err := stepLine(live, unit, func(s replay.Sample) uint64 { return s.Live })
	if err != nil {
		return "", err
	}
	liveLine.Color = color.Black
	liveLine.Width = vg.Points(1.6)
	p.Add(liveLine)
	legend.Add("live", liveLine)

	for i, l := range lines {
		ln, err := stepLine(l.series, unit, func(s replay.Sample) uint64 { return s.Reserved })
		if err != nil {
			return "", err
		}
		ln.Color = palette[i%len(palette)]
		ln.Width = vg.Points(1.2)
		if n := i / len(palette); n > 0 {
			ln.Dashes = []vg.Length{vg.Points(float64(2 + 2*n)), vg.Points(2)}
		}
		p.Add(ln)
		legend.Add(l.name, ln)
	}

	// The axes' ranges, set after Add (which widens them to the data):
	// x from event 0 (or the first event, were it negative) to the last;
	// y from 0 to the first labelled tick over the highest line plus 5%,
	// so a peak is never drawn on the frame. A range of one value is widened by a margin relative
	// to it: at 1e18, gonum's own widening by ±1 would be lost to
	// rounding.
	p.X.Min, p.X.Max = widen(min(p.X.Min, 0), p.X.Max)
	p.Y.Min, p.Y.Max = 0, max(float64(ymax)/unit.size*1.05, 1)
	if st := yTicks.step(p.Y.Min, p.Y.Max); st > 0 {
		p.Y.Max = math.Ceil(p.Y.Max/st) * st // end on a labelled tick
	}

	width, height := vg.Length(w)*0.75, vg.Length(h)*0.75 // CSS px are 3/4 pt
	c := vgsvg.NewWith(vgsvg.UseWH(width, height))
	dc := draw.New(c)
	lw := legend.Rectangle(dc).Size().X + vg.Points(12)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	legend.Draw(draw.Crop(dc, width-lw+vg.Points(6), 0, 0, -vg.Points(8)))

	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("write chart: %w", err)
	}
	// Drop the XML prelude: inside HTML it would be a bogus comment.
	out := buf.String()
	i := strings.Index(out, "<svg")
	if i < 0 {
		return "", fmt.Errorf("chart: no <svg> element in vgsvg output")
	}
	return out[i:], nil
}

// stepLine builds the line of one field of a series, in unit, thinned to
// maxChartPoints. The first point is extended back to event 0: it is the
// maximum over the events up to it.
func stepLine(series []replay.Sample, unit byteUnit, field func(replay.Sample) uint64) (*plotter.Line, error) {
	series = thin(series, maxChartPoints)
	xys := make(plotter.XYs, 0, len(series)+1)
	if len(series) > 0 && series[0].Event > 0 {
		xys = append(xys, plotter.XY{X: 0, Y: float64(field(series[0])) / unit.size})
	}
	for _, s := range series {
		xys = append(xys, plotter.XY{X: float64(s.Event), Y: float64(field(s)) / unit.size})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, fmt.Errorf("chart line: %w", err)
	}
	l.StepStyle = plotter.PreStep
	return l, nil
}

// thin returns s merged into n points, each the maxima of a run of
// adjacent points (runs differ in length by at most one) and ending at the
// run's last event. s itself is returned when it has at most n points.
func thin(s []replay.Sample, n int) []replay.Sample {
	if len(s) <= n {
		return s
	}
	out := make([]replay.Sample, n)
	for i := range out {
		run := s[i*len(s)/n : (i+1)*len(s)/n]
		m := run[0]
		for _, p := range run[1:] {
			m.Event = p.Event
			m.Live = max(m.Live, p.Live)
			m.Reserved = max(m.Reserved, p.Reserved)
		}
		out[i] = m
	}
	return out
}

// setFont makes every text of p use sansFont at gonum's default sizes.
func setFont(p *plot.Plot) {
	for _, f := range []*font.Font{
		&p.Title.TextStyle.Font,
		&p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font,
		&p.Legend.TextStyle.Font,
	} {
		*f = font.From(sansFont, f.Size)
	}
}

// widen returns lo, hi with hi > lo.
func widen(lo, hi float64) (float64, float64) {
	if !(hi > lo) {
		hi = lo + max(1, math.Abs(lo)*1e-6)
	}
	return lo, hi
}
