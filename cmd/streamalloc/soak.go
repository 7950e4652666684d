// streamalloc soak: package soak's run of the recommended stack, for a
// set time, on the device --device picks.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/soak"
)

type soakFlags struct {
	duration   time.Duration
	interval   time.Duration
	goroutines int
	minSize    int
	maxSize    int
	seed       uint64
	json       bool
}

// errSoakFailed is the error of a soak that found corruption, a leak or
// inconsistent counters.
var errSoakFailed = errors.New("soak failed")

func newSoakCmd() *cobra.Command {
	var f soakFlags
	cmd := &cobra.Command{
		Use:   "soak [flags]",
		Short: "Run the recommended stack under load and check every byte",
		Long: `Run a Pool over an Async resource (with a driver pool of its own) from many
goroutines, each on its own stream, for --duration: random sizes, memory
filled with a pattern by a kernel and checked by a kernel before its free,
allocations handed between goroutines behind events, and buffers handed
between streams. A line per --interval gives operations, bytes used and
reserved, the live Go heap and the resident set; the summary gives the
corrupted words, the bytes leaked, the device memory not returned, and the
pool's counters. It exits with an error unless nothing was corrupted or
leaked and the counters agree.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, _ := cmd.Flags().GetString("device")
			return runSoak(cmd, kind, f)
		},
	}
	cmd.Flags().DurationVar(&f.duration, "duration", 10*time.Minute, "how long to run")
	cmd.Flags().DurationVar(&f.interval, "interval", 0, "time between progress lines (default: a tenth of --duration)")
	cmd.Flags().IntVar(&f.goroutines, "goroutines", 16, "goroutines, each on its own stream")
	cmd.Flags().IntVar(&f.minSize, "min-size", 256, "smallest allocation in bytes")
	cmd.Flags().IntVar(&f.maxSize, "max-size", 4<<20, "largest allocation in bytes")
	cmd.Flags().Uint64Var(&f.seed, "seed", 0, "seed of the random choices")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the result as JSON after the log")
	return cmd
}

func runSoak(cmd *cobra.Command, kind string, f soakFlags) error {
	if f.duration <= 0 || f.goroutines <= 0 || f.minSize <= 0 || f.maxSize < f.minSize || f.interval < 0 {
		return fmt.Errorf("soak: --duration %v, --goroutines %d, --min-size %d, --max-size %d, --interval %v: %w",
			f.duration, f.goroutines, f.minSize, f.maxSize, f.interval, errNotPositive)
	}
	b, err := backend.Open(kind)
	if err != nil {
		return err
	}
	dev, err := b.Device(0)
	if err != nil {
		return fmt.Errorf("device 0: %w", err)
	}
	out := cmd.OutOrStdout()
	if b.Simulated() {
		fmt.Fprintln(out, "SIMULATED GPU: no GPU in use; the figures are the simulator's")
	}
	res, err := soak.Run(cmd.Context(), dev, soak.Options{
		Duration: f.duration, Interval: f.interval, Goroutines: f.goroutines,
		MinSize: f.minSize, MaxSize: f.maxSize, Seed: f.seed, Log: out,
	})
	if res != nil && f.json {
		if jerr := writeSoakJSON(out, res); jerr != nil {
			return jerr
		}
	}
	if err != nil {
		return err
	}
	if !res.OK() {
		return fmt.Errorf("%w: %d corrupted words, %d bytes leaked, %d device bytes not returned, counters agree %v",
			errSoakFailed, res.CorruptedWords, res.LeakedBytes, res.DeviceBytesNotReturned, res.CountersAgree)
	}
	return nil
}

func writeSoakJSON(w io.Writer, res *soak.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
