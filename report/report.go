// Package report renders replay results as a self-contained HTML page:
// per trace, a chart of live and reserved bytes over the replay and the
// table of what each resource measured.
//
// Design and invariants:
//
//   - Self-contained: the page references nothing outside itself. No
//     script, no stylesheet link, no web font, no image URL. Charts are
//     SVG drawn by gonum.org/v1/plot (vg/vgsvg) and inlined into the
//     document; their text names a font family (Liberation Sans, metric
//     compatible with Arial) that the page's own stylesheet backs with
//     local fallbacks, so a browser without Liberation still lays the
//     labels out where gonum measured them.
//   - One section per trace, in the order the trace first appears in the
//     results. Its chart has one reserved line per result that recorded
//     a series and the trace's live line once: live bytes are a property
//     of the trace, the same for every resource (replay.Result), so it is
//     taken from the result with the finest series. A result without a
//     series still gets its table row and is named in a note under the
//     chart; a trace none of whose results has a series gets no chart.
//   - Series points are maxima over runs of events (replay.Sample). The
//     chart keeps that meaning: it draws each point as a step covering
//     the events since the previous point, and a series longer than
//     maxChartPoints is thinned by taking maxima of adjacent points, so
//     every peak of the replay stays visible.
//   - All charts are drawn before the first byte is written, so a chart
//     error never leaves half a page behind; only the writer's own error
//     can cut the page short. Bad input (a nil result, negative chart
//     sizes) is an error matching a sentinel, never a panic.
//   - Text from the results (trace and resource names) reaches the page
//     only through html/template's escaping or through vgsvg's, which
//     escapes every text element it writes.
package report

import (
	"errors"
	"fmt"
	"io"

	"github.com/streamalloc/streamalloc/replay"
)

// Options tune the page. The zero value gives a page titled
// "streamalloc replay" with charts of 900 × 380 CSS pixels.
type Options struct {
	// Title is the page's title and top heading.
	Title string
	// Note is an optional line under the heading, for instance the
	// command line that produced the results or the device used.
	Note string
	// ChartWidth and ChartHeight are the size of each chart in CSS
	// pixels; 0 selects the default. Values outside 200..20000 (width)
	// and 120..20000 (height) are an error.
	ChartWidth, ChartHeight int
}

const (
	defaultTitle       = "streamalloc replay"
	defaultChartWidth  = 900
	defaultChartHeight = 380
	minChartWidth      = 200
	minChartHeight     = 120
	maxChartSide       = 20000
)

var (
	// ErrNilResult is returned when results holds a nil *replay.Result.
	ErrNilResult = errors.New("report: nil result")
	// ErrOptions is returned for option values outside their range.
	ErrOptions = errors.New("report: invalid options")
)

// WriteHTML writes to w one HTML document presenting results: for each
// trace, a chart of its live bytes and of each resource's reserved bytes
// over the replay (x: event index, y: bytes), and a table with the trace,
// resource, device, events, allocations, peak live and peak reserved
// bytes, fragmentation, host ns per event and failures of every result of
// that trace. The document loads nothing from elsewhere.
//
// Results without a Series still appear in the table. An empty results
// slice gives a page saying there is nothing to show. The error is
// ErrNilResult or ErrOptions (matched with errors.Is) for bad input, in
// which case nothing is written, or the writer's error, wrapped.
func WriteHTML(w io.Writer, results []*replay.Result, opts Options) error {
	for i, r := range results {
		if r == nil {
			return fmt.Errorf("%w: results[%d]", ErrNilResult, i)
		}
	}
	if err := opts.normalize(); err != nil {
		return err
	}
	pg, err := buildPage(results, opts)
	if err != nil {
		return err
	}
	if err := pageTemplate.Execute(w, pg); err != nil {
		return fmt.Errorf("report: write page: %w", err)
	}
	return nil
}

// normalize fills defaults and rejects values out of range.
func (o *Options) normalize() error {
	if o.Title == "" {
		o.Title = defaultTitle
	}
	for _, s := range []struct {
		name          string
		v             *int
		def, min, max int
	}{
		// Below the minima the legend and the axes no longer fit beside
		// the plot; above the maxima a chart only makes a larger page.
		{"ChartWidth", &o.ChartWidth, defaultChartWidth, minChartWidth, maxChartSide},
		{"ChartHeight", &o.ChartHeight, defaultChartHeight, minChartHeight, maxChartSide},
	} {
		if *s.v == 0 {
			*s.v = s.def
		}
		if *s.v < s.min || *s.v > s.max {
			return fmt.Errorf("%w: %s %d not in %d..%d (or 0 for the default)", ErrOptions, s.name, *s.v, s.min, s.max)
		}
	}
	return nil
}
