// Package report renders replay results as one self-contained,
// interactive HTML page: a memory timeline a person opens to see what each
// resource did with a workload, and why it reserved what it did.
//
// # What the page shows
//
// At the top, a table of every trace and resource (peak live and reserved
// bytes, fragmentation, host time per event, refused allocations), with
// the least reserving resource of each trace marked, under the command
// line, the date and the device, and a plain banner when the device was
// the simulator. Then, per trace:
//
//   - the overview: the trace's live bytes and each resource's reserved
//     bytes against the trace's own time (an RMM log's Time column, a
//     snapshot's time_us) or against the event index, with each stream's
//     live bytes when the trace has several; zoom (wheel, shift-drag or
//     the buttons), pan (drag), and exact values under the pointer;
//   - the active memory of one resource at a time: every live block a band,
//     stacked in allocation order as PyTorch's memory_viz draws them, each
//     pixel column showing the state at its moment of most live memory;
//     pointing at a band gives the block's size, stream, lifetime, address
//     and allocation stack (from a PyTorch snapshot's frames);
//   - the resource's memory map: its segments (chunks, superblocks) over
//     time, packed into lanes, with every live block drawn where the
//     resource put it, so that the blocks that keep a segment reserved,
//     and the holes beside them, are visible;
//   - the segments at a chosen moment (click any chart): each segment with
//     the blocks inside it, their sizes and the free space between them.
//
// # Why a hand-made canvas renderer
//
// The page's script (viewer.js, about a thousand lines written for it)
// draws on canvas elements itself instead of embedding a chart library.
// Two of the three views are not charts a library draws: the active
// memory and the memory map are rasterized column by column from the set
// of live blocks (a sweep over allocation and free events), which is what
// keeps a million-event trace responsive; a library would have drawn only
// the overview's lines (uPlot, the lightest well-kept one, is about 50 KB
// minified) and brought a second zoom and hover model to keep in step with
// the other two. Written here, the three views share one x axis, one zoom,
// one hover and one color scheme, the page has no build step and no
// vendored asset to keep in step with a lock file, and the script stays
// small enough to read.
//
// # Data
//
// Each trace's data travel in the page as one gzip-compressed binary
// container (base64 in an inert script element), which the script inflates
// with the browser's own DecompressionStream: a JSON header (names,
// streams, frames and stacks, resources, column directory) and typed
// columns of little-endian integers in the narrowest width that holds them,
// delta-coded where they only grow (container.go). Per trace the columns
// hold the event times and the blocks (allocation and free event, size,
// streams, stack); per resource, each block's segment and offset in it,
// the reserved-bytes steps and the segments with their lanes
// (layout.go). Live bytes are derived by the script from the blocks, so
// they cannot disagree with them. Results without a timeline
// (replay.Options.Timeline) get their overview from replay.Result.Series
// instead, against the event index.
//
// # Measured
//
// With scripts/html-check.sh --large 1000000 (Chromium 156 headless, two
// shared cores of a 2026 x86 VM): a generated training trace of 1,000,002
// events (500,157 allocations, two streams) replayed against pool and
// async gives a page of 7.9 MB (the shared traces of replay/testdata, three
// traces against three resources: 390 KB); it is drawn 1.1 s after the
// browser starts loading it (0.7 s of that in the script: inflating,
// deriving live bytes, the first draw of every view), and a redraw after a
// zoom or a pan takes at most 0.17 s over the whole trace, less zoomed in.
//
// Invariants:
//
//   - Self-contained: the page references nothing outside itself (no URL,
//     no font, no image); it needs a browser with canvas, DecompressionStream
//     and ES2020 (Chromium 80, Firefox 113, Safari 16.4).
//   - Text from the results reaches the markup through html/template and
//     the data through encoding/json (which escapes <, > and &), so no
//     trace or resource name can close a script element.
//   - Bad input (a nil result) is an error matching ErrNilResult before
//     anything is written; the page is built whole in memory first, so only
//     the writer's own error can cut it short.
package report

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/streamalloc/streamalloc/replay"
)

// Options describe the page. The zero value gives a page titled
// "streamalloc replay" with no command line and no date.
type Options struct {
	// Title is the page's title and top heading.
	Title string
	// Command is the command line that produced the results, shown under
	// the heading.
	Command string
	// Date is when the results were produced; the zero time is not shown.
	Date time.Time
	// Note is an optional line under the heading.
	Note string
}

const defaultTitle = "streamalloc replay"

// ErrNilResult is returned when results holds a nil *replay.Result.
var ErrNilResult = errors.New("report: nil result")

// WriteHTML writes to w one HTML document presenting results: the summary
// table of every result, and per trace (in the order of each trace's first
// result) the overview of live and reserved bytes and, for the results
// that recorded a replay.Timeline, the active memory, the memory map and
// the segments at a chosen moment of each resource. Results of one trace
// whose timelines cover different events (not the same trace) are charted
// apart from the first: only their table rows are shown.
//
// An empty results slice gives a page saying there is nothing to show.
// The error is ErrNilResult (matched with errors.Is) for a nil result, in
// which case nothing is written, or the writer's error, wrapped.
func WriteHTML(w io.Writer, results []*replay.Result, opts Options) error {
	for i, r := range results {
		if r == nil {
			return fmt.Errorf("%w: results[%d]", ErrNilResult, i)
		}
	}
	if opts.Title == "" {
		opts.Title = defaultTitle
	}
	pg, err := buildPage(results, opts)
	if err != nil {
		return err
	}
	if err := pageTemplate.Execute(w, pg); err != nil {
		return fmt.Errorf("report: write page: %w", err)
	}
	if err := pg.writeTail(w); err != nil {
		return fmt.Errorf("report: write page: %w", err)
	}
	return nil
}
