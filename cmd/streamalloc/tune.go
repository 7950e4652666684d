package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
	"github.com/streamalloc/streamalloc/tune"
)

type tuneFlags struct {
	resources string
	maxNs     float64
	maxFrag   float64
	workers   int
	json      bool
	check     bool
	// unvalidated lets the picks be settings whose simulated figures
	// were not checked against the card (tune.Setting.Validated).
	unvalidated bool
}

func newTuneCmd() *cobra.Command {
	var f tuneFlags
	cmd := &cobra.Command{
		Use:   "tune [flags] TRACE...",
		Short: "Pick a resource and its options for a workload from its traces, on the simulator",
		Long: `Replay allocation traces against a grid of settings of each resource (pool's
chunk size, release threshold and split_big; binning's bins; arena's sizes;
the driver pool's release threshold and reuse policies) on the simulated GPU,
in parallel, and print the setting that reserves least with at most
--max-ns host time per event, and the fastest whose fragmentation stays at
most --max-fragmentation on every trace, with the Go code and the
STREAMALLOC_CONF string that build each.

The suballocators' figures are exact (they decide the same on the simulator
as on the card); async's are the simulator's model of the driver's pool,
whose distance from the H100 BENCHMARKS.md's fidelity table gives. Host
times are the simulator's, from replays that share the machine's cores.
With --check the winners are replayed once more on --device (the GPU, where
there is one) and both figures are printed. The picks are made among the
settings whose simulated figures were checked against the card: every
suballocator setting, and async with its defaults; --unvalidated lets async
with a reuse policy off or a release threshold be picked too (the H100
reserved up to a third less or 8% more than the simulator there).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, _ := cmd.Flags().GetString("device")
			return runTune(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), kind, f, args)
		},
	}
	cmd.Flags().StringVar(&f.resources, "resource", "all", "resources to tune: a comma-separated list of "+fmt.Sprint(tuneSet())+", or all")
	cmd.Flags().Float64Var(&f.maxNs, "max-ns", 0, "the least-reserved pick takes at most `NS` host nanoseconds per event (0: no bound)")
	cmd.Flags().Float64Var(&f.maxFrag, "max-fragmentation", 0, "the fastest pick keeps peak reserved over peak live at most `R` on every trace (0: no bound)")
	cmd.Flags().IntVar(&f.workers, "workers", 0, "replays at once (0: GOMAXPROCS)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the outcome as a JSON object")
	cmd.Flags().BoolVar(&f.check, "check", false, "replay the picks again on --device and print what it reserved next to the prediction")
	cmd.Flags().BoolVar(&f.unvalidated, "unvalidated", false, "let the picks be settings whose simulated figures were not checked against the card (async with a reuse policy off or a release threshold)")
	return cmd
}

func tuneSet() registry.Set { return registry.Set(tune.Resources) }

// tunePick is one selected setting, with the code that builds it.
type tunePick struct {
	tune.Outcome
	Bound  float64 `json:"bound"` // the bound it was selected under (0: none)
	GoCode string  `json:"go"`
	Conf   string  `json:"conf,omitempty"`
	NoConf string  `json:"no_conf,omitempty"` // why there is no conf string
	// Checked is the peak reserved bytes of each trace replayed again on
	// --device, with --check.
	Checked []uint64 `json:"checked,omitempty"`
}

// tuneReport is what `streamalloc tune --json` prints.
type tuneReport struct {
	Traces        []string       `json:"traces"`
	Replays       int            `json:"replays"`
	LeastReserved tunePick       `json:"least_reserved"`
	Fastest       tunePick       `json:"fastest"`
	Defaults      []tune.Outcome `json:"defaults"`
	Outcomes      []tune.Outcome `json:"outcomes"`
	CheckDevice   string         `json:"check_device,omitempty"`
}

func runTune(ctx context.Context, stdout, stderr io.Writer, kind string, f tuneFlags, paths []string) error {
	names, err := tuneSet().Parse(f.resources)
	if err != nil {
		return fmt.Errorf("--resource: %w", err)
	}
	switch {
	case f.maxNs < 0:
		return fmt.Errorf("--max-ns %v: %w", f.maxNs, errNegative)
	case f.maxFrag < 0:
		return fmt.Errorf("--max-fragmentation %v: %w", f.maxFrag, errNegative)
	case f.workers < 0:
		return fmt.Errorf("--workers %d: %w", f.workers, errNegative)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var traces []*tune.Trace
	for _, p := range paths {
		tf, err := trace.Open(p, nil)
		if err != nil {
			return err
		}
		t, err := tune.Load(tf)
		tf.Close()
		if err != nil {
			return err
		}
		traces = append(traces, t)
	}
	grid, err := tune.Grid(names)
	if err != nil {
		return err
	}
	bar := newProgressBar(stderr, fmt.Sprintf("tune: %d settings × %d traces", len(grid), len(traces)))
	opts := tune.Options{NewDevice: newSimDevice, Workers: f.workers}
	if bar != nil {
		opts.Progress = func(done, total int) {
			bar.Set64(int64(done) * 1000 / int64(total))
			if done == total {
				bar.Finish()
			}
		}
	}
	outs, err := tune.Run(ctx, traces, grid, opts)
	if err != nil {
		return err
	}
	rep := tuneReport{Replays: len(grid) * len(traces), Outcomes: outs}
	for _, t := range traces {
		rep.Traces = append(rep.Traces, t.Name)
	}
	for _, o := range outs {
		if o.Setting == (tune.Setting{Resource: o.Setting.Resource}) {
			rep.Defaults = append(rep.Defaults, o)
		}
	}
	cands := outs
	if !f.unvalidated {
		cands = tune.ValidatedOnly(outs)
	}
	least, err := tune.LeastReserved(cands, f.maxNs)
	if err != nil {
		return fmt.Errorf("--max-ns: %w", err)
	}
	fast, err := tune.Fastest(cands, f.maxFrag)
	if err != nil {
		return fmt.Errorf("--max-fragmentation: %w", err)
	}
	rep.LeastReserved, rep.Fastest = pick(least, f.maxNs), pick(fast, f.maxFrag)
	if f.check {
		b, err := backend.Open(kind)
		if err != nil {
			return err
		}
		dev, err := b.Device(0)
		if err != nil {
			return fmt.Errorf("device 0: %w", err)
		}
		rep.CheckDevice = dev.Properties().Name
		for _, p := range []*tunePick{&rep.LeastReserved, &rep.Fastest} {
			if p.Checked, err = checkPick(ctx, dev, traces, p.Setting); err != nil {
				return err
			}
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeTune(stdout, rep)
}

func newSimDevice() (gpu.Device, error) {
	b, err := backend.Open("sim")
	if err != nil {
		return nil, err
	}
	return b.Device(0)
}

func pick(o tune.Outcome, bound float64) tunePick {
	p := tunePick{Outcome: o, Bound: bound, GoCode: o.Setting.GoCode()}
	if c, ok := o.Setting.Conf(); ok {
		p.Conf = c
	} else {
		p.NoConf = c
	}
	return p
}

// checkPick replays every trace against s on dev and returns each peak
// reserved.
func checkPick(ctx context.Context, dev gpu.Device, traces []*tune.Trace, s tune.Setting) ([]uint64, error) {
	var out []uint64
	for _, t := range traces {
		res, closeRes, err := s.Build(dev)
		if err != nil {
			return nil, err
		}
		r, err := replay.Run(ctx, t.Reader(), dev, res, replay.Options{Resource: s.Resource})
		if cerr := closeRes(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("--check %s on %s: %w", t.Name, s, err)
		}
		out = append(out, r.PeakReservedBytes)
	}
	return out, nil
}

func writeTune(w io.Writer, rep tuneReport) error {
	fmt.Fprintf(w, "%d traces, %d settings, %d replays on the simulator\n", len(rep.Traces), len(rep.Outcomes), rep.Replays)
	for _, x := range []struct {
		title string
		p     tunePick
	}{
		{fmt.Sprintf("least reserved (host time at most %s ns/event)", bound(rep.LeastReserved.Bound)), rep.LeastReserved},
		{fmt.Sprintf("fastest (fragmentation at most %s)", bound(rep.Fastest.Bound)), rep.Fastest},
	} {
		p := x.p
		note := ""
		if !p.Validated {
			note = " (not validated against the card: --unvalidated)"
		}
		fmt.Fprintf(w, "\n%s: %s%s\n", x.title, p.Setting, note)
		fmt.Fprintf(w, "  reserved %s over the traces, fragmentation at most %.3f, %.0f ns/event\n",
			formatBytes(p.ReservedBytes), p.MaxFragmentation, p.NsPerEvent)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "  trace\tpeak live\tpeak reserved\tfragmentation\t"
		if p.Checked != nil {
			head += rep.CheckDevice + "\tdifference\t"
		}
		fmt.Fprintln(tw, head)
		for i, t := range p.Traces {
			line := fmt.Sprintf("  %s\t%s\t%s\t%.3f\t", filepath.Base(t.Trace), formatBytes(t.PeakLiveBytes), formatBytes(t.PeakReservedBytes), t.Fragmentation)
			if p.Checked != nil {
				line += fmt.Sprintf("%s\t%+.1f%%\t", formatBytes(p.Checked[i]), 100*(float64(p.Checked[i])/float64(t.PeakReservedBytes)-1))
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "  Go:               %s\n", p.GoCode)
		if p.Conf != "" {
			fmt.Fprintf(w, "  STREAMALLOC_CONF: %s\n", p.Conf)
		} else {
			fmt.Fprintf(w, "  STREAMALLOC_CONF: none (%s)\n", p.NoConf)
		}
	}
	fmt.Fprintln(w, "\ndefaults:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, o := range rep.Defaults {
		fmt.Fprintf(tw, "  %s\treserved %s\tfragmentation at most %.3f\t%.0f ns/event\n", o.Setting, formatBytes(o.ReservedBytes), o.MaxFragmentation, o.NsPerEvent)
	}
	return tw.Flush()
}

func bound(b float64) string {
	if b == 0 {
		return "any"
	}
	return fmt.Sprint(b)
}
