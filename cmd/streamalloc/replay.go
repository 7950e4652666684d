package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/sanitize"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // PyTorch snapshots for trace.Open
)

type replayFlags struct {
	resources  string
	upstream   string
	json       bool
	html       string
	log        string
	sanitize   bool
	timed      bool
	timeScale  float64
	cpuProfile string
	command    string // the command line, for the page
	// maxExpansion bounds a snapshot's trace entries and segment blocks
	// per KiB of pickle (trace.Options.MaxExpansion; 0 is its default).
	maxExpansion int
}

// errNotPositive and errNegative are the errors of numeric flags out of
// their range.
var (
	errNotPositive = errors.New("must be a positive number")
	errNegative    = errors.New("must not be negative")
)

// replayRow is one line of output: a replay's result and, with
// --sanitize, the number of hazards the sanitizer reported.
type replayRow struct {
	*replay.Result
	SanitizerReports *int `json:"sanitizer_reports,omitempty"`
}

// maxShownReports bounds the sanitizer reports printed in full on
// standard error per replay; the rest are counted.
const maxShownReports = 3

func newReplayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay [flags] TRACE...",
		Short: "Replay allocation traces against memory resources",
		Long: `Replay allocation traces (RAPIDS Memory Manager CSV logs, plain or gzip, and
PyTorch memory snapshots) against one or more resources, and report peak
live and reserved bytes, fragmentation and host time per event.

Each distinct stream of a trace becomes a stream of the device; blocks the
trace never frees are freed at the end; frees of pointers that are not live
are counted, not fatal. Suballocators are built over --upstream (async, the
driver's pool, by default), and their own time per event is shown apart
from their upstream's.

A replay makes its calls as fast as it can, so every free is complete at
once. With --timed each resource is replayed a second time in the trace's
own time: the host waits for each event's time, and the time between two
events of a stream is enqueued on it as a kernel, so that frees complete
when they would have; both rows are shown.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, _ := cmd.Flags().GetString("device")
			f.command = invocation(cmd, args)
			return runReplay(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), kind, f, args)
		},
	}
	cmd.Flags().StringVar(&f.resources, "resource", "pool", "resources to replay against: a comma-separated list of "+fmt.Sprint(registry.Replay())+", or all (every one but the host pools)")
	cmd.Flags().StringVar(&f.upstream, "upstream", "async", "what suballocators (pool, arena, binning, fixedsize) draw their chunks from: "+fmt.Sprint(registry.Upstreams()))
	cmd.Flags().BoolVar(&f.json, "json", false, "print the results as a JSON array")
	cmd.Flags().StringVar(&f.html, "html", "", "write a self-contained HTML page with charts to `FILE`")
	cmd.Flags().StringVar(&f.log, "log", "", "write the replay's own RMM CSV log to `FILE` (all replays, one after another)")
	cmd.Flags().BoolVar(&f.timed, "timed", false, "replay each resource a second time in the trace's own time, each stream's gaps enqueued as GPU work, and report both (rows \"NAME (timed)\")")
	cmd.Flags().Float64Var(&f.timeScale, "time-scale", 1, "with --timed, multiply the trace's times by `F` (0.1: ten times faster)")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the replays (go tool pprof) to `FILE`")
	cmd.Flags().BoolVar(&f.sanitize, "sanitize", false, "run each replay under the stream-order sanitizer and count the hazards it reports")
	cmd.Flags().IntVar(&f.maxExpansion, "max-expansion", trace.DefaultMaxExpansion, "refuse a PyTorch snapshot with more than `N` trace entries and segment blocks per KiB of pickle, counting each reference to a repeated one (0: the default)")
	return cmd
}

func runReplay(ctx context.Context, stdout, stderr io.Writer, kind string, f replayFlags, traces []string) error {
	names, err := registry.Replay().Parse(f.resources)
	if err != nil {
		return fmt.Errorf("--resource: %w", err)
	}
	if _, err := registry.ParseUpstream(f.upstream); err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}
	if f.maxExpansion < 0 {
		return fmt.Errorf("--max-expansion %d: %w", f.maxExpansion, errNegative)
	}
	if !(f.timeScale > 0) {
		return fmt.Errorf("--time-scale %v: %w", f.timeScale, errNotPositive)
	}
	b, err := backend.Open(kind)
	if err != nil {
		return err
	}
	dev, err := b.Device(0)
	if err != nil {
		return fmt.Errorf("device 0: %w", err)
	}
	var outputs []namedPath
	if f.log != "" {
		outputs = append(outputs, namedPath{"--log", f.log})
	}
	if f.html != "" {
		outputs = append(outputs, namedPath{"--html", f.html})
	}
	if err := checkOutputs(outputs, traces); err != nil {
		return err
	}
	var logw *trace.CSVWriter
	var logOut *outputFile
	if f.log != "" {
		if logOut, err = createOutput(f.log); err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		defer logOut.abort()
		logw = trace.NewCSVWriter(logOut)
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			pf.Close()
		}()
	}
	var results []*replay.Result
	var rows []replayRow
	for _, path := range traces {
		tr, err := replayTrace(ctx, stderr, dev, path, names, logw, f)
		rows = append(rows, tr...)
		if err != nil {
			return err
		}
	}
	for _, row := range rows {
		results = append(results, row.Result)
	}
	var page *outputFile
	if f.html != "" {
		if page, err = writeHTML(f.html, f.command, results); err != nil {
			return err
		}
		defer page.abort()
	}
	// Every output is complete: only now does any replace what was there.
	if logw != nil {
		if err := logw.Flush(); err != nil {
			return fmt.Errorf("--log %s: %w", f.log, err)
		}
		if err := logOut.commit(); err != nil {
			return fmt.Errorf("--log %s: %w", f.log, err)
		}
	}
	if page != nil {
		if err := page.commit(); err != nil {
			return fmt.Errorf("--html %s: %w", f.html, err)
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return writeReplayTable(stdout, rows)
}

// replayTrace replays the trace at path against each resource of names in
// turn. The input is read once: the trace is opened once and rewound for
// each further resource (trace.File.Rewind: a snapshot is decoded once, a
// pipe is read once).
func replayTrace(ctx context.Context, stderr io.Writer, dev gpu.Device, path string, names []string, logw *trace.CSVWriter, f replayFlags) ([]replayRow, error) {
	tf, err := trace.Open(path, &trace.Options{MaxExpansion: f.maxExpansion})
	if err != nil {
		return nil, err
	}
	defer tf.Close()
	var rows []replayRow
	for _, name := range names {
		timings := []bool{false}
		if f.timed {
			timings = append(timings, true)
		}
		for _, timed := range timings {
			if len(rows) > 0 {
				if err := tf.Rewind(); err != nil {
					return rows, err
				}
			}
			row, err := replayOne(ctx, stderr, dev, tf, path, name, timed, logw, f)
			if err != nil {
				return rows, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// replayOne replays the trace tf (read from path) against a fresh
// resource. With --sanitize the device and the resource are wrapped by one
// sanitizer, so that it sees every allocation and free of the replay and
// every event the resource records or waits on; its reports are counted and
// the first few printed.
func replayOne(ctx context.Context, stderr io.Writer, dev gpu.Device, tf *trace.File, path, name string, timed bool, logw *trace.CSVWriter, f replayFlags) (_ replayRow, err error) {
	var z *sanitize.Sanitizer
	reports := 0
	if f.sanitize {
		z = sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) {
			reports++
			if reports <= maxShownReports {
				fmt.Fprintf(stderr, "sanitizer: %s on %s: %s\n", path, name, r.Detail())
			}
		}})
		dev = z.Device(dev)
	}
	// Suballocators over the upstream --upstream names (async by
	// default, as a program builds them), through a timer, so that the
	// upstream's time is reported apart from the suballocator's own.
	up, err := registry.ParseUpstream(f.upstream)
	if err != nil {
		return replayRow{}, fmt.Errorf("--upstream: %w", err)
	}
	var timer *replay.UpstreamTimer
	res, closeRes, err := registry.New(name, dev, registry.Options{Upstream: up, WrapUpstream: func(r mr.Resource) mr.Resource {
		timer = replay.NewUpstreamTimer(f.upstream, r)
		return timer
	}})
	if err != nil {
		return replayRow{}, err
	}
	defer func() {
		if cerr := closeRes(); cerr != nil && err == nil {
			err = fmt.Errorf("replay %s on %s: close: %w", path, name, cerr)
		}
	}()
	top := stack(res, z, logw)
	opts := replay.Options{Resource: name, Upstream: timer}
	if timed {
		opts.Resource += " (timed)"
		opts.Timed, opts.TimeScale = true, f.timeScale
	}
	if f.html != "" {
		opts.SeriesPoints = 2000
		opts.Timeline = true
	}
	bar := newProgressBar(stderr, fmt.Sprintf("%s [%s]", path, opts.Resource))
	if bar != nil {
		opts.Progress = func(p replay.Progress) {
			if fr := p.Fraction(); fr >= 0 {
				bar.Set64(int64(fr * 1000))
			}
			if p.Final {
				bar.Finish()
			}
		}
	}
	r, err := replay.Run(ctx, tf, dev, top, opts)
	if err != nil {
		return replayRow{}, fmt.Errorf("replay %s on %s: %w", path, opts.Resource, err)
	}
	row := replayRow{Result: r}
	if z != nil {
		row.SanitizerReports = &reports
	}
	return row, nil
}

// stack builds what the replay calls: the resource, under the sanitizer
// with --sanitize, under the logging adaptor with --log. The logger sits on
// top so that the sanitizer below it still sees every allocation and free
// when both flags are given.
func stack(res mr.Resource, z *sanitize.Sanitizer, logw *trace.CSVWriter) mr.Resource {
	top := res
	if z != nil {
		top = z.Resource(top)
	}
	if logw != nil {
		top = mr.NewLoggingTo(top, logw, mr.LoggingOptions{})
	}
	return top
}

// newProgressBar returns a bar on stderr when it is a terminal, and nil
// (no output at all) otherwise, so pipes and CI logs stay clean.
func newProgressBar(stderr io.Writer, desc string) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions64(1000,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionShowElapsedTimeOnFinish(),
	)
}
