// The convert command: any trace the replayer reads, written out as an
// RMM CSV log.
//
// A PyTorch snapshot becomes the events trace/torchsnap reads from it,
// synthetic allocations of blocks live before the history began included,
// so replaying the CSV replays exactly what replaying the snapshot does
// (the snapshot's stack frames and segment layout are not events and are
// dropped). The output is gzip'd when its name ends in .gz. It is written
// to a temporary file beside the target and renamed into place only when
// every event is written, so a failed conversion leaves no partial file.

package main

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/trace"
)

func newConvertCmd() *cobra.Command {
	var maxExpansion int
	cmd := &cobra.Command{
		Use:   "convert [flags] TRACE OUT",
		Short: "Write a trace (RMM CSV log or PyTorch snapshot) as an RMM CSV log",
		Long: `Write the events of a trace (an RMM CSV log or a PyTorch memory snapshot,
plain or gzip) to OUT as an RMM CSV log, gzip'd when OUT ends in .gz.

Replaying OUT replays the same events as replaying TRACE: for a snapshot,
the allocations and frees the replayer reads from it, blocks live before
its history began included; stack frames and segments are dropped.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxExpansion < 0 {
				return fmt.Errorf("--max-expansion %d: %w", maxExpansion, errNegative)
			}
			n, err := convertTrace(args[0], args[1], maxExpansion)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d events written to %s\n", args[0], n, args[1])
			return nil
		},
	}
	cmd.Flags().IntVar(&maxExpansion, "max-expansion", trace.DefaultMaxExpansion,
		"refuse a PyTorch snapshot with more than `N` trace entries and segment blocks per KiB of pickle, counting each reference to a repeated one (0: the default)")
	return cmd
}

// convertTrace writes the events of the trace at in to out as an RMM CSV
// log and returns how many it wrote. On any error out is left as it was.
func convertTrace(in, out string, maxExpansion int) (n int64, err error) {
	tf, err := trace.Open(in, &trace.Options{MaxExpansion: maxExpansion})
	if err != nil {
		return 0, fmt.Errorf("convert: %w", err)
	}
	defer tf.Close()
	tmp, err := os.CreateTemp(filepath.Dir(out), ".convert-*")
	if err != nil {
		return 0, fmt.Errorf("convert: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var w io.Writer = tmp
	var gz *gzip.Writer
	if strings.HasSuffix(out, ".gz") {
		gz = gzip.NewWriter(tmp)
		w = gz
	}
	cw := trace.NewCSVWriter(w)
	for {
		e, err := tf.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("convert: %w", err)
		}
		if err := cw.Write(e); err != nil {
			return n, fmt.Errorf("convert: %s: %w", out, err)
		}
		n++
	}
	if err := cw.Flush(); err != nil {
		return n, fmt.Errorf("convert: %s: %w", out, err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return n, fmt.Errorf("convert: %s: %w", out, err)
		}
	}
	// CreateTemp makes the file readable by its owner alone; the output is
	// an ordinary file.
	if err := tmp.Chmod(0o644); err != nil {
		return n, fmt.Errorf("convert: %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return n, fmt.Errorf("convert: %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return n, fmt.Errorf("convert: %w", err)
	}
	return n, nil
}
