package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
)

type replayFlags struct {
	resources string
	json      bool
	html      string
	log       string
}

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
are counted, not fatal.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, _ := cmd.Flags().GetString("device")
			return runReplay(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), kind, f, args)
		},
	}
	cmd.Flags().StringVar(&f.resources, "resource", "pool", "resources to replay against: a comma-separated list of "+fmt.Sprint(resourceNames)+", or all")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the results as a JSON array")
	cmd.Flags().StringVar(&f.html, "html", "", "write a self-contained HTML page with charts to `FILE`")
	cmd.Flags().StringVar(&f.log, "log", "", "write the replay's own RMM CSV log to `FILE` (all replays, one after another)")
	return cmd
}

func runReplay(ctx context.Context, stdout, stderr io.Writer, kind string, f replayFlags, traces []string) error {
	names, err := parseResources(f.resources)
	if err != nil {
		return err
	}
	b, err := backend.Open(kind)
	if err != nil {
		return err
	}
	dev, err := b.Device(0)
	if err != nil {
		return fmt.Errorf("device 0: %w", err)
	}
	var logOut *os.File
	var logw *trace.CSVWriter
	if f.log != "" {
		if logOut, err = os.Create(f.log); err != nil {
			return err
		}
		defer logOut.Close()
		logw = trace.NewCSVWriter(logOut)
	}
	var results []*replay.Result
	for _, path := range traces {
		for _, name := range names {
			r, err := replayOne(ctx, stderr, dev, path, name, logw, f.html != "")
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	if logw != nil {
		if err := logw.Flush(); err != nil {
			return fmt.Errorf("--log %s: %w", f.log, err)
		}
		if err := logOut.Close(); err != nil {
			return fmt.Errorf("--log %s: %w", f.log, err)
		}
	}
	if f.html != "" {
		if err := writeHTML(f.html, results); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return writeReplayTable(stdout, results)
}

// replayOne replays one trace against a fresh resource.
func replayOne(ctx context.Context, stderr io.Writer, dev gpu.Device, path, name string, logw *trace.CSVWriter, series bool) (_ *replay.Result, err error) {
	tf, err := trace.Open(path, nil)
	if err != nil {
		return nil, err
	}
	defer tf.Close()
	res, err := newResource(name, dev)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := closeResource(res); cerr != nil && err == nil {
			err = fmt.Errorf("replay %s on %s: close: %w", path, name, cerr)
		}
	}()
	var top mr.Resource = res
	if logw != nil {
		top = mr.NewLoggingTo(res, logw, mr.LoggingOptions{})
	}
	opts := replay.Options{Resource: name}
	if series {
		opts.SeriesPoints = 2000
	}
	bar := newProgressBar(stderr, fmt.Sprintf("%s [%s]", path, name))
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
		return nil, fmt.Errorf("replay %s on %s: %w", path, name, err)
	}
	return r, nil
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

func writeReplayTable(w io.Writer, results []*replay.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trace\tresource\tdevice\tevents\tallocations\tpeak live\tpeak reserved\tfragmentation\tns/event\tfailures\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%.3f\t%.0f\t%d\t\n",
			r.Trace, r.Resource, r.Device, r.Events, r.Allocations,
			formatBytes(r.PeakLiveBytes), formatBytes(r.PeakReservedBytes),
			r.Fragmentation, r.NsPerEvent, r.Failures)
	}
	return tw.Flush()
}
