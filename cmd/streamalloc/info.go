package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
)

func newInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the devices, the driver version and memory-pool support",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, _ := cmd.Flags().GetString("device")
			b, err := backend.Open(kind)
			if err != nil {
				return err
			}
			return writeInfo(cmd.OutOrStdout(), b)
		},
	}
}

// writeInfo prints one block per device of b, and says plainly when the
// devices are simulated.
func writeInfo(w io.Writer, b gpu.Backend) error {
	ver, err := b.DriverVersion()
	if err != nil {
		return fmt.Errorf("info: driver version: %w", err)
	}
	n, err := b.DeviceCount()
	if err != nil {
		return fmt.Errorf("info: device count: %w", err)
	}
	if b.Simulated() {
		fmt.Fprintln(w, "backend: sim (SIMULATED GPU: no CUDA device or driver in use)")
	} else {
		fmt.Fprintf(w, "backend: %s\n", b.Name())
	}
	fmt.Fprintf(w, "driver version: %d.%d\n", ver/1000, ver%1000/10)
	fmt.Fprintf(w, "devices: %d\n", n)
	for i := range n {
		d, err := b.Device(i)
		if err != nil {
			return fmt.Errorf("info: device %d: %w", i, err)
		}
		p := d.Properties()
		free, total, err := d.MemGetInfo()
		if err != nil {
			return fmt.Errorf("info: device %d: memory: %w", i, err)
		}
		sim := ""
		if p.Simulated {
			sim = " (simulated)"
		}
		fmt.Fprintf(w, "device %d: %s%s\n", i, p.Name, sim)
		fmt.Fprintf(w, "  compute capability: %d.%d\n", p.ComputeMajor, p.ComputeMinor)
		fmt.Fprintf(w, "  memory: %s total, %s free\n", formatBytes(total), formatBytes(free))
		fmt.Fprintf(w, "  stream-ordered memory pools: %v\n", p.MemoryPoolsSupported)
	}
	return nil
}

// formatBytes renders n in binary units with one decimal.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
